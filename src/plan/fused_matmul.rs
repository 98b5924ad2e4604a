//! MulMatGroup and MulMatGlu lowering: the activation is quantized to Q8_1
//! once (or was written by its producer, `Binder::q8_target`), then one
//! launch of the group or GLU kernel of `mul_mv.cl`. The passes only make
//! these ops for Q4_0/Q8_0/Q4_K/Q6_K weights and one-column activations.

use super::lower::grid;
use super::matmul_norm::NormScale;
use super::mul_mat::activation;
use super::Binder;
use crate::config;
use crate::error::{ClContext, Error, Result};
use crate::ggml::types::GgmlType::{self, Q4K, Q4_0, Q6K, Q8_0};
use crate::ir::{GluKind, Node, Op, Value};
use crate::runtime::executor::{ArgBinder, Launch, Operand};
use crate::runtime::Device;
use opencl3::types::cl_mem;

/// Row groups a work-group (two rows each) and lanes a row group of the
/// group kernel (MV_ROWS, MV_LANES).
const MV_ROWS: usize = 4;
const MV_LANES: usize = 32;
/// Rows a work-group of the GLU kernel (GLU_ROWS): whole Q8_1 blocks.
const GLU_ROWS: usize = 32;

pub(super) fn suffix(b: &Binder, w: Value, n: &Node) -> Result<&'static str> {
    match b.graph.ty(w).dtype {
        Q4_0 => Ok("q4_0"),
        Q8_0 => Ok("q8_0"),
        Q4K => Ok("q4_k"),
        Q6K => Ok("q6_k"),
        t => Err(Error::Unsupported(format!(
            "fused matmul '{}' with {} weights",
            n.name,
            t.name()
        ))),
    }
}

/// The group kernels' weight types: the suffix of the kernel (one type, or
/// `mixed`) and the type codes of `mv_row2_mixed` (8 bits a matrix).
pub(super) fn group_types(b: &Binder, ws: &[Value], n: &Node) -> Result<(&'static str, i32)> {
    let suffixes = ws
        .iter()
        .map(|&w| suffix(b, w, n))
        .collect::<Result<Vec<_>>>()?;
    let mut codes = 0i32;
    for (k, s) in suffixes.iter().enumerate() {
        let code = match *s {
            "q4_0" => 0,
            "q8_0" => 1,
            "q4_k" => 2,
            _ => 3,
        };
        codes |= code << (8 * k);
    }
    let same = suffixes.iter().all(|s| *s == suffixes[0]);
    Ok((if same { suffixes[0] } else { "mixed" }, codes))
}

/// The Q8_1 activation of a fused matmul: (memory, byte offset), and the
/// 1/rms its dot products take where the activation is a MulMatAddNorm's
/// norm (plan/matmul_norm.rs).
pub(super) fn q8_activation(
    b: &mut Binder,
    n: &Node,
    out: &mut Vec<Launch>,
) -> Result<(Operand, u64, NormScale)> {
    let xv = *n.inputs.last().expect("arity checked");
    let x = b.operand(xv)?;
    // Fused matmuls exist only on fast-kernel devices, for one token.
    let (act, slot) = activation(b, (n.inputs[0], xv), &x, true, out)?;
    let shares = slot.and_then(|s| b.mm.q8.norm_shares(s));
    let src = b.graph.reshaped_source(xv);
    if shares.is_none()
        && src.port == 1
        && matches!(b.graph.nodes[src.node].op, Op::MulMatAddNorm { .. })
    {
        return Err(Error::InvalidGraph(format!(
            "'{}' reads the norm of MulMatAddRmsNorm '{}' other than through its Q8_1 copy",
            n.name, b.graph.nodes[src.node].name
        )));
    }
    Ok((
        Operand {
            mem: act.0,
            offset: act.1,
            ..x
        },
        act.1,
        NormScale::new(act.0, shares),
    ))
}

/// The group kernel's grid for these weights (one to three): global and
/// local size, and the work-groups of matrices 0 and 1 (g0, g1); matrix 2
/// takes the rest.
pub(super) fn group_layout(ws: &[Operand]) -> ([usize; 3], [usize; 3], i64, i64) {
    let groups: Vec<usize> = ws
        .iter()
        .map(|w| (w.ne[1] as usize).div_ceil(2 * MV_ROWS))
        .collect();
    let total: usize = groups.iter().sum();
    let (g0, g1) = (groups[0] as i64, groups.get(1).copied().unwrap_or(0) as i64);
    (
        [total * MV_ROWS * MV_LANES, 1, 1],
        [MV_ROWS * MV_LANES, 1, 1],
        g0,
        g1,
    )
}

/// The group kernels' leading arguments: three weights, the Q8_1
/// activation, three results, the work-groups of matrices 0 and 1, the
/// weight type codes (`group_types`).
pub(super) fn bind_group(
    a: &mut ArgBinder,
    ws: &[Operand],
    act: (cl_mem, u64),
    ds: &[Operand],
    (g0, g1): (i64, i64),
    wtypes: i32,
) -> Result<()> {
    a.tensor(&ws[0])?.tensor(&ws[1])?.tensor(&ws[2])?;
    a.ptr(act.0, act.1)?;
    a.tensor_out(&ds[0])?
        .tensor_out(&ds[1])?
        .tensor_out(&ds[2])?;
    a.i64(g0)?.i64(g1)?.i32(wtypes)?;
    Ok(())
}

