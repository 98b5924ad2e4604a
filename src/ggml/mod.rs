//! The ggml ABI mirror: `#[repr(C)]` structs, pinned enums, typed op_params
//! readers and the ggml-base functions resolved at run time. Nothing outside
//! `ggml/` and `backend/` touches a raw ggml pointer.

pub mod abi;
pub mod op_params;
pub mod ops;
pub mod symbols;
pub mod types;
