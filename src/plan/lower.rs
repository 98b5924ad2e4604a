//! Kernel selection: each IR op becomes zero or more launches of the kernels
//! in `runtime/kernels`, with arguments in the order their signatures list.

use super::Binder;
use crate::error::{Error, Result};
use crate::ggml::types::GgmlType::{self, F16, F32, I32, I64, Q4K, Q4_0, Q6K, Q8_0};
use crate::ir::{BinaryOp, GluKind, Node, Op, RopeMode, RopeParams, UnaryOp, Value};
use crate::runtime::executor::{ArgBinder, Launch, Operand};
use crate::runtime::program::kernel;

/// Work-group size of the row kernels (norm, softmax, sum_rows) and flash attention.
pub const ROW_WG: usize = 64;
/// Work-items of `kernel_hadamard_f32` (HD_WG).
const HADAMARD_WG: usize = 64;

fn nelements(t: &Operand) -> usize {
    t.ne.iter().product::<i64>().max(0) as usize
}

fn rows_grid(t: &Operand) -> [usize; 3] {
    [ROW_WG, t.ne[1] as usize, (t.ne[2] * t.ne[3]) as usize]
}

pub(super) fn flat(
    b: &Binder,
    program: &'static str,
    name: &str,
    n: usize,
    kind: &'static str,
    bind: impl FnOnce(&mut ArgBinder) -> Result<()>,
) -> Result<Launch> {
    let k = kernel(&b.device, program, name)?;
    let mut a = ArgBinder::new(&k);
    bind(&mut a)?;
    let params = a.finish(&b.device)?;
    Ok(Launch {
        kernel: k,
        global: [n, 1, 1],
        local: None,
        dims: 1,
        kind,
        packed: params,
    })
}

/// `kernel_cpy_*` from `src` to `dst`: a work-item an element, or a block
/// of 32 from a quantized source (same shape as `dst`).
pub(super) fn copy(
    b: &Binder,
    src: &Operand,
    src_type: GgmlType,
    dst: &Operand,
    dst_type: GgmlType,
) -> Result<Launch> {
    let name = format!(
        "kernel_cpy_{}_{}",
        type_suffix(src_type)?,
        type_suffix(dst_type)?
    );
    let items = nelements(src) / src_type.block_elems();
    flat(b, "cpy", &name, items, "cpy", |a| {
        a.tensor(src)?.tensor(dst)?;
        Ok(())
    })
}

pub(super) fn grid(
    b: &Binder,
    program: &'static str,
    name: &str,
    global: [usize; 3],
    local: Option<[usize; 3]>,
    kind: &'static str,
    bind: impl FnOnce(&mut ArgBinder) -> Result<()>,
) -> Result<Launch> {
    let k = kernel(&b.device, program, name)?;
    if let Some(l) = local {
        // A launch wider than the device's groups may be would fail at
        // enqueue with a bare status; say here which kernel and why. The
        // kernel's own CL_KERNEL_WORK_GROUP_SIZE is not a limit to plan by:
        // the H200's driver answers 256 for kernel_mul_mv_norm_q4_0 (64
        // registers) and runs it 512 wide (docs/perf.md step 45). Where a
        // driver does enforce it, the enqueue's error names the kernel.
        let asked: usize = l.iter().product();
        if asked > b.device.max_work_group {
            return Err(Error::Unsupported(format!(
                "{name} needs work-groups of {asked} work-items; {} ({}) runs at most {}",
                b.device.name, b.device.description, b.device.max_work_group
            )));
        }
    }
    let mut a = ArgBinder::new(&k);
    bind(&mut a)?;
    let params = a.finish(&b.device)?;
    Ok(Launch {
        kernel: k,
        global,
        local,
        dims: 3,
        kind,
        packed: params,
    })
}

pub(super) fn type_suffix(t: GgmlType) -> Result<&'static str> {
    Ok(match t {
        F32 => "f32",
        F16 => "f16",
        Q4_0 => "q4_0",
        Q8_0 => "q8_0",
        Q4K => "q4_k",
        Q6K => "q6_k",
        I64 => "i64",
        I32 => "i32",
        other => {
            return Err(Error::Unsupported(format!(
                "no kernel for type {}",
                other.name()
            )))
        }
    })
}

