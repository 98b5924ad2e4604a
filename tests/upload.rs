//! Small writes that do not wait (runtime/upload.rs, `POLYCL_WRITE` default
//! `batch`) on every OpenCL device found: writes held for one scatter launch
//! and writes enqueued from host copies keep their order with each other, with
//! copies, fills and reads, and with large writes that block; the host copies
//! are let go once the queue drains. One test in its own binary, so no other
//! test's writes share the device while it counts copies and held writes.

use ggml_polycl::runtime::{devices, DeviceBuffer};

#[test]
fn small_writes_that_do_not_wait_keep_their_order_and_release_their_copies() {
    let all = devices().expect("an OpenCL device (install pocl-opencl-icd)");
    for d in all.iter() {
        let b = DeviceBuffer::alloc(d, 4096).unwrap();
        let mut expect: Vec<u8> = (0..4096u32).map(|i| (i * 7 % 251) as u8).collect();
        b.write(0, &expect).unwrap();
        // Overlapping writes, each from a buffer the caller reuses at once:
        // the last one wins (a write that overlaps a held one sends the batch
        // first), and each used its own bytes.
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
        assert_eq!(d.writes_held(), 0, "{}: a read sends the batch", d.name);

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

        batch_order(d);
    }
}

/// A decode step's inputs: tiny writes at odd offsets of more buffers than
/// one batch names, a write too large for the batch after a held one over the
/// same bytes, and a copy and a fill that must see the held writes.
fn batch_order(d: &std::sync::Arc<ggml_polycl::runtime::Device>) {
    let bufs: Vec<_> = (0..6)
        .map(|_| DeviceBuffer::alloc(d, 8192).unwrap())
        .collect();
    let mut want: Vec<Vec<u8>> = vec![vec![0u8; 8192]; bufs.len()];
    for (b, w) in bufs.iter().zip(&want) {
        b.write(0, w).unwrap();
    }
    d.synchronize().unwrap();
    for round in 0..3usize {
        for (i, (b, w)) in bufs.iter().zip(want.iter_mut()).enumerate() {
            // 1, 4, 7, ... bytes at offsets that are not multiples of 4.
            let len = 1 + 3 * ((i + round) % 5);
            let at = 1 + 13 * i + 301 * round;
            let bytes: Vec<u8> = (0..len)
                .map(|k| (i * 31 + k + round * 7 + 1) as u8)
                .collect();
            b.write(at, &bytes).unwrap();
            w[at..at + len].copy_from_slice(&bytes);
        }
    }
    // The same 300 bytes twice (held), then 2000 bytes over them: too large
    // for a batch, so it goes on its own after the batch.
    bufs[0].write(4000, &[1u8; 300]).unwrap();
    bufs[0].write(4000, &[2u8; 300]).unwrap();
    let wide: Vec<u8> = (0..2000u32).map(|k| (k % 249) as u8).collect();
    bufs[0].write(3900, &wide).unwrap();
    want[0][3900..5900].copy_from_slice(&wide);
    // A held write, then a device copy of it, and a fill over part of it.
    bufs[1].write(6000, &[5u8; 40]).unwrap();
    if ggml_polycl::config::get().write_mode == ggml_polycl::config::WriteMode::Batch {
        assert_eq!(d.writes_held(), 1, "{}: a small write is held", d.name);
    }
    bufs[1].copy_to(6000, &bufs[2], 7000, 40).unwrap();
    want[1][6000..6040].fill(5);
    want[2][7000..7040].fill(5);
    bufs[3].write(100, &[8u8; 24]).unwrap();
    bufs[3].fill(108, 8, 3).unwrap();
    want[3][100..124].fill(8);
    want[3][108..116].fill(3);
    // A held write to a buffer released before anything else is enqueued.
    {
        let gone = DeviceBuffer::alloc(d, 256).unwrap();
        gone.write(10, &[4u8; 10]).unwrap();
    }
    for (i, (b, w)) in bufs.iter().zip(&want).enumerate() {
        let mut got = vec![0u8; 8192];
        b.read(0, &mut got).unwrap();
        assert_eq!(&got, w, "{}: buffer {i} after batched writes", d.name);
    }
    assert_eq!(d.writes_held(), 0, "{}: reads send the batch", d.name);

    // synchronize skips a queue known drained: a blocking read drains it, a
    // write held enqueues nothing, a copy does, and a synchronize drains it.
    assert!(d.idle(), "{}: idle after a blocking read", d.name);
    bufs[4].write(0, &[6u8; 8]).unwrap();
    if ggml_polycl::config::get().write_mode == ggml_polycl::config::WriteMode::Batch {
        assert!(d.idle(), "{}: a held write enqueues nothing", d.name);
    }
    bufs[4].copy_to(0, &bufs[5], 0, 8).unwrap();
    assert!(!d.idle(), "{}: a copy is not known complete", d.name);
    d.synchronize().unwrap();
    assert!(d.idle(), "{}: idle after synchronize", d.name);
    d.synchronize().unwrap();
    let mut got = [0u8; 8];
    bufs[5].read(0, &mut got).unwrap();
    assert_eq!(got, [6u8; 8], "{}: a held write, copied, then read", d.name);
}
