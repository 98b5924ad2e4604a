//! MUL_MAT: weights (F32, F16, Q4_0, Q8_0, Q4_K, Q6_K) times F32 activations,
//! any batch, broadcast over dims 2 and 3, strided views of src1; a rotation
//! the host marks as by the Hadamard matrix becomes `Op::Hadamard`.

use crate::decoder::{Decoder, NodeDesc};
use crate::error::Result;
use crate::frontend::{src_ty, Ctx};
use crate::ggml::types::GgmlType::{self, F16, F32, Q4K, Q4_0, Q6K, Q8_0};
use crate::ir::{Op, Value};

pub const WEIGHT_TYPES: &[GgmlType] = &[F32, F16, Q4_0, Q8_0, Q4K, Q6K];

pub fn supports(dec: &dyn Decoder, node: &NodeDesc) -> bool {
    let (Some(w), Some(x)) = (src_ty(dec, node, 0), src_ty(dec, node, 1)) else {
        return false;
    };
    let out = &node.out.ty;
    if !WEIGHT_TYPES.contains(&w.dtype) || x.dtype != F32 || out.dtype != F32 {
        return false;
    }
    // Block formats are read block by block along a row.
    if w.dtype.is_quantized() && w.nb[0] != w.dtype.block_bytes() as u64 {
        return false;
    }
    w.ne[0] == x.ne[0]
        && w.ne[2] > 0
        && w.ne[3] > 0
        && x.ne[2] % w.ne[2] == 0
        && x.ne[3] % w.ne[3] == 0
        && out.ne == [w.ne[1], x.ne[1], x.ne[2], x.ne[3]]
}

/// ggml's GGML_HINT_SRC0_IS_HADAMARD, in op_params slot 1.
const HINT_SRC0_IS_HADAMARD: i32 = 1;
/// The longest row `kernel_hadamard_f32` transforms (HD_MAX floats of local
/// memory); longer ones take the matmul.
const HADAMARD_MAX: i64 = 4096;

/// Whether the node is a rotation by the Hadamard matrix that the fast
/// transform computes (`Op::Hadamard`): the host's hint, an F32 square
/// matrix of a power-of-two size, and contiguous rows in and out of one
/// shape (the conditions of CUDA's `ggml_cuda_op_mul_mat_use_fwht`).
fn hadamard_applies(dec: &dyn Decoder, node: &NodeDesc) -> bool {
    let (Some(w), Some(x)) = (src_ty(dec, node, 0), src_ty(dec, node, 1)) else {
        return false;
    };
    let n = w.ne[0];
    node.params.i32(1) == HINT_SRC0_IS_HADAMARD
        && w.dtype == F32
        && w.ne[1] == n
        && n > 0
        && (n as u64).is_power_of_two()
        && n <= HADAMARD_MAX
        && x.is_contiguous()
        && node.out.ty.is_contiguous()
        && node.out.ty.ne == x.ne
}

pub fn translate(ctx: &mut Ctx, node: &NodeDesc) -> Result<Value> {
    let w = ctx.input(node, 0)?;
    let x = ctx.input(node, 1)?;
    let op = if hadamard_applies(ctx.dec, node) {
        Op::Hadamard
    } else {
        Op::MulMat
    };
    Ok(ctx.emit(op, vec![w, x], node))
}