/// ALiBi constants exactly as ggml's CPU backend derives them.
pub fn alibi(n_head: u32, max_bias: f32) -> (f32, f32, u32) {
    let n_head_log2 = 1u32 << (n_head as f32).log2().floor() as u32;
    let m0 = 2f32.powf(-max_bias / n_head_log2 as f32);
    let m1 = 2f32.powf(-(max_bias / 2.0) / n_head_log2 as f32);
    (m0, m1, n_head_log2)
}

/// ggml_rope_yarn_corr_dims of a rope's parameters.
pub fn corr_dims(p: &RopeParams) -> [f32; 2] {
    rope_yarn_corr_dims(
        p.n_dims,
        p.n_ctx_orig,
        p.freq_base,
        p.beta_fast,
        p.beta_slow,
    )
}

/// ggml_rope_yarn_corr_dims.
pub fn rope_yarn_corr_dims(
    n_dims: i32,
    n_ctx_orig: i32,
    freq_base: f32,
    beta_fast: f32,
    beta_slow: f32,
) -> [f32; 2] {
    let corr_dim = |n_rot: f32| {
        n_dims as f32 * (n_ctx_orig as f32 / (n_rot * 2.0 * std::f32::consts::PI)).ln()
            / (2.0 * freq_base.ln())
    };
    let start = corr_dim(beta_fast).floor();
    let end = corr_dim(beta_slow).ceil();
    [start.max(0.0), end.min((n_dims - 1) as f32)]
}

