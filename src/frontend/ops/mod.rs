//! One translator file per op family; each has `supports` and `translate`
//! and one row per GGML op in `op_table.rs`.

pub mod binary;
pub mod concat;
pub mod cpy;
pub mod flash_attn;
pub mod get_rows;
pub mod glu;
pub mod mul_mat;
pub mod multi_output;
pub mod norm;
pub mod reduce;
pub mod rope;
pub mod set_rows;
pub mod softmax;
pub mod unary;
pub mod view;
