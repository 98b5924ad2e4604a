//! A device that shares its OpenCL context with another never takes buffers
//! by address, even when asked (`POLYCL_BUFFER_ADDRESSES=1`): a driver may
//! move a buffer between the devices of a context without knowing that a
//! kernel reaches it (runtime/addresses.rs). Its packed kernels keep their
//! buffer arguments and still run. PoCL with `POCL_DEVICES="pthread pthread"`
//! gives two devices of one platform, which polycl puts in one context.

use ggml_polycl::runtime::program::{kernel, PACKED};
use ggml_polycl::runtime::{addresses, devices};

#[test]
fn devices_sharing_a_context_keep_buffer_arguments() {
    // Before the first OpenCL call of this process: PoCL reads it once.
    std::env::set_var("POCL_DEVICES", "pthread pthread");
    std::env::set_var("POLYCL_BUFFER_ADDRESSES", "1");
    let d = devices().expect("an OpenCL device (install pocl-opencl-icd)");
    assert!(d.len() >= 2, "two PoCL devices, found {}", d.len());
    for dev in &d[..2] {
        assert!(dev.context.devices().len() > 1, "one context for both");
        assert!(
            !addresses::on(dev),
            "{}: asked, but not alone in its context",
            dev.name
        );
    }
    // A packed kernel of a program that would take addresses keeps its
    // buffers as arguments: w, act, dst and its slots.
    assert!(PACKED.contains(&"kernel_mul_mv_q8_0"));
    let k = kernel(&d[0], "mul_mv", "kernel_mul_mv_q8_0").unwrap();
    assert_eq!(k.num_args().unwrap(), 4);
}
