//! Random graphs through polycl's decoder callbacks (polycl.h): the byte
//! string describes inputs, weights, nodes, outputs and the extensions to
//! register; conversion must give OK or an error status with a message.
//! The generator is tests/decoder_random.rs, shared with `cargo test`.
#![no_main]

#[path = "../../tests/decoder_random.rs"]
mod decoder_random;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    decoder_random::drive(data);
});
