//! The device-to-device entries ggml calls, driven as ggml would (backends
//! from `init_backend`, tensors as ggml structs over polycl buffers): the
//! `ggml_backend_comm_*` all-reduce of `-sm tensor`, `cpy_tensor_async`, and
//! events. Needs two OpenCL devices (PoCL: `POCL_DEVICES="pthread pthread"`,
//! set here when unset); with one device the tests say so and pass.

use ggml_polycl::backend::{comm, reg, stream};
use ggml_polycl::ggml::abi::*;
use ggml_polycl::runtime::{counters, devices, Device, DeviceBuffer};
use parking_lot::Mutex;
use std::sync::{Arc, Once};

static SERIAL: Mutex<()> = Mutex::new(());

fn two_devices() -> Option<Vec<Arc<Device>>> {
    static ENV: Once = Once::new();
    ENV.call_once(|| {
        if std::env::var_os("POCL_DEVICES").is_none() {
            std::env::set_var("POCL_DEVICES", "pthread pthread");
        }
    });
    let d = devices().expect("an OpenCL device (install pocl-opencl-icd)");
    if d.len() < 2 {
        eprintln!(
            "multi-device tests need two OpenCL devices; found {}",
            d.len()
        );
        return None;
    }
    Some(d[..2].to_vec())
}

/// A backend of polycl device `i`, as ggml makes it.
fn backend(i: usize) -> ggml_backend_t {
    let dev = reg::plugin().devices[i];
    // SAFETY: one of polycl's devices.
    let b = unsafe { stream::init_backend(dev, std::ptr::null()) };
    assert!(!b.is_null());
    b
}

fn free_backend(b: ggml_backend_t) {
    // SAFETY: made by init_backend; freed once.
    unsafe { ((*b).iface.free.unwrap())(b) };
}

/// An F32 tensor of `n` elements at the start of `buf`, as ggml lays it out.
fn tensor(buf: &DeviceBuffer, n: i64, compute: bool) -> Box<ggml_tensor> {
    // SAFETY: ggml_tensor is plain data; all-zero is a valid (empty) tensor.
    let mut t: Box<ggml_tensor> = Box::new(unsafe { std::mem::zeroed() });
    t.type_ = 0;
    t.ne = [n, 1, 1, 1];
    t.nb = [4, 4 * n as usize, 4 * n as usize, 4 * n as usize];
    t.data = buf.base as *mut std::ffi::c_void;
    t.flags = if compute { TENSOR_FLAG_COMPUTE } else { 0 };
    t
}

fn put(buf: &DeviceBuffer, v: &[f32]) {
    let b: Vec<u8> = v.iter().flat_map(|x| x.to_ne_bytes()).collect();
    buf.write(0, &b).unwrap();
}

