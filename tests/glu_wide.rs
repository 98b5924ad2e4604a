//! The GLU kernel 16 warps wide (`kernel_mul_mv_glu16_q4_0`, which
//! plan/fused_matmul.rs `glu_shape` picks on NVIDIA for GLUs of few
//! work-groups) computes, bit for bit, what the 8-warp kernel that every
//! other device runs computes: each row's dot product is one warp's in both,
//! only the rows a warp takes in sequence differ. What the 8-warp kernel
//! computes is checked against ggml's CPU backend by the greedy runs.
//!
//! On rows of more than 64 blocks the 8-warp kernel's lanes take two blocks
//! at a time (mul_mv.cl MV_PAIRS, the default) while the 16-warp kernel
//! keeps a block a lane: there the two must agree up to float summation
//! order, and differ in some bits (which shows the pairs path ran).

mod quant_blocks;

use ggml_polycl::runtime::executor::{ArgBinder, Launch, Operand};
use ggml_polycl::runtime::program::{build_source_with, PROGRAMS};
use ggml_polycl::runtime::{devices, Device, DeviceBuffer};
use opencl3::kernel::Kernel;
use quant_blocks::{blocks, Q8_1_BLOCK};
use std::sync::Arc;

const ROWS: usize = 96;
const Q4_0_BLOCK: usize = 18;

/// A contiguous tensor of `ne` whose elements (blocks, for weights) take
/// `nb0` bytes and rows `row_bytes`.
fn operand(b: &DeviceBuffer, ne: [i64; 4], nb0: u64, row_bytes: u64) -> Operand {
    let all = row_bytes * ne[1] as u64;
    Operand {
        mem: b.cl_mem(),
        offset: 0,
        ne,
        nb: [nb0, row_bytes, all, all],
    }
}

/// `name` launched `warps` warps wide over gate `wg` and up `wu` (rows of
/// `k` elements) with activation `act`: its gate, up and GLU rows and their
/// Q8_1 blocks.
fn run(
    dev: &Arc<Device>,
    name: &str,
    warps: usize,
    k: usize,
    w: (&DeviceBuffer, &DeviceBuffer),
    act: &DeviceBuffer,
) -> Vec<u8> {
    let (_, sources) = PROGRAMS.iter().find(|(n, _)| *n == "mul_mv").unwrap();
    let program = build_source_with(dev, "mul_mv", &sources.join("\n"), "").unwrap();
    let kernel = Kernel::create(&program, name).unwrap();
    let row_bytes = (k / 32 * Q4_0_BLOCK) as u64;
    let outs: Vec<_> = (0..3)
        .map(|_| DeviceBuffer::alloc(dev, ROWS * 4).unwrap())
        .collect();
    let q8 = DeviceBuffer::alloc(dev, ROWS / 32 * Q8_1_BLOCK).unwrap();
    let dn = DeviceBuffer::alloc(dev, 4).unwrap();
    let out_op = |b: &DeviceBuffer| operand(b, [ROWS as i64, 1, 1, 1], 4, 4 * ROWS as u64);
    let w_op = |b: &DeviceBuffer| {
        operand(
            b,
            [k as i64, ROWS as i64, 1, 1],
            Q4_0_BLOCK as u64,
            row_bytes,
        )
    };
    let mut a = ArgBinder::new(&kernel);
    a.tensor(&w_op(w.0))
        .unwrap()
        .tensor(&w_op(w.1))
        .unwrap()
        .ptr(act.cl_mem(), 0)
        .unwrap();
    for o in &outs {
        a.tensor_out(&out_op(o)).unwrap();
    }
    // Q8_1 blocks of the GLU rows, and no norm (0 shares: factor 1).
    a.ptr_out(q8.cl_mem(), 0).unwrap().i32(1).unwrap();
    a.ptr(dn.cl_mem(), 0)
        .unwrap()
        .i32(0)
        .unwrap()
        .i64(1)
        .unwrap()
        .f32(0.0)
        .unwrap();
    let packed = a.finish(dev).unwrap();
    let launch = Launch {
        kernel,
        global: [ROWS.div_ceil(32) * warps * 32, 1, 1],
        local: Some([warps * 32, 1, 1]),
        dims: 1,
        kind: "test",
        packed,
    };
    launch.enqueue(dev).unwrap();
    let mut all = Vec::new();
    for o in &outs {
        let mut bytes = vec![0u8; ROWS * 4];
        o.read(0, &mut bytes).unwrap();
        all.extend(bytes);
    }
    let mut bytes = vec![0u8; ROWS / 32 * Q8_1_BLOCK];
    q8.read(0, &mut bytes).unwrap();
    all.extend(bytes);
    all
}

/// The 8-warp and the 16-warp GLU kernels' outputs (`run`) on the same
/// pseudo-random gate, up and activation blocks, rows of `k` elements.
fn narrow_and_wide(k: usize) -> (Vec<u8>, Vec<u8>) {
    std::env::set_var("POLYCL_FAST_KERNELS", "1");
    let dev = devices().expect("an OpenCL device (install pocl-opencl-icd)")[0].clone();
    let n = ROWS * k / 32;
    let wg = DeviceBuffer::alloc(&dev, n * Q4_0_BLOCK).unwrap();
    wg.write(0, &blocks(1, n, Q4_0_BLOCK)).unwrap();
    let wu = DeviceBuffer::alloc(&dev, n * Q4_0_BLOCK).unwrap();
    wu.write(0, &blocks(2, n, Q4_0_BLOCK)).unwrap();
    let act = DeviceBuffer::alloc(&dev, k / 32 * Q8_1_BLOCK).unwrap();
    act.write(0, &blocks(3, k / 32, Q8_1_BLOCK)).unwrap();
    let narrow = run(
        &dev,
        "kernel_mul_mv_glu_q4_0",
        dev.glu_warps(),
        k,
        (&wg, &wu),
        &act,
    );
    let wide = run(&dev, "kernel_mul_mv_glu16_q4_0", 16, k, (&wg, &wu), &act);
    (narrow, wide)
}

fn floats(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

#[test]
fn the_wide_glu_kernel_computes_what_the_default_one_does() {
    let (narrow, wide) = narrow_and_wide(512);
    assert!(
        narrow[..ROWS * 4].iter().any(|&b| b != 0),
        "the kernel wrote its rows"
    );
    assert_eq!(wide, narrow);
}

#[test]
fn block_pairs_on_long_rows_agree_with_a_block_a_lane() {
    // A 7B's GLU rows: 128 blocks, two pairs a lane in the 8-warp kernel.
    let (pairs, words) = narrow_and_wide(4096);
    // Gate, up and GLU rows (the Q8_1 blocks after them may round apart).
    let (p, w) = (
        floats(&pairs[..3 * ROWS * 4]),
        floats(&words[..3 * ROWS * 4]),
    );
    let scale = w.iter().fold(0f32, |m, v| m.max(v.abs()));
    assert!(scale > 0.0, "the kernels wrote their rows");
    for (i, (a, b)) in p.iter().zip(&w).enumerate() {
        assert!(
            (a - b).abs() <= 1e-5 * scale,
            "value {i}: pairs {a}, words {b} (largest {scale})"
        );
    }
    assert_ne!(
        p, w,
        "the pairs path sums in another order; equal bits mean it did not run"
    );
}
