//! A device whose work-groups are narrower than a fast kernel's
//! (`POLYCL_MAX_WORK_GROUP` plays one on PoCL): the fusions that need wider
//! groups are not made, and a launch the device cannot run is a plan error
//! that names the kernel, not a failed enqueue. One test, so that it sets the
//! environment before anything in this process reads the configuration.

use ggml_polycl::ggml::types::GgmlType::{F32, Q4_0};
use ggml_polycl::ir::{GluKind, Graph, MemRef, Op, Output, Place, TensorType, Value};
use ggml_polycl::passes::fuse;
use ggml_polycl::plan::Plan;
use ggml_polycl::runtime::{devices, DeviceBuffer};
use std::sync::Arc;

const E: i64 = 256;
const ROWS: i64 = 512;

fn node(g: &mut Graph, op: Op, inputs: Vec<Value>, ty: TensorType, at: &DeviceBuffer) -> Value {
    let out = Output {
        ty,
        place: Place::Bound(MemRef {
            buffer: at.base,
            offset: 0,
        }),
    };
    let id = g.add(op, inputs, vec![out], "n");
    Value::new(id, 0)
}

#[test]
fn kernels_wider_than_the_device_allows_are_refused_by_name() {
    std::env::set_var("POLYCL_MAX_WORK_GROUP", "128");
    std::env::set_var("POLYCL_FAST_KERNELS", "1");
    let dev = devices().expect("an OpenCL device (install pocl-opencl-icd)")[0].clone();
    assert_eq!(dev.max_work_group, 128);
    // The GLU kernel runs 8 warps a group: asking for 16 gives 8 here too.
    assert_eq!(dev.glu_warps(), 8);

    // llama's gate and up matmuls of one token and their swiglu.
    let buf =
        |bytes: i64| -> Arc<DeviceBuffer> { DeviceBuffer::alloc(&dev, bytes as usize).unwrap() };
    let (xb, wgb, wub) = (buf(4 * E), buf(ROWS * E / 32 * 18), buf(ROWS * E / 32 * 18));
    let (gb, ub, yb) = (buf(4 * ROWS), buf(4 * ROWS), buf(4 * ROWS));
    let row = |n: i64| TensorType::contiguous(F32, [n, 1, 1, 1]);
    let weight = TensorType::contiguous(Q4_0, [E, ROWS, 1, 1]);
    let mut g = Graph::default();
    let x = node(&mut g, Op::Parameter, vec![], row(E), &xb);
    let wg = node(&mut g, Op::Parameter, vec![], weight.clone(), &wgb);
    let wu = node(&mut g, Op::Parameter, vec![], weight, &wub);
    let gate = node(&mut g, Op::MulMat, vec![wg, x], row(ROWS), &gb);
    let up = node(&mut g, Op::MulMat, vec![wu, x], row(ROWS), &ub);
    let glu = Op::Glu {
        kind: GluKind::Swiglu,
        swapped: false,
    };
    let y = node(&mut g, glu, vec![gate, up], row(ROWS), &yb);
    g.results.push(y);

    let fused = fuse::run_for(&mut g, dev.max_work_group);
    assert_eq!(fused.matmul_glu, 1);
    let err = Plan::build(&g, &dev)
        .err()
        .expect("the GLU kernel's 256-wide groups");
    let msg = err.to_string();
    assert!(
        msg.contains("kernel_mul_mv_glu_q4_0") && msg.contains("256") && msg.contains("128"),
        "{msg}"
    );
}
