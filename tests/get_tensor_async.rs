//! The backend's `get_tensor_async` (backend/buffer.rs, runtime/readback.rs),
//! driven as ggml drives it for llama's logits: the read is enqueued after
//! the device's earlier work without a wait, through pinned staging, and the
//! bytes are there once the backend synchronized. Bad input (a NULL destination, a range past the tensor, a
//! foreign backend) is refused without writing anything or panicking.

use ggml_polycl::backend::{reg, stream};
use ggml_polycl::ggml::abi::*;
use ggml_polycl::runtime::{devices, Device, DeviceBuffer};
use std::ffi::c_void;
use std::sync::{Arc, Mutex, Once};

/// Held by each test for its whole run: both charge refused reads to device
/// 0, whose failure count the first one checks between its reads (in
/// parallel the other's refusals made it fail, seen under load).
static DEVICE0: Mutex<()> = Mutex::new(());

/// The OpenCL devices, two where PoCL can make them (`POCL_DEVICES`, set
/// before the first discovery when unset), for the read across devices.
fn devs() -> &'static [Arc<Device>] {
    static ENV: Once = Once::new();
    ENV.call_once(|| {
        if std::env::var_os("POCL_DEVICES").is_none() {
            std::env::set_var("POCL_DEVICES", "pthread pthread");
        }
    });
    devices().expect("an OpenCL device (install pocl-opencl-icd)")
}

/// A backend of polycl device `i`, as ggml makes it.
fn backend(i: usize) -> ggml_backend_t {
    // SAFETY: one of polycl's devices.
    let b = unsafe { stream::init_backend(reg::plugin().devices[i], std::ptr::null()) };
    assert!(!b.is_null());
    b
}

/// An F32 tensor of `n` elements at byte `at` of `buf`, as ggml lays it out
/// (no ggml buffer: polycl finds the device buffer by the data address).
fn tensor(buf: &DeviceBuffer, at: usize, n: i64) -> Box<ggml_tensor> {
    // SAFETY: ggml_tensor is plain data; all-zero is a valid (empty) tensor.
    let mut t: Box<ggml_tensor> = Box::new(unsafe { std::mem::zeroed() });
    t.type_ = 0;
    t.ne = [n, 1, 1, 1];
    t.nb = [4, 4 * n as usize, 4 * n as usize, 4 * n as usize];
    t.data = (buf.base as usize + at) as *mut c_void;
    t
}

/// `len` bytes at `at` of `buf`, by a blocking read.
fn buf_bytes(buf: &DeviceBuffer, at: usize, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    buf.read(at, &mut v).unwrap();
    v
}