pub fn lower_group(b: &mut Binder, id: usize, n: &Node, out: &mut Vec<Launch>) -> Result<()> {
    let m = n.inputs.len() - 1;
    if !(1..=3).contains(&m) {
        return Err(Error::Unsupported(format!(
            "MulMatGroup '{}' of {m} matrices (1 to 3)",
            n.name
        )));
    }
    let (types, wtypes) = group_types(b, &n.inputs[..m], n)?;
    let name = format!("kernel_mul_mv_group_{types}");
    let mut ws = Vec::with_capacity(3);
    let mut ds = Vec::with_capacity(3);
    for k in 0..m {
        ws.push(b.operand(n.inputs[k])?);
        ds.push(b.operand(Value::new(id, k as u32))?);
    }
    let (act, act_off, scale) = q8_activation(b, n, out)?;
    // Unused slots repeat the last matrix; no work-group selects them.
    while ws.len() < 3 {
        ws.push(*ws.last().expect("one matrix at least"));
        ds.push(*ds.last().expect("one result at least"));
    }
    let (global, local, g0, g1) = group_layout(&ws[..m]);
    out.push(grid(
        b,
        "mul_mv",
        &name,
        global,
        Some(local),
        "mul_mat",
        |a| {
            bind_group(a, &ws, (act.mem, act_off), &ds, (g0, g1), wtypes)?;
            scale.bind(a)
        },
    )?);
    Ok(())
}

/// Warps a work-group of `kernel_mul_mv_glu16_q4_0`.
const GLU_WIDE_WARPS: usize = 16;

/// Whether a GLU takes the 16-warp kernel (`kernel_mul_mv_glu16_q4_0`): a Q4_0 GLU on NVIDIA whose 512-wide work-groups of 32 rows
/// are all resident at once, two a compute unit at the kernel's 64
/// registers, unless `POLYCL_GLU_WARPS` chose a width. Each warp then takes
/// two row pairs in sequence instead of four: on an H100 the 1B's GLU (5632
/// rows, 176 groups) took ~10% less time and its tokens ~3% (docs/perf.md
/// steps 50-51), where the 7B's (344 groups, more than fit at once) lost 5%.
/// The other types hold more registers (71-88), one such group a compute
/// unit, so they keep 8 warps.
fn glu_shape(device: &Device, wtype: GgmlType, rows: usize) -> Result<bool> {
    if config::get().glu_warps.is_some()
        || wtype != Q4_0
        || !device.nvidia_ptx()
        || device.max_work_group < GLU_WIDE_WARPS * MV_LANES
    {
        return Ok(false);
    }
    let cus = device.cl.max_compute_units().cl("clGetDeviceInfo")? as usize;
    Ok(rows.div_ceil(GLU_ROWS) <= 2 * cus)
}

pub fn lower_glu(
    b: &mut Binder,
    id: usize,
    n: &Node,
    kind: GluKind,
    out: &mut Vec<Launch>,
) -> Result<()> {
    if kind != GluKind::Swiglu {
        return Err(Error::Unsupported(format!(
            "MulMatGlu '{}': only SwiGLU is fused",
            n.name
        )));
    }
    let (wg, wu) = (b.operand(n.inputs[0])?, b.operand(n.inputs[1])?);
    let rows = wg.ne[1] as usize;
    let wtype = b.graph.ty(n.inputs[0]).dtype;
    let (name, warps) = if glu_shape(&b.device, wtype, rows)? {
        ("kernel_mul_mv_glu16_q4_0".to_string(), GLU_WIDE_WARPS)
    } else {
        // The mul_mv program is built with the device's GLU_WARPS.
        let types = suffix(b, n.inputs[0], n)?;
        (format!("kernel_mul_mv_glu_{types}"), b.device.glu_warps())
    };
    let dglu = b.operand(Value::new(id, 0))?;
    let dgate = b.operand(Value::new(id, 1))?;
    let dup = b.operand(Value::new(id, 2))?;
    let (act, act_off, scale) = q8_activation(b, n, out)?;
    let q8 = if rows.is_multiple_of(32) {
        b.q8_target(Value::new(id, 0))
    } else {
        None
    };
    let (q8_mem, q8_off) = q8.map_or((dglu.mem, 0), |t| (t.mem, t.offset));
    out.push(grid(
        b,
        "mul_mv",
        &name,
        [rows.div_ceil(GLU_ROWS) * warps * MV_LANES, 1, 1],
        Some([warps * MV_LANES, 1, 1]),
        "mul_mat",
        |a| {
            a.tensor(&wg)?.tensor(&wu)?.ptr(act.mem, act_off)?;
            a.tensor_out(&dglu)?.tensor_out(&dgate)?.tensor_out(&dup)?;
            a.ptr_out(q8_mem, q8_off)?.i32(q8.is_some() as i32)?;
            scale.bind(a)
        },
    )?);
    Ok(())
}