pub fn lower(b: &mut Binder, id: usize, n: &Node, out: &mut Vec<Launch>) -> Result<()> {
    let g = b.graph;
    let v = Value::new(id, 0);
    match &n.op {
        Op::Parameter | Op::View => Ok(()),
        Op::SetRows => Err(Error::InvalidGraph(format!(
            "SetRows '{}' reached planning: no pass lowered it",
            n.name
        ))),
        Op::Copy => {
            let src = b.operand(n.inputs[0])?;
            let dst = b.operand(v)?;
            out.push(copy(b, &src, g.ty(n.inputs[0]).dtype, &dst, g.ty(v).dtype)?);
            Ok(())
        }
        Op::Binary(op) => {
            let (x, y, dst) = (
                b.operand(n.inputs[0])?,
                b.operand(n.inputs[1])?,
                b.operand(v)?,
            );
            let name = match op {
                BinaryOp::Add => "kernel_add_f32",
                BinaryOp::Sub => "kernel_sub_f32",
                BinaryOp::Mul => "kernel_mul_f32",
                BinaryOp::Div => "kernel_div_f32",
            };
            out.push(flat(b, "binary", name, nelements(&dst), "binary", |a| {
                a.tensor(&x)?.tensor(&y)?.tensor(&dst)?;
                Ok(())
            })?);
            Ok(())
        }
        Op::Scale { scale, bias } => {
            let (x, dst) = (b.operand(n.inputs[0])?, b.operand(v)?);
            out.push(flat(
                b,
                "unary",
                "kernel_scale_f32",
                nelements(&dst),
                "unary",
                |a| {
                    a.tensor(&x)?.tensor(&dst)?.f32(*scale)?.f32(*bias)?;
                    Ok(())
                },
            )?);
            Ok(())
        }
        Op::Unary(u) => {
            let (x, dst) = (b.operand(n.inputs[0])?, b.operand(v)?);
            let name = match u {
                UnaryOp::Silu => "kernel_silu_f32",
                UnaryOp::Gelu => "kernel_gelu_f32",
                UnaryOp::GeluQuick => "kernel_gelu_quick_f32",
            };
            out.push(flat(b, "unary", name, nelements(&dst), "unary", |a| {
                a.tensor(&x)?.tensor(&dst)?;
                Ok(())
            })?);
            Ok(())
        }
        Op::Glu { kind, swapped } => {
            let x = b.operand(n.inputs[0])?;
            let has_b = n.inputs.len() == 2;
            let y = if has_b { b.operand(n.inputs[1])? } else { x };
            let dst = b.operand(v)?;
            let name = match kind {
                GluKind::Swiglu => "kernel_swiglu_f32",
                GluKind::Geglu => "kernel_geglu_f32",
            };
            out.push(flat(b, "glu", name, nelements(&dst), "glu", |a| {
                a.tensor(&x)?
                    .tensor(&y)?
                    .tensor(&dst)?
                    .i32(*swapped as i32)?
                    .i32(has_b as i32)?;
                Ok(())
            })?);
            Ok(())
        }
        Op::RmsNorm { eps } | Op::Norm { eps } => {
            let (x, dst) = (b.operand(n.inputs[0])?, b.operand(v)?);
            let name = if matches!(n.op, Op::RmsNorm { .. }) {
                "kernel_rms_norm_f32"
            } else {
                "kernel_norm_f32"
            };
            out.push(grid(
                b,
                "norm",
                name,
                rows_grid(&dst),
                Some([ROW_WG, 1, 1]),
                "norm",
                |a| {
                    a.tensor(&x)?.tensor(&dst)?.f32(*eps)?;
                    Ok(())
                },
            )?);
            Ok(())
        }
        Op::SumRows => {
            let (x, dst) = (b.operand(n.inputs[0])?, b.operand(v)?);
            out.push(grid(
                b,
                "misc",
                "kernel_sum_rows_f32",
                rows_grid(&dst),
                Some([ROW_WG, 1, 1]),
                "sum_rows",
                |a| {
                    a.tensor(&x)?.tensor(&dst)?;
                    Ok(())
                },
            )?);
            Ok(())
        }
        Op::Concat { .. } if g.ty(v).dtype.block_bytes() == 2 => {
            super::lower_state::lower(b, id, n, out)
        }
        Op::Constant { .. }
        | Op::ReadValue { .. }
        | Op::Assign { .. }
        | Op::Gather { .. }
        | Op::TopK { .. }
        | Op::ViewAs(_) => super::lower_state::lower(b, id, n, out),
        Op::Concat { dim } => {
            let (x, y, dst) = (
                b.operand(n.inputs[0])?,
                b.operand(n.inputs[1])?,
                b.operand(v)?,
            );
            out.push(flat(
                b,
                "misc",
                "kernel_concat_f32",
                nelements(&dst),
                "concat",
                |a| {
                    a.tensor(&x)?.tensor(&y)?.tensor(&dst)?.i32(*dim)?;
                    Ok(())
                },
            )?);
            Ok(())
        }
        Op::SoftMax {
            scale,
            max_bias,
            has_mask,
        } => {
            let x = b.operand(n.inputs[0])?;
            let mask = if *has_mask {
                b.operand(n.inputs[1])?
            } else {
                x
            };
            let mask_type = if !*has_mask {
                0
            } else if g.ty(n.inputs[1]).dtype == F32 {
                1
            } else {
                2
            };
            let dst = b.operand(v)?;
            let (m0, m1, n_head_log2) = alibi(x.ne[2] as u32, *max_bias);
            out.push(grid(
                b,
                "softmax",
                "kernel_soft_max_f32",
                rows_grid(&dst),
                Some([ROW_WG, 1, 1]),
                "softmax",
                |a| {
                    a.tensor(&x)?.tensor(&mask)?.tensor(&dst)?;
                    a.f32(*scale)?
                        .f32(*max_bias)?
                        .f32(m0)?
                        .f32(m1)?
                        .u32(n_head_log2)?
                        .i32(mask_type)?;
                    Ok(())
                },
            )?);
            Ok(())
        }
        Op::Rope(p) => {
            let x = b.operand(n.inputs[0])?;
            let pos = b.operand(n.inputs[1])?;
            let ff = if p.has_freq_factors {
                b.operand(n.inputs[2])?
            } else {
                pos
            };
            let dst = b.operand(v)?;
            let corr = corr_dims(p);
            let name = match p.mode {
                RopeMode::Normal => "kernel_rope_norm_f32",
                RopeMode::Neox => "kernel_rope_neox_f32",
            };
            let global = [
                (x.ne[0] / 2) as usize,
                x.ne[1] as usize,
                (x.ne[2] * x.ne[3]) as usize,
            ];
            out.push(grid(b, "rope", name, global, None, "rope", |a| {
                a.tensor(&x)?
                    .ptr(pos.mem, pos.offset)?
                    .ptr(ff.mem, ff.offset)?
                    .i32(p.has_freq_factors as i32)?;
                a.tensor(&dst)?
                    .i32(p.n_dims)?
                    .f32(p.freq_base)?
                    .f32(p.freq_scale)?
                    .f32(p.ext_factor)?;
                a.f32(p.attn_factor)?.f32(corr[0])?.f32(corr[1])?;
                Ok(())
            })?);
            Ok(())
        }
        Op::GetRows => {
            let (t, rows, dst) = (
                b.operand(n.inputs[0])?,
                b.operand(n.inputs[1])?,
                b.operand(v)?,
            );
            let name = format!("kernel_get_rows_{}", type_suffix(g.ty(n.inputs[0]).dtype)?);
            let global = [
                dst.ne[0] as usize,
                dst.ne[1] as usize,
                (dst.ne[2] * dst.ne[3]) as usize,
            ];
            out.push(grid(b, "get_rows", &name, global, None, "get_rows", |a| {
                a.tensor(&t)?.tensor(&rows)?.tensor(&dst)?;
                Ok(())
            })?);
            Ok(())
        }
        Op::ScatterRows => {
            let vals = b.operand(n.inputs[1])?;
            let idx = b.operand(n.inputs[2])?;
            let dst = b.operand(v)?;
            let name = format!(
                "kernel_set_rows_{}_{}",
                type_suffix(g.ty(v).dtype)?,
                type_suffix(g.ty(n.inputs[2]).dtype)?
            );
            // A quantized destination's kernel takes a block of 32 values
            // a work-group (set_rows.cl).
            let local = g.ty(v).dtype.is_quantized().then_some([32, 1, 1]);
            let global = [
                vals.ne[0] as usize,
                vals.ne[1] as usize,
                (vals.ne[2] * vals.ne[3]) as usize,
            ];
            out.push(grid(
                b,
                "set_rows",
                &name,
                global,
                local,
                "set_rows",
                |a| {
                    a.tensor(&vals)?.tensor(&idx)?.tensor(&dst)?;
                    Ok(())
                },
            )?);
            Ok(())
        }
        Op::MulMat => super::mul_mat::lower(b, n, v, out),
        Op::Hadamard => {
            let (x, dst) = (b.operand(n.inputs[1])?, b.operand(v)?);
            hadamard(b, &x, &dst, v, out)
        }
        Op::FusedRmsNorm { eps, has_add } => {
            super::fused_norm::lower(b, id, n, *eps, *has_add, out)
        }
        Op::MulMatGroup => super::fused_matmul::lower_group(b, id, n, out),
        Op::MulMatGlu { kind } => super::fused_matmul::lower_glu(b, id, n, *kind, out),
        Op::RopeStore(p) => super::rope_store::lower(b, id, n, p, out),
        Op::MulMatGroupRope(p) => super::group_rope::lower(b, id, n, p, out),
        Op::RopeRotStore(p) => super::rope_rot_store::lower(b, id, n, p, out),
        Op::MulMatAddNorm { eps } => super::matmul_norm::lower(b, id, n, *eps, out),
        Op::MulMatNormed => super::matmul_norm::lower_normed(b, id, n, out),
        Op::FlashAttn {
            scale,
            max_bias,
            softcap,
            has_mask,
            rotation,
        } => {
            let q = b.operand(n.inputs[0])?;
            let (k, vv) = (b.operand(n.inputs[1])?, b.operand(n.inputs[2])?);
            let mask = if *has_mask {
                b.operand(n.inputs[3])?
            } else {
                q
            };
            let attention = b.operand(v)?;
            // With the rotation fused in, the split kernels write the rotated
            // rows straight into port 1's memory (in the attention's layout,
            // the pass checked both contiguous); every other kernel writes
            // the attention, and a Hadamard launch rotates it after them.
            let rotated = match *rotation {
                0 => None,
                _ => Some((Value::new(id, 1), b.operand(Value::new(id, 1))?)),
            };
            let dst = match rotated {
                Some((_, r)) => Operand {
                    mem: r.mem,
                    offset: r.offset,
                    ..attention
                },
                None => attention,
            };
            let rotate_after = |b: &mut Binder, out: &mut Vec<Launch>| match rotated {
                Some((rv, r)) => {
                    let x = Operand {
                        mem: attention.mem,
                        offset: attention.offset,
                        ..r
                    };
                    hadamard(b, &x, &r, rv, out)
                }
                None => Ok(()),
            };
            let (m0, m1, n_head_log2) = alibi(q.ne[2] as u32, *max_bias);
            // As ggml's CPU backend: the scale is divided by the softcap before
            // the dot product is capped with softcap * tanh(s).
            let scale = if *softcap != 0.0 {
                scale / softcap
            } else {
                *scale
            };
            let mut fa = super::flash_attn::FaArgs {
                ops: [q, k, vv, mask, dst],
                types: [0, 1, 2].map(|i| g.ty(n.inputs[i]).clone()),
                has_mask: *has_mask,
                params: [scale, *max_bias, m0, m1, *softcap],
                n_head_log2,
            };
            // A quantized cache: the split kernel that reads it as it lies,
            // else every kernel through its F16 copy.
            let quantized = fa.types[1..].iter().any(|t| t.dtype.is_quantized());
            if quantized && super::flash_attn::lower_split(b, id, n, &fa, out)? {
                return Ok(());
            }
            let ([k, vv], [tk, tv]) = super::flash_attn::dequantized(b, n, [k, vv], out)?;
            (fa.ops[1], fa.ops[2], fa.types[1], fa.types[2]) = (k, vv, tk, tv);
            if super::flash_attn::lower_split(b, id, n, &fa, out)? {
                return Ok(());
            }
            fa.ops[4] = attention;
            if super::flash_attn::lower_tiled(b, n, &fa, out)? {
                return rotate_after(b, out);
            }
            let global = [ROW_WG, q.ne[1] as usize, (q.ne[2] * q.ne[3]) as usize];
            out.push(grid(
                b,
                "flash_attn",
                "kernel_flash_attn_ext_f16",
                global,
                Some([ROW_WG, 1, 1]),
                "flash_attn",
                |a| {
                    fa.bind_inputs(a)?;
                    a.tensor(&attention)?;
                    fa.bind_params(a)
                },
            )?);
            rotate_after(b, out)
        }
    }
}

