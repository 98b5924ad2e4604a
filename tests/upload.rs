//! Small writes that do not wait (runtime/upload.rs, `POLYCL_WRITE` default
//! `async`) on every OpenCL device found: the device's queue keeps their
//! order with each other and with reads, large writes still block, and the
//! host copies are let go once the queue drains. One test in its own binary,
//! so no other test's writes share the device while it counts copies.

use ggml_polycl::runtime::{devices, DeviceBuffer};

#[test]
fn small_writes_that_do_not_wait_keep_their_order_and_release_their_copies() {
    let all = devices().expect("an OpenCL device (install pocl-opencl-icd)");
    for d in all.iter() {
        let b = DeviceBuffer::alloc(d, 4096).unwrap();
        let mut expect: Vec<u8> = (0..4096u32).map(|i| (i * 7 % 251) as u8).collect();
        b.write(0, &expect).unwrap();
        // Overlapping writes, each from a buffer the caller reuses at once:
        // the last one enqueued wins, and each used its own bytes.
        let mut scratch = [0u8; 64];
        for k in 0..200usize {
            scratch.fill(k as u8);
            let at = (k * 37) % (4096 - 64);
            b.write(at, &scratch).unwrap();
            expect[at..at + 64].fill(k as u8);
        }
        assert!(d.uploads_in_flight() <= 201, "{}: copies pile up", d.name);
        let mut got = vec![0u8; 4096];
        b.read(0, &mut got).unwrap();
        assert_eq!(got, expect, "{}: small writes out of order", d.name);
        assert_eq!(
            d.uploads_in_flight(),
            0,
            "{}: a blocking read drains the queue",
            d.name
        );

        // Past the staging limit a write blocks, and still lands after the
        // small ones before it.
        let big = DeviceBuffer::alloc(d, 512 << 10).unwrap();
        big.write(1000, &[9u8; 16]).unwrap();
        let data: Vec<u8> = (0..(300u32 << 10)).map(|i| (i % 253) as u8).collect();
        big.write(0, &data).unwrap();
        big.write(2000, &[7u8; 16]).unwrap();
        d.synchronize().unwrap();
        assert_eq!(
            d.uploads_in_flight(),
            0,
            "{}: synchronize lets the copies go",
            d.name
        );
        let mut back = vec![0u8; data.len()];
        big.read(0, &mut back).unwrap();
        let mut want = data.clone();
        want[2000..2016].fill(7);
        assert_eq!(back, want, "{}: a large write after small ones", d.name);
    }
}
