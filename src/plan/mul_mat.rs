//! MUL_MAT lowering: convert or quantize the activations into plan scratch
//! in the format the weight type's kernel wants (as ggml's CPU backend does),
//! then one matmul launch. `mul_mv::select` may swap in a faster kernel with
//! the same arguments for the device at hand.

use super::lower::{grid, type_suffix};
use super::Binder;
use crate::error::{Error, Result};
use crate::ggml::types::GgmlType::{self, F16, F32, Q4K, Q4_0, Q6K, Q8_0};
use crate::ir::{Graph, Node, Op};
use crate::runtime::executor::Launch;

/// Work-group size of the portable matmul kernels: one group per output element.
pub const MM_WG: usize = 32;

/// A matmul kernel choice: every candidate takes the arguments of
/// `kernel_mul_mat_*` in `mul_mat.cl`.
pub struct MatmulKernel {
    pub program: &'static str,
    pub name: String,
    pub global: [usize; 3],
    pub local: [usize; 3],
}

/// How a weight type wants its activations: format name and bytes per row.
pub fn activation_format(w: GgmlType, ne10: i64) -> Option<(&'static str, u64)> {
    match w {
        F32 => None,
        F16 => Some(("kernel_convert_f16", 2 * ne10 as u64)),
        Q4_0 | Q8_0 => Some(("kernel_quantize_q8_1", (ne10 as u64 / 32) * 36)),
        Q4K | Q6K => Some(("kernel_quantize_q8_k", (ne10 as u64 / 256) * 292)),
        _ => None,
    }
}

/// Scratch bytes a node needs (converted activations of a matmul).
pub fn scratch_bytes(g: &Graph, n: &Node) -> usize {
    if n.op != Op::MulMat {
        return 0;
    }
    let w = g.ty(n.inputs[0]);
    let x = g.ty(n.inputs[1]);
    match activation_format(w.dtype, x.ne[0]) {
        Some((_, row)) => (row * (x.ne[1] * x.ne[2] * x.ne[3]) as u64) as usize,
        None => 0,
    }
}

pub fn lower(b: &mut Binder, n: &Node, v: crate::ir::Value, out: &mut Vec<Launch>) -> Result<()> {
    let g = b.graph;
    let wt = g.ty(n.inputs[0]).dtype;
    let w = b.operand(n.inputs[0])?;
    let x = b.operand(n.inputs[1])?;
    let dst = b.operand(v)?;
    let mm_name = format!("kernel_mul_mat_{}", type_suffix(wt)?);
    let (act_mem, act_off, act_nb) = match activation_format(wt, x.ne[0]) {
        None => (x.mem, x.offset, x.nb),
        Some((convert, row)) => {
            let (scratch, _) = b
                .scratch
                .ok_or_else(|| Error::InvalidGraph("matmul without scratch".into()))?;
            let blocks = match convert {
                "kernel_convert_f16" => x.ne[0],
                "kernel_quantize_q8_1" => x.ne[0] / 32,
                _ => x.ne[0] / 256,
            };
            let global = [
                blocks as usize,
                x.ne[1] as usize,
                (x.ne[2] * x.ne[3]) as usize,
            ];
            out.push(grid(
                b,
                "mul_mat",
                convert,
                global,
                None,
                "quantize",
                |a| {
                    a.tensor(&x)?.ptr(scratch, 0)?;
                    Ok(())
                },
            )?);
            let nb = [
                0,
                row,
                row * x.ne[1] as u64,
                row * (x.ne[1] * x.ne[2]) as u64,
            ];
            (scratch, 0u64, nb)
        }
    };
    let portable = MatmulKernel {
        program: "mul_mat",
        name: mm_name,
        global: [
            MM_WG * w.ne[1] as usize,
            x.ne[1] as usize,
            (x.ne[2] * x.ne[3]) as usize,
        ],
        local: [MM_WG, 1, 1],
    };
    let k = super::mul_mv::select(&b.device, wt, &w, &x).unwrap_or(portable);
    out.push(grid(
        b,
        k.program,
        &k.name,
        k.global,
        Some(k.local),
        "mul_mat",
        |a| {
            a.tensor(&w)?
                .ptr(act_mem, act_off)?
                .u64x4(act_nb)?
                .i64x4(x.ne)?
                .tensor(&dst)?;
            Ok(())
        },
    )?);
    Ok(())
}
