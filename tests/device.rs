//! Tests that run on every OpenCL device found (PoCL's CPU device in CI, the
//! GPU on a GPU machine): every program builds, transfers round-trip, a bad
//! kernel fails with its build log, and refused allocations are errors.

use ggml_polycl::error::Error;
use ggml_polycl::runtime::{devices, program, DeviceBuffer};

fn all_devices() -> Vec<std::sync::Arc<ggml_polycl::runtime::Device>> {
    match devices() {
        Ok(d) => d.to_vec(),
        Err(e) => panic!("device tests need an OpenCL device (install pocl-opencl-icd): {e}"),
    }
}

#[test]
fn every_kernel_program_builds_on_every_device() {
    for d in all_devices() {
        for (name, _) in program::PROGRAMS {
            if let Err(e) = program::program(&d, name) {
                panic!("{}: {e}", d.name);
            }
        }
    }
}

/// A 4096-byte buffer on `d` holding a byte pattern, and that pattern.
fn patterned_buffer(
    d: &std::sync::Arc<ggml_polycl::runtime::Device>,
) -> (std::sync::Arc<DeviceBuffer>, Vec<u8>) {
    let b = DeviceBuffer::alloc(d, 4096).unwrap();
    let data: Vec<u8> = (0..4096u32).map(|i| (i * 7 % 251) as u8).collect();
    b.write(0, &data).unwrap();
    (b, data)
}

#[test]
fn a_fill_in_pieces_sets_every_byte_of_its_range_and_no_other() {
    for d in all_devices() {
        let (b, data) = patterned_buffer(&d);
        let fill_and_check = |at: usize, n: usize, value: u8, piece: usize| {
            b.write(0, &data).unwrap();
            b.fill_pieces(at, n, value, piece).unwrap();
            let mut back = vec![0u8; 4096];
            b.read(0, &mut back).unwrap();
            assert!(
                back[at..at + n].iter().all(|&x| x == value),
                "{at} {n} piece {piece}"
            );
            assert_eq!(back[..at], data[..at]);
            assert_eq!(back[at + n..], data[at + n..]);
        };
        // Pieces that divide the range, that do not, smaller than a pattern,
        // and larger than the range.
        for (piece, value) in [(64, 0x11u8), (100, 0x22), (5, 0x44), (1 << 20, 0x33)] {
            fill_and_check(3, 1000, value, piece);
        }
        // Ranges inside one 16-byte pattern, and touching neither end of one.
        for (at, n) in [(5, 7), (16, 16), (17, 0), (30, 40)] {
            fill_and_check(at, n, 0x55, 64);
        }
        assert!(matches!(
            b.fill_pieces(0, 10, 0, 0),
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(
            b.fill_pieces(4000, 100, 0, 64),
            Err(Error::InvalidArgument(_))
        ));
    }
}

#[test]
fn transfers_round_trip() {
    for d in all_devices() {
        let (b, data) = patterned_buffer(&d);
        let mut back = vec![0u8; 4096];
        b.read(0, &mut back).unwrap();
        assert_eq!(back, data);
        b.fill(100, 50, 0xAB).unwrap();
        b.read(0, &mut back).unwrap();
        assert!(back[100..150].iter().all(|&x| x == 0xAB));
        assert_eq!(back[99], data[99]);
        let c = DeviceBuffer::alloc(&d, 4096).unwrap();
        b.copy_to(0, &c, 1000, 3000).unwrap();
        let mut cc = vec![0u8; 3000];
        c.read(1000, &mut cc).unwrap();
        assert_eq!(cc, back[..3000]);
        // Out of bounds is an error, not a crash.
        assert!(matches!(
            b.write(4000, &data[..200]),
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(
            b.read(4097, &mut back[..1]),
            Err(Error::InvalidArgument(_))
        ));
        DeviceBuffer::release(b.base);
        DeviceBuffer::release(c.base);
    }
}

#[test]
fn fake_addresses_resolve_to_their_buffer() {
    for d in all_devices() {
        let b = DeviceBuffer::alloc(&d, 1000).unwrap();
        let (r, off) = DeviceBuffer::resolve(b.base + 123).unwrap();
        assert_eq!((r.base, off), (b.base, 123));
        DeviceBuffer::release(b.base);
        assert!(DeviceBuffer::resolve(b.base + 123).is_none());
    }
}

#[test]
fn a_kernel_that_fails_to_build_carries_the_build_log() {
    for d in all_devices() {
        let src = "__kernel void broken(__global float *x) { x[0] = undefined_symbol_here; }";
        match program::build_source(&d, "broken", src) {
            Err(Error::Build { program, log }) => {
                assert_eq!(program, "broken");
                assert!(
                    log.contains("undefined_symbol_here"),
                    "log lacks the symbol: {log}"
                );
            }
            Err(e) => panic!("wrong error: {e}"),
            Ok(_) => panic!("a broken kernel built"),
        }
    }
}

#[test]
fn binding_more_arguments_than_a_kernel_takes_is_an_error() {
    use ggml_polycl::runtime::executor::ArgBinder;
    for d in all_devices() {
        let src = "__kernel void one_arg(__global float *x) { x[0] = 1.0f; }";
        let p = program::build_source(&d, "one_arg", src).unwrap();
        let k = opencl3::kernel::Kernel::create(&p, "one_arg").unwrap();
        let b = DeviceBuffer::alloc(&d, 64).unwrap();
        let mut a = ArgBinder::new(&k);
        // A kernel missing from program::PACKED binds each scalar as an
        // argument of its own; PoCL crashed on the first one past the end.
        match a.ptr(opencl3::memory::ClMem::get(&b.mem), 0) {
            Err(Error::Unsupported(m)) => assert!(m.contains("one_arg"), "{m}"),
            Err(e) => panic!("wrong error: {e}"),
            Ok(_) => panic!("bound a second argument to a one-argument kernel"),
        }
        DeviceBuffer::release(b.base);
    }
}

#[test]
fn allocations_beyond_the_device_limit_are_refused() {
    for d in all_devices() {
        match DeviceBuffer::alloc(&d, d.max_alloc + 1) {
            Err(Error::OutOfMemory { bytes, .. }) => assert_eq!(bytes, d.max_alloc + 1),
            Err(e) => panic!("wrong error: {e}"),
            Ok(_) => panic!("allocation beyond max_alloc succeeded"),
        }
    }
}
