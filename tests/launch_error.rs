//! A fixed-width launch that the driver refuses at enqueue comes back as an
//! error naming the kernel and the width asked, not a bare status
//! (plan/lower.rs `grid` plans by the device's limit only, since NVIDIA's
//! per-kernel answer is below what it runs).

use ggml_polycl::error::Error;
use ggml_polycl::runtime::devices;
use ggml_polycl::runtime::executor::Launch;
use ggml_polycl::runtime::program::build_source;
use opencl3::kernel::Kernel;

#[test]
fn a_refused_launch_names_its_kernel_and_width() {
    let dev = devices().expect("an OpenCL device (install pocl-opencl-icd)")[0].clone();
    let program = build_source(
        &dev,
        "launch_error",
        "kernel void wide_noop(global int *x) { if (get_global_id(0) == 0) x[0] = 1; }",
    )
    .unwrap();
    let kernel = Kernel::create(&program, "wide_noop").unwrap();
    let out = ggml_polycl::runtime::DeviceBuffer::alloc(&dev, 4).unwrap();
    // SAFETY: the argument is a live buffer of the kernel's one parameter.
    unsafe { kernel.set_arg(0, &out.cl_mem()) }.unwrap();
    // Twice what the device allows a group: every driver refuses it.
    let width = dev.max_work_group * 2;
    let launch = Launch {
        kernel,
        global: [width, 1, 1],
        local: Some([width, 1, 1]),
        dims: 1,
        kind: "test",
        packed: None,
    };
    let err = launch.enqueue(&dev).unwrap_err();
    match &err {
        Error::Launch {
            kernel, work_group, ..
        } => {
            assert_eq!(kernel, "wide_noop");
            assert_eq!(*work_group, width);
        }
        other => panic!("expected a named launch error, got {other:?}"),
    }
    let text = err.to_string();
    assert!(
        text.contains("wide_noop") && text.contains(&width.to_string()),
        "{text}"
    );
}
