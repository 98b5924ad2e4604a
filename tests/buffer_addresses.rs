//! The decode kernels built to take their buffers by address
//! (runtime/addresses.rs; `POLYCL_BUFFER_ADDRESSES=1` here, on PoCL), all of
//! them or only the ones they read, compute, bit for bit, what the same
//! kernels given their buffers as arguments compute. One test, so that it
//! sets the environment before anything in this process reads the
//! configuration. What both compute is checked against
//! ggml's CPU backend by the greedy and test-backend-ops runs, which CI makes
//! with buffers by address too.

mod quant_blocks;

use ggml_polycl::config::BufferAddresses;
use ggml_polycl::runtime::executor::{ArgBinder, Launch, Operand};
use ggml_polycl::runtime::program::{build_source_with, PROGRAMS};
use ggml_polycl::runtime::{addresses, devices, Device, DeviceBuffer};
use opencl3::kernel::Kernel;
use quant_blocks::{blocks, Q8_1_BLOCK};
use std::sync::Arc;

const K: usize = 512;
const ROWS: usize = 64;
const Q8_0_BLOCK: usize = 34;

fn operand(b: &DeviceBuffer, ne: [i64; 4], nb: [u64; 4]) -> Operand {
    Operand {
        mem: b.cl_mem(),
        offset: 0,
        ne,
        nb,
    }
}

/// kernel_mul_mv_q8_0 built with `options`, bound and run once; its output.
fn run(dev: &Arc<Device>, options: &str, w: &DeviceBuffer, act: &DeviceBuffer) -> (u32, Vec<u8>) {
    let (_, sources) = PROGRAMS.iter().find(|(n, _)| *n == "mul_mv").unwrap();
    let program = build_source_with(dev, "mul_mv", &sources.join("\n"), options).unwrap();
    let kernel = Kernel::create(&program, "kernel_mul_mv_q8_0").unwrap();
    let args = kernel.num_args().unwrap();
    let dst = DeviceBuffer::alloc(dev, ROWS * 4).unwrap();
    let blocks = (K / 32) as u64;
    let w_op = operand(
        w,
        [K as i64, ROWS as i64, 1, 1],
        [
            Q8_0_BLOCK as u64,
            blocks * 34,
            blocks * 34 * ROWS as u64,
            blocks * 34 * ROWS as u64,
        ],
    );
    let d_op = operand(
        &dst,
        [ROWS as i64, 1, 1, 1],
        [4, 4 * ROWS as u64, 4 * ROWS as u64, 4 * ROWS as u64],
    );
    let act_nb = [Q8_1_BLOCK as u64, blocks * 36, blocks * 36, blocks * 36];
    let mut a = ArgBinder::new(&kernel);
    a.tensor(&w_op)
        .unwrap()
        .ptr(act.cl_mem(), 0)
        .unwrap()
        .u64x4(act_nb)
        .unwrap()
        .i64x4([K as i64, 1, 1, 1])
        .unwrap()
        .tensor_out(&d_op)
        .unwrap();
    let packed = a.finish(dev).unwrap();
    assert!(packed.is_some(), "kernel_mul_mv_q8_0 is a packed kernel");
    // 4 row groups (MV_ROWS) of 32 lanes a work-group, two rows a row group.
    let launch = Launch {
        kernel,
        global: [ROWS / 8 * 128, 1, 1],
        local: Some([128, 1, 1]),
        dims: 3,
        kind: "test",
        packed,
    };
    launch.enqueue(dev).unwrap();
    let mut out = vec![0u8; ROWS * 4];
    dst.read(0, &mut out).unwrap();
    (args, out)
}

#[test]
fn kernels_by_address_compute_what_kernels_by_argument_do() {
    std::env::set_var("POLYCL_BUFFER_ADDRESSES", "1");
    std::env::set_var("POLYCL_FAST_KERNELS", "1");
    let dev = devices().expect("an OpenCL device (install pocl-opencl-icd)")[0].clone();
    assert!(
        addresses::on(&dev),
        "a device alone in its context, asked for, passes the address check"
    );
    let w = DeviceBuffer::alloc(&dev, ROWS * K / 32 * Q8_0_BLOCK).unwrap();
    w.write(0, &blocks(1, ROWS * K / 32, Q8_0_BLOCK)).unwrap();
    let act = DeviceBuffer::alloc(&dev, K / 32 * Q8_1_BLOCK).unwrap();
    act.write(0, &blocks(2, K / 32, Q8_1_BLOCK)).unwrap();

    let (args_by_argument, by_argument) = run(&dev, "", &w, &act);
    assert_eq!(args_by_argument, 4, "w, act, dst and its slots");
    assert!(
        by_argument.iter().any(|&b| b != 0),
        "the kernel wrote its rows"
    );
    for mode in [BufferAddresses::All, BufferAddresses::Reads] {
        let options = addresses::build_defines(mode);
        assert_eq!(addresses::mode_of_options(options), mode);
        let (args, by_address) = run(&dev, options, &w, &act);
        assert_eq!(args, 4, "{mode:?}: the same arguments, some as addresses");
        assert_eq!(by_address, by_argument, "{mode:?}");
    }

    // While a plan binds its launches (a BindScope), each buffer's address
    // is asked of the device once; outside one, every time.
    let mems = [w.cl_mem(), act.cl_mem()];
    let alone = addresses::resolve(&dev, &mems).unwrap();
    let before = addresses::round_trips();
    {
        let _scope = addresses::BindScope::begin();
        assert_eq!(addresses::resolve(&dev, &mems).unwrap(), alone);
        assert_eq!(addresses::resolve(&dev, &mems[1..]).unwrap(), alone[1..]);
        assert_eq!(addresses::resolve(&dev, &mems).unwrap(), alone);
        assert_eq!(addresses::round_trips(), before + 1);
        // One inside another starts empty and gives the outer one back.
        {
            let _inner = addresses::BindScope::begin();
            assert_eq!(addresses::resolve(&dev, &mems).unwrap(), alone);
        }
        assert_eq!(addresses::resolve(&dev, &mems).unwrap(), alone);
        assert_eq!(addresses::round_trips(), before + 2);
    }
    assert_eq!(addresses::resolve(&dev, &mems).unwrap(), alone);
    assert_eq!(addresses::round_trips(), before + 3);
}
