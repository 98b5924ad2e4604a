//! The op_params readers and the op table's translators under arbitrary
//! op_params (16 raw slots on the ggml path, any byte count on the C decoder
//! path): a value or an error, never a panic. The harness is
//! tests/reliability_op_params.rs, shared with `cargo test`.
#![no_main]

#[path = "../../tests/reliability_op_params.rs"]
mod reliability_op_params;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    reliability_op_params::drive(data);
});