#[test]
fn reads_after_earlier_work_and_lands_by_synchronize() {
    let _serial = DEVICE0.lock().unwrap_or_else(|e| e.into_inner());
    let dev = &devs()[0];
    let b = backend(0);
    // SAFETY: made by init_backend just above.
    let (get_async, sync, free) = unsafe {
        (
            (*b).iface
                .get_tensor_async
                .expect("get_tensor_async is served"),
            (*b).iface.synchronize.unwrap(),
            (*b).iface.free.unwrap(),
        )
    };
    let n = 32000usize; // a vocabulary's logits
    let buf = DeviceBuffer::alloc(dev, 4 * n + 256).unwrap();
    let t = tensor(&buf, 256, n as i64);
    for round in 0..3u32 {
        // Earlier work on the queue: a small write (held for a batch), a
        // fill and a large write; the read comes after all of them.
        let want: Vec<u8> = (0..4 * n as u32)
            .map(|i| (i.wrapping_mul(31).wrapping_add(round * 7) % 251) as u8)
            .collect();
        buf.fill(256, 4 * n, 0xAB).unwrap();
        buf.write(256, &want).unwrap();
        buf.write(256 + 100, &want[100..164]).unwrap();
        let mut got = vec![0u8; 4 * n];
        let failures = dev.failures.load(std::sync::atomic::Ordering::Relaxed);
        // Two reads in flight at once, the second from an offset into the
        // tensor; nothing is promised before the synchronize.
        let mut part = vec![0u8; 400];
        // SAFETY: polycl backend, tensor in a polycl buffer, `got` and
        // `part` kept until the synchronize.
        unsafe {
            get_async(b, &*t, got.as_mut_ptr() as *mut c_void, 0, got.len());
            get_async(b, &*t, part.as_mut_ptr() as *mut c_void, 1000, part.len());
            sync(b);
        }
        assert!(got == want, "round {round}: the async read's bytes");
        assert_eq!(part, want[1000..1400], "round {round}: an offset read");
        // Work enqueued after a read does not reach the bytes it read.
        let mut before = vec![0u8; 64];
        // SAFETY: as above.
        unsafe { get_async(b, &*t, before.as_mut_ptr() as *mut c_void, 0, 64) };
        buf.fill(256, 64, 0x11).unwrap();
        // SAFETY: as above.
        unsafe { sync(b) };
        assert_eq!(
            before,
            want[..64],
            "round {round}: a later fill leaked into the read"
        );
        assert_eq!(
            dev.failures.load(std::sync::atomic::Ordering::Relaxed),
            failures,
            "no failure charged"
        );
    }

    // Larger than the staging made so far (256 KiB): it is replaced by a
    // larger one, since no read is in flight, and the read is still staged.
    let mid_n = (1usize << 20) / 4;
    let mid = DeviceBuffer::alloc(dev, 4 * mid_n).unwrap();
    let mid_want: Vec<u8> = (0..4 * mid_n as u32).map(|i| (i % 239) as u8).collect();
    mid.write(0, &mid_want).unwrap();
    let tm = tensor(&mid, 0, mid_n as i64);
    let mut mid_got = vec![0u8; 4 * mid_n];
    let mut small = vec![0u8; 64];
    // SAFETY: as above.
    unsafe {
        get_async(
            b,
            &*tm,
            mid_got.as_mut_ptr() as *mut c_void,
            0,
            mid_got.len(),
        );
        get_async(b, &*t, small.as_mut_ptr() as *mut c_void, 0, 64);
        sync(b);
    }
    assert!(mid_got == mid_want, "a read that grew the staging");
    assert_eq!(small, buf_bytes(&buf, 256, 64), "a read beside it");
    DeviceBuffer::release(mid.base);

    // Larger than the pinned staging takes (4 MiB): read at once, still
    // right by the synchronize.
    let big_n = (5usize << 20) / 4;
    let big = DeviceBuffer::alloc(dev, 4 * big_n).unwrap();
    let big_want: Vec<u8> = (0..4 * big_n as u32).map(|i| (i % 249) as u8).collect();
    big.write(0, &big_want).unwrap();
    let tb = tensor(&big, 0, big_n as i64);
    let mut big_got = vec![0u8; 4 * big_n];
    // SAFETY: as above.
    unsafe {
        get_async(
            b,
            &*tb,
            big_got.as_mut_ptr() as *mut c_void,
            0,
            big_got.len(),
        );
        sync(b);
    }
    assert!(big_got == big_want, "a read past the staging's size");
    DeviceBuffer::release(big.base);

    // Refused, with nothing written and the failure charged to the device:
    // a NULL destination, and a range past the tensor's bytes.
    let failures = dev.failures.load(std::sync::atomic::Ordering::Relaxed);
    // SAFETY: NULL data is what is being refused.
    unsafe { get_async(b, &*t, std::ptr::null_mut(), 0, 16) };
    let mut untouched = vec![0x5Au8; 64];
    // SAFETY: `untouched` holds 64 bytes; the range asked past the tensor is refused first.
    unsafe { get_async(b, &*t, untouched.as_mut_ptr() as *mut c_void, 4 * n - 8, 64) };
    // SAFETY: as above.
    unsafe { sync(b) };
    assert!(untouched.iter().all(|&x| x == 0x5A), "a refused read wrote");
    assert_eq!(
        dev.failures.load(std::sync::atomic::Ordering::Relaxed),
        failures + 2,
        "each refused read is charged to the device"
    );
    // A backend that is not polycl's is refused the same way (no panic).
    let mut out = [0u8; 4];
    // SAFETY: NULL backend is what is being refused.
    unsafe {
        get_async(
            std::ptr::null_mut(),
            &*t,
            out.as_mut_ptr() as *mut c_void,
            0,
            4,
        )
    };
    assert_eq!(out, [0u8; 4]);

    DeviceBuffer::release(buf.base);
    // SAFETY: made by init_backend; freed once.
    unsafe { free(b) };
}