fn get(buf: &DeviceBuffer, n: usize) -> Vec<u32> {
    let mut b = vec![0u8; 4 * n];
    buf.read(0, &mut b).unwrap();
    b.chunks_exact(4)
        .map(|c| u32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn vals(n: usize, k: f32) -> Vec<f32> {
    (0..n)
        .map(|i| ((i as f32) * 0.37 + k).sin() * 3.1)
        .collect()
}

#[test]
fn allreduce_sums_in_place_on_every_device() {
    let Some(devs) = two_devices() else { return };
    let _s = SERIAL.lock();
    let n = 1000usize;
    let (b0, b1) = (backend(0), backend(1));
    let mut bk = [b0, b1];
    // SAFETY: two polycl backends.
    let ctx = unsafe { comm::comm_init(bk.as_mut_ptr(), 2) };
    assert!(!ctx.is_null(), "devices of one platform share a context");
    let d0 = DeviceBuffer::alloc(&devs[0], 4 * n).unwrap();
    let d1 = DeviceBuffer::alloc(&devs[1], 4 * n).unwrap();
    let (a, b) = (vals(n, 0.0), vals(n, 1.0));
    for (c0, c1) in [(true, true), (true, false), (false, true)] {
        put(&d0, &a);
        put(&d1, &b);
        let mut t0 = tensor(&d0, n as i64, c0);
        let mut t1 = tensor(&d1, n as i64, c1);
        let mut ts = [&mut *t0 as *mut ggml_tensor, &mut *t1 as *mut ggml_tensor];
        let before = counters::snapshot();
        // SAFETY: ctx from comm_init, one tensor per device.
        assert!(unsafe { comm::comm_allreduce_tensor(ctx, ts.as_mut_ptr()) });
        assert_eq!((counters::snapshot() - before).allreduces, 1);
        for d in &devs {
            d.synchronize().unwrap();
        }
        // As ggml's fallback: a disabled slice counts as zero, sums are t0 + t1.
        let want: Vec<u32> = a
            .iter()
            .zip(&b)
            .map(|(x, y)| {
                let x = if c0 { *x } else { 0.0 };
                let y = if c1 { *y } else { 0.0 };
                (x + y).to_bits()
            })
            .collect();
        assert!(
            get(&d0, n) == want,
            "device 0 after all-reduce ({c0}, {c1})"
        );
        assert!(
            get(&d1, n) == want,
            "device 1 after all-reduce ({c0}, {c1})"
        );
    }
    // Non-F32 tensors are declined, so the meta backend uses its fallback.
    let mut t0 = tensor(&d0, n as i64, true);
    let mut t1 = tensor(&d1, n as i64, true);
    t0.type_ = 1;
    t1.type_ = 1;
    let mut ts = [&mut *t0 as *mut ggml_tensor, &mut *t1 as *mut ggml_tensor];
    // SAFETY: as above.
    assert!(!unsafe { comm::comm_allreduce_tensor(ctx, ts.as_mut_ptr()) });
    // SAFETY: from comm_init, freed once.
    unsafe { comm::comm_free(ctx) };
    DeviceBuffer::release(d0.base);
    DeviceBuffer::release(d1.base);
    free_backend(b0);
    free_backend(b1);
}

#[test]
fn async_copies_and_events_cross_devices() {
    let Some(devs) = two_devices() else { return };
    let _s = SERIAL.lock();
    let n = 4096usize;
    let (b0, b1) = (backend(0), backend(1));
    let s = DeviceBuffer::alloc(&devs[0], 4 * n).unwrap();
    let d = DeviceBuffer::alloc(&devs[1], 4 * n).unwrap();
    let v = vals(n, 2.0);
    put(&s, &v);
    d.fill(0, d.size, 0).unwrap();
    let ts = tensor(&s, n as i64, true);
    let mut td = tensor(&d, n as i64, true);
    let before = counters::snapshot();
    // SAFETY: polycl backends; tensors in polycl buffers on their devices.
    let ok = unsafe { comm::cpy_tensor_async(b0, b1, &*ts, &mut *td) };
    assert!(ok, "a copy between devices of one context is served");
    assert_eq!((counters::snapshot() - before).async_copies, 1);
    // An event recorded on the destination after the copy covers it.
    // SAFETY: ggml's event protocol on polycl devices and backends.
    unsafe {
        let dev1 = reg::plugin().devices[1];
        let ev = comm::event_new(dev1);
        assert!(!ev.is_null());
        comm::event_record(b1, ev);
        comm::event_wait(b0, ev);
        comm::event_synchronize(dev1, ev);
        let want: Vec<u32> = v.iter().map(|x| x.to_bits()).collect();
        assert!(get(&d, n) == want);
        comm::event_free(dev1, ev);
    }
    // A host tensor (not in a polycl buffer) is declined: ggml copies through the host.
    let host = vec![0f32; n];
    let mut th = tensor(&s, n as i64, true);
    th.data = host.as_ptr() as *mut std::ffi::c_void;
    // SAFETY: as above; `th` points at host memory.
    assert!(!unsafe { comm::cpy_tensor_async(b0, b1, &*th, &mut *td) });
    DeviceBuffer::release(s.base);
    DeviceBuffer::release(d.base);
    free_backend(b0);
    free_backend(b1);
}