/// The rows of `x` (contiguous F32, `x.ne[0]` a power of two) by the
/// normalized Hadamard matrix into `dst`, and into the Q8_1 copy that a
/// decode matmul reads of `value` (dst's).
fn hadamard(
    b: &mut Binder,
    x: &Operand,
    dst: &Operand,
    value: Value,
    out: &mut Vec<Launch>,
) -> Result<()> {
    let rows = (x.ne[1] * x.ne[2] * x.ne[3]).max(0) as usize;
    let scale = 1.0 / (x.ne[0] as f32).sqrt();
    // Whole Q8_1 blocks a row, in the (contiguous) output's order.
    let q8 = if x.ne[0] % 32 == 0 {
        b.q8_target(value)
    } else {
        None
    };
    out.push(grid(
        b,
        "hadamard",
        "kernel_hadamard_f32",
        [HADAMARD_WG, rows, 1],
        Some([HADAMARD_WG, 1, 1]),
        "hadamard",
        |a| {
            a.tensor(x)?.tensor(dst)?.f32(scale)?;
            match q8 {
                Some(t) => a.i32(1)?.ptr_out(t.mem, t.offset)?,
                None => a.i32(0)?.ptr_out(dst.mem, dst.offset)?,
            };
            Ok(())
        },
    )?);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alibi_matches_ggml_for_non_power_of_two_heads() {
        let (m0, m1, l2) = alibi(12, 8.0);
        assert_eq!(l2, 8);
        assert_eq!(m0, 2f32.powf(-1.0));
        assert_eq!(m1, 2f32.powf(-0.5));
    }

    #[test]
    fn yarn_corr_dims_are_clamped() {
        let c = rope_yarn_corr_dims(128, 4096, 10000.0, 32.0, 1.0);
        assert!(c[0] >= 0.0 && c[1] <= 127.0 && c[0] <= c[1]);
    }
}
