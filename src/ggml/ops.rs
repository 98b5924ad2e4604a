//! `enum ggml_op`, `ggml_unary_op` and `ggml_glu_op` numbers of the pinned ggml
//! (they move whenever upstream inserts an op, so every number is pinned here).

pub const OP_NONE: i32 = 0;
pub const OP_DUP: i32 = 1;
pub const OP_ADD: i32 = 2;
pub const OP_SUB: i32 = 6;
pub const OP_MUL: i32 = 7;
pub const OP_DIV: i32 = 8;
pub const OP_SUM_ROWS: i32 = 15;
pub const OP_CONCAT: i32 = 22;
pub const OP_NORM: i32 = 24;
pub const OP_RMS_NORM: i32 = 25;
pub const OP_MUL_MAT: i32 = 29;
pub const OP_SCALE: i32 = 32;
pub const OP_CPY: i32 = 34;
pub const OP_CONT: i32 = 35;
pub const OP_RESHAPE: i32 = 36;
pub const OP_VIEW: i32 = 37;
pub const OP_PERMUTE: i32 = 38;
pub const OP_TRANSPOSE: i32 = 39;
pub const OP_GET_ROWS: i32 = 40;
pub const OP_SET_ROWS: i32 = 42;
pub const OP_SOFT_MAX: i32 = 46;
pub const OP_ROPE: i32 = 48;
pub const OP_TOP_K: i32 = 70;
pub const OP_FLASH_ATTN_EXT: i32 = 74;
pub const OP_UNARY: i32 = 91;
pub const OP_GLU: i32 = 100;
pub const OP_COUNT: i32 = 101;

pub const UNARY_GELU: i32 = 8;
pub const UNARY_GELU_QUICK: i32 = 9;
pub const UNARY_SILU: i32 = 10;

pub const GLU_GEGLU: i32 = 1;
pub const GLU_SWIGLU: i32 = 2;

pub const ROPE_MODE_NORMAL: i32 = 0;
pub const ROPE_MODE_NEOX: i32 = 2;

/// The op names ggml prints (`ggml_op_name`), for the ops polycl knows; used by
/// the C decoder interface, dumps and messages.
pub const OP_NAMES: &[(i32, &str)] = &[
    (OP_NONE, "NONE"),
    (OP_DUP, "DUP"),
    (OP_ADD, "ADD"),
    (OP_SUB, "SUB"),
    (OP_MUL, "MUL"),
    (OP_DIV, "DIV"),
    (OP_SUM_ROWS, "SUM_ROWS"),
    (OP_CONCAT, "CONCAT"),
    (OP_NORM, "NORM"),
    (OP_RMS_NORM, "RMS_NORM"),
    (OP_MUL_MAT, "MUL_MAT"),
    (OP_SCALE, "SCALE"),
    (OP_CPY, "CPY"),
    (OP_CONT, "CONT"),
    (OP_RESHAPE, "RESHAPE"),
    (OP_VIEW, "VIEW"),
    (OP_PERMUTE, "PERMUTE"),
    (OP_TRANSPOSE, "TRANSPOSE"),
    (OP_GET_ROWS, "GET_ROWS"),
    (OP_SET_ROWS, "SET_ROWS"),
    (OP_SOFT_MAX, "SOFT_MAX"),
    (OP_ROPE, "ROPE"),
    (OP_TOP_K, "TOP_K"),
    (OP_FLASH_ATTN_EXT, "FLASH_ATTN_EXT"),
    (OP_UNARY, "UNARY"),
    (OP_GLU, "GLU"),
];

pub fn op_name(op: i32) -> &'static str {
    OP_NAMES
        .iter()
        .find(|(n, _)| *n == op)
        .map(|(_, s)| *s)
        .unwrap_or("UNKNOWN")
}

pub fn op_by_name(name: &str) -> Option<i32> {
    OP_NAMES.iter().find(|(_, s)| *s == name).map(|(n, _)| *n)
}