/// A host buffer's get_tensor, as a ggml buffer outside polycl's plain ones
/// (a split buffer, say) has one: copies from the tensor's data.
unsafe extern "C" fn host_get(
    _b: ggml_backend_buffer_t,
    t: *const ggml_tensor,
    data: *mut c_void,
    offset: usize,
    size: usize,
) {
    // SAFETY: the test's tensor points at `size` readable bytes past `offset`.
    unsafe {
        std::ptr::copy_nonoverlapping(((*t).data as *const u8).add(offset), data as *mut u8, size)
    };
}

#[test]
fn tensors_outside_the_backends_device_are_read_their_own_way() {
    let _serial = DEVICE0.lock().unwrap_or_else(|e| e.into_inner());
    let all = devs();
    let b = backend(0);
    // SAFETY: made by init_backend just above.
    let (get_async, sync, free) = unsafe {
        (
            (*b).iface.get_tensor_async.unwrap(),
            (*b).iface.synchronize.unwrap(),
            (*b).iface.free.unwrap(),
        )
    };
    let n = 1024usize;
    let want: Vec<u8> = (0..4 * n as u32).map(|i| (i % 241) as u8).collect();

    // Not in a polycl buffer: through the tensor's buffer's own get_tensor.
    // SAFETY: ggml_backend_buffer is plain data; all-zero is "no entries".
    let mut host_buf: Box<ggml_backend_buffer> = Box::new(unsafe { std::mem::zeroed() });
    host_buf.iface.get_tensor = Some(host_get);
    let host = want.clone();
    // SAFETY: as `tensor` builds it, with host data and a buffer.
    let mut th: Box<ggml_tensor> = Box::new(unsafe { std::mem::zeroed() });
    th.ne = [n as i64, 1, 1, 1];
    th.nb = [4, 4 * n, 4 * n, 4 * n];
    th.data = host.as_ptr() as *mut c_void;
    th.buffer = &mut *host_buf;
    let mut got = vec![0u8; 4 * n];
    // SAFETY: polycl backend; the tensor's buffer reads synchronously.
    unsafe {
        get_async(b, &*th, got.as_mut_ptr() as *mut c_void, 8, 100);
        sync(b);
    }
    assert_eq!(got[..100], want[8..108], "the buffer's get_tensor");
    // Without a buffer that reads, it is refused and nothing is written.
    th.buffer = std::ptr::null_mut();
    let mut none = vec![0u8; 16];
    // SAFETY: as above.
    unsafe { get_async(b, &*th, none.as_mut_ptr() as *mut c_void, 0, 16) };
    assert_eq!(none, vec![0u8; 16]);

    // In a buffer of another device: read by that device's queue.
    if all.len() >= 2 {
        let other = DeviceBuffer::alloc(&all[1], 4 * n).unwrap();
        other.write(0, &want).unwrap();
        let t1 = tensor(&other, 0, n as i64);
        let mut from1 = vec![0u8; 4 * n];
        // SAFETY: as above.
        unsafe {
            get_async(b, &*t1, from1.as_mut_ptr() as *mut c_void, 0, from1.len());
            sync(b);
        }
        assert!(
            from1 == want,
            "a tensor on device 1 read through device 0's backend"
        );
        DeviceBuffer::release(other.base);
    } else {
        eprintln!("one OpenCL device: the read across devices is not exercised");
    }
    // SAFETY: made by init_backend; freed once.
    unsafe { free(b) };
}
