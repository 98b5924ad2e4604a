//! polycl: a ggml backend plugin that runs ggml graphs on OpenCL devices.
//!
//! Flow (one folder each): `ggml` (ABI mirror) -> `decoder` -> `frontend`
//! (op table) -> `ir` -> `passes` -> `plan` -> `runtime` (OpenCL). `backend`
//! is the ggml plugin glue and `capi` the C API of `include/polycl.h`.

pub mod backend;
pub mod capi;
pub mod config;
pub mod decoder;
pub mod error;
pub mod fault;
pub mod frontend;
pub mod ggml;
pub mod ir;
pub mod log;
pub mod passes;
pub mod plan;
pub mod runtime;
