//! The one table: GGML op -> support check + translator. `supports_op`,
//! translation of the ggml path and of the C decoder path all read it.

use super::ops::*;
use super::Ctx;
use crate::decoder::{Decoder, NodeDesc};
use crate::error::Result;
use crate::ggml::ops::*;
use crate::ir::Value;

pub struct Entry {
    pub op: i32,
    pub supports: fn(&dyn Decoder, &NodeDesc) -> bool,
    pub translate: fn(&mut Ctx, &NodeDesc) -> Result<Value>,
}

const fn row(
    op: i32,
    supports: fn(&dyn Decoder, &NodeDesc) -> bool,
    translate: fn(&mut Ctx, &NodeDesc) -> Result<Value>,
) -> Entry {
    Entry {
        op,
        supports,
        translate,
    }
}

pub static OP_TABLE: &[Entry] = &[
    row(OP_NONE, view::supports, view::translate),
    row(OP_VIEW, view::supports, view::translate),
    row(OP_RESHAPE, view::supports, view::translate),
    row(OP_PERMUTE, view::supports, view::translate),
    row(OP_TRANSPOSE, view::supports, view::translate),
    row(OP_CPY, cpy::supports, cpy::translate),
    row(OP_CONT, cpy::supports, cpy::translate),
    row(OP_DUP, cpy::supports, cpy::translate),
    row(OP_ADD, binary::supports, binary::translate),
    row(OP_SUB, binary::supports, binary::translate),
    row(OP_MUL, binary::supports, binary::translate),
    row(OP_DIV, binary::supports, binary::translate),
    row(OP_SCALE, unary::supports_scale, unary::translate_scale),
    row(OP_UNARY, unary::supports, unary::translate),
    row(OP_GLU, glu::supports, glu::translate),
    row(OP_RMS_NORM, norm::supports, norm::translate),
    row(OP_NORM, norm::supports, norm::translate),
    row(OP_MUL_MAT, mul_mat::supports, mul_mat::translate),
    row(OP_ROPE, rope::supports, rope::translate),
    row(OP_SOFT_MAX, softmax::supports, softmax::translate),
    row(OP_GET_ROWS, get_rows::supports, get_rows::translate),
    row(OP_SET_ROWS, set_rows::supports, set_rows::translate),
    row(
        OP_FLASH_ATTN_EXT,
        flash_attn::supports,
        flash_attn::translate,
    ),
    row(OP_SUM_ROWS, reduce::supports, reduce::translate),
    row(OP_CONCAT, concat::supports, concat::translate),
    row(
        OP_TOP_K,
        multi_output::supports_top_k,
        multi_output::translate_top_k,
    ),
    row(
        crate::decoder::OP_OUTPUT_PORT,
        multi_output::supports_port,
        multi_output::translate_port,
    ),
];

pub fn entry(op: i32) -> Option<&'static Entry> {
    OP_TABLE.iter().find(|e| e.op == op)
}
