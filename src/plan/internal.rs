//! Planning of `Place::Internal` values (the C decoder path). Dynamic dims are
//! resolved from the actual inputs and the variables' current values; every
//! value that makes data gets a region of one arena, views and in-place ops
//! alias their source; the result is a graph whose places are all `Bound`, which
//! `Plan::build` lowers exactly like a ggml graph. Plans are built per concrete
//! shape set (`Resolved::key`) and cached by the caller.

use crate::error::{Error, Result};
use crate::ggml::types::GgmlType::{self, F32, I32, I64};
use crate::ir::op::ViewRule;
use crate::ir::{Graph, MemRef, Op, Place, TensorType, Value};
use crate::runtime::{Device, DeviceBuffer, BUFFER_ALIGNMENT};
use std::collections::HashMap;
use std::sync::Arc;

/// A tensor the host handed in: concrete dims and its bytes (contiguous).
#[derive(Clone, Debug, PartialEq)]
pub struct HostTensor {
    pub ne: [i64; 4],
    pub data: Vec<u8>,
}

/// What dynamic dims are resolved from.
pub struct Env<'a> {
    /// Graph inputs by name.
    pub inputs: &'a HashMap<String, HostTensor>,
    /// Current dims of each variable that holds a value; the others read their
    /// initial value.
    pub variables: &'a HashMap<String, [i64; 4]>,
}

/// Concrete types of every output of every node.
pub struct Resolved {
    pub types: Vec<Vec<TensorType>>,
}

impl Resolved {
    /// Everything a plan depends on besides the graph: the dims of every value.
    pub fn key(&self) -> Vec<[i64; 4]> {
        self.types.iter().flatten().map(|t| t.ne).collect()
    }
    pub fn ty(&self, v: Value) -> &TensorType {
        &self.types[v.node][v.port as usize]
    }
}

/// Bytes of a contiguous tensor of type `t`.
pub fn nbytes(t: &TensorType) -> u64 {
    if t.ne.iter().any(|&d| d <= 0) {
        return 0;
    }
    t.dtype.row_bytes(t.ne[0]) * (t.ne[1] * t.ne[2] * t.ne[3]) as u64
}

fn shape_text(ne: &[i64; 4]) -> String {
    let d: Vec<String> = ne
        .iter()
        .map(|d| if *d < 0 { "?".into() } else { d.to_string() })
        .collect();
    format!("[{}]", d.join(","))
}

fn mismatch(g: &Graph, i: usize, what: String) -> Error {
    let n = &g.nodes[i];
    Error::InvalidArgument(format!("{} '{}': {what}", n.op.kind(), n.name))
}

/// The one dynamic dim of `decl` inferred from an element count, or the
/// declared dims when they are all static.
fn by_count(decl: &TensorType, count: i64) -> Option<[i64; 4]> {
    let mut ne = decl.ne;
    let dynamic: Vec<usize> = (0..4).filter(|&d| ne[d] < 0).collect();
    let known: i64 = ne.iter().filter(|&&d| d >= 0).product();
    match dynamic.as_slice() {
        [] => (known == count).then_some(ne),
        [d] => {
            if known == 0 {
                (count == 0).then(|| {
                    ne[*d] = 0;
                    ne
                })
            } else if count % known == 0 {
                ne[*d] = count / known;
                Some(ne)
            } else {
                None
            }
        }
        _ => None,
    }
}

fn host_i64s(t: &HostTensor, dtype: GgmlType) -> Vec<i64> {
    match dtype {
        I32 => t
            .data
            .chunks_exact(4)
            .map(|c| i32::from_ne_bytes([c[0], c[1], c[2], c[3]]) as i64)
            .collect(),
        I64 => t
            .data
            .chunks_exact(8)
            .map(|c| i64::from_ne_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
            .collect(),
        _ => Vec::new(),
    }
}

/// The host data behind `v` when it is a graph input.
fn host_of<'e>(g: &Graph, env: &Env<'e>, v: Value) -> Option<&'e HostTensor> {
    let n = &g.nodes[v.node];
    (n.op == Op::Parameter)
        .then(|| env.inputs.get(&n.name))
        .flatten()
}

/// Resolves every dynamic dim for the given inputs and variable values, checking
/// that operands agree the way the kernels need.
pub fn resolve(g: &Graph, env: &Env) -> Result<Resolved> {
    let mut types: Vec<Vec<TensorType>> = Vec::with_capacity(g.nodes.len());
    for (i, n) in g.nodes.iter().enumerate() {
        let ins: Vec<TensorType> = n
            .inputs
            .iter()
            .map(|v| types[v.node][v.port as usize].clone())
            .collect();
        let decl = &n.outputs[0].ty;
        let bad = |what: String| mismatch(g, i, what);
        let contiguous = |ne: [i64; 4]| TensorType::contiguous(decl.dtype, ne);
        let same = |t: &TensorType| contiguous(t.ne);
        let out: Vec<TensorType> = match &n.op {
            Op::Parameter => {
                if let Place::Bound(_) = n.outputs[0].place {
                    vec![decl.clone()]
                } else {
                    match env.inputs.get(&n.name) {
                        Some(h) => vec![contiguous(h.ne)],
                        None if g.users(Value::new(i, 0)).is_empty()
                            && !g.results.contains(&Value::new(i, 0)) =>
                        {
                            vec![contiguous(decl.ne.map(|d| d.max(0)))]
                        }
                        None => {
                            return Err(Error::InvalidArgument(format!(
                                "input '{}' was not set",
                                n.name
                            )))
                        }
                    }
                }
            }
            Op::Constant { .. } => vec![decl.clone()],
            Op::ReadValue { variable } => match env.variables.get(variable) {
                Some(ne) => vec![contiguous(*ne)],
                None => vec![same(&ins[0])],
            },
            Op::Assign { .. } => vec![ins[0].clone()],
            Op::View => {
                return Err(Error::Unsupported(format!(
                    "View '{}' without a layout rule on the internal-memory path",
                    n.name
                )))
            }
            Op::ViewAs(ViewRule::Reshape) => {
                let a = &ins[0];
                if !a.is_contiguous() && a.nelements() > 0 {
                    return Err(bad(format!(
                        "reshapes a non-contiguous source {}",
                        shape_text(&a.ne)
                    )));
                }
                let ne = by_count(decl, a.nelements()).ok_or_else(|| {
                    bad(format!(
                        "cannot reshape {} to {}",
                        shape_text(&a.ne),
                        shape_text(&decl.ne)
                    ))
                })?;
                vec![contiguous(ne)]
            }
            Op::ViewAs(ViewRule::Permute(axes)) => {
                let a = &ins[0];
                let mut t = a.clone();
                t.dtype = decl.dtype;
                for (d, &ax) in axes.iter().enumerate() {
                    t.ne[ax as usize] = a.ne[d];
                    t.nb[ax as usize] = a.nb[d];
                }
                vec![t]
            }
            Op::ViewAs(ViewRule::Offset(off)) => {
                let a = &ins[0];
                let mut ne = decl.ne;
                for (d, x) in ne.iter_mut().enumerate() {
                    if *x < 0 {
                        *x = a.ne[d];
                    }
                }
                let t = TensorType {
                    dtype: decl.dtype,
                    ne,
                    nb: a.nb,
                };
                if off + t.span_bytes() > a.span_bytes().max(nbytes(a)) {
                    return Err(bad(format!(
                        "view of {} at byte {off} runs past its source {}",
                        shape_text(&ne),
                        shape_text(&a.ne)
                    )));
                }
                vec![t]
            }
            Op::Copy => {
                let a = &ins[0];
                let ne = if (0..4).all(|d| decl.ne[d] < 0 || decl.ne[d] == a.ne[d])
                    && !decl.has_dynamic_rank()
                {
                    a.ne
                } else {
                    by_count(decl, a.nelements()).ok_or_else(|| {
                        bad(format!(
                            "cannot copy {} into {}",
                            shape_text(&a.ne),
                            shape_text(&decl.ne)
                        ))
                    })?
                };
                vec![contiguous(ne)]
            }
            Op::Binary(_) => {
                let (a, b) = (&ins[0], &ins[1]);
                if !(0..4).all(|d| b.ne[d] > 0 && a.ne[d] % b.ne[d] == 0) {
                    return Err(bad(format!(
                        "{} does not broadcast over {}",
                        shape_text(&b.ne),
                        shape_text(&a.ne)
                    )));
                }
                vec![same(a)]
            }
            Op::Scale { .. } | Op::Unary(_) | Op::RmsNorm { .. } | Op::Norm { .. } => {
                vec![same(&ins[0])]
            }
            Op::Rope(_) => {
                if ins[1].ne[0] != ins[0].ne[2] {
                    return Err(bad(format!(
                        "{} positions for {} tokens",
                        ins[1].ne[0], ins[0].ne[2]
                    )));
                }
                vec![same(&ins[0])]
            }
            Op::SoftMax { has_mask, .. } => {
                let a = &ins[0];
                if *has_mask {
                    let m = &ins[1];
                    if m.ne[0] != a.ne[0]
                        || m.ne[1] < a.ne[1]
                        || m.ne[2] <= 0
                        || m.ne[3] <= 0
                        || a.ne[2] % m.ne[2] != 0
                        || a.ne[3] % m.ne[3] != 0
                    {
                        return Err(bad(format!(
                            "mask {} does not fit {}",
                            shape_text(&m.ne),
                            shape_text(&a.ne)
                        )));
                    }
                }
                vec![same(a)]
            }
            Op::Glu { .. } => {
                let a = &ins[0];
                if ins.len() == 2 {
                    if ins[1].ne != a.ne {
                        return Err(bad(format!(
                            "halves {} and {}",
                            shape_text(&a.ne),
                            shape_text(&ins[1].ne)
                        )));
                    }
                    vec![same(a)]
                } else {
                    vec![contiguous([a.ne[0] / 2, a.ne[1], a.ne[2], a.ne[3]])]
                }
            }
            Op::MulMat | Op::Hadamard => {
                let (w, x) = (&ins[0], &ins[1]);
                if w.ne[0] != x.ne[0]
                    || w.ne[2] <= 0
                    || w.ne[3] <= 0
                    || x.ne[2] % w.ne[2] != 0
                    || x.ne[3] % w.ne[3] != 0
                {
                    return Err(bad(format!(
                        "{} times {}",
                        shape_text(&w.ne),
                        shape_text(&x.ne)
                    )));
                }
                vec![contiguous([w.ne[1], x.ne[1], x.ne[2], x.ne[3]])]
            }
            Op::GetRows => {
                let (a, r) = (&ins[0], &ins[1]);
                if a.ne[2] != r.ne[1] || a.ne[3] != r.ne[2] || r.ne[3] != 1 {
                    return Err(bad(format!(
                        "rows {} of table {}",
                        shape_text(&r.ne),
                        shape_text(&a.ne)
                    )));
                }
                vec![contiguous([a.ne[0], r.ne[0], r.ne[1], r.ne[2]])]
            }
            Op::SetRows => {
                return Err(Error::InvalidGraph(format!(
                    "SetRows '{}' reached planning: no pass lowered it",
                    n.name
                )))
            }
            Op::ScatterRows => {
                let (dst, rows, idx) = (&ins[0], &ins[1], &ins[2]);
                let ok = rows.ne[0] == dst.ne[0]
                    && rows.ne[2] == dst.ne[2]
                    && rows.ne[3] == dst.ne[3]
                    && rows.ne[1] == idx.ne[0]
                    && idx.ne[1] > 0
                    && idx.ne[2] > 0
                    && rows.ne[2] % idx.ne[1] == 0
                    && rows.ne[3] % idx.ne[2] == 0;
                if !ok {
                    return Err(bad(format!(
                        "rows {} with indices {} into {}",
                        shape_text(&rows.ne),
                        shape_text(&idx.ne),
                        shape_text(&dst.ne)
                    )));
                }
                vec![dst.clone()]
            }
            Op::FlashAttn { has_mask, .. } => {
                let (q, k, v) = (&ins[0], &ins[1], &ins[2]);
                let ok = q.ne[0] == k.ne[0]
                    && k.ne[1] == v.ne[1]
                    && k.ne[2] == v.ne[2]
                    && k.ne[2] > 0
                    && q.ne[2] % k.ne[2] == 0
                    && k.ne[3] == q.ne[3]
                    && v.ne[3] == q.ne[3];
                let mask_ok = !*has_mask || {
                    let m = &ins[3];
                    m.ne[0] == k.ne[1]
                        && m.ne[1] >= q.ne[1]
                        && m.ne[2] > 0
                        && m.ne[3] > 0
                        && q.ne[2] % m.ne[2] == 0
                        && q.ne[3] % m.ne[3] == 0
                };
                if !ok || !mask_ok {
                    return Err(bad(format!(
                        "q {}, k {}, v {} do not fit",
                        shape_text(&q.ne),
                        shape_text(&k.ne),
                        shape_text(&v.ne)
                    )));
                }
                vec![contiguous([v.ne[0], q.ne[2], q.ne[1], q.ne[3]])]
            }
            Op::SumRows => {
                let a = &ins[0];
                vec![contiguous([1, a.ne[1], a.ne[2], a.ne[3]])]
            }
            Op::Concat { dim } => {
                let (a, b) = (&ins[0], &ins[1]);
                let d = *dim as usize;
                if d > 3 || (0..4).any(|k| k != d && a.ne[k] != b.ne[k]) {
                    return Err(bad(format!(
                        "{} and {} along dim {dim}",
                        shape_text(&a.ne),
                        shape_text(&b.ne)
                    )));
                }
                let mut ne = a.ne;
                ne[d] += b.ne[d];
                vec![contiguous(ne)]
            }
            Op::Gather { axis } => {
                let (a, idx) = (&ins[0], &ins[1]);
                if !(0..4).contains(axis) || idx.ne[1..] != [1, 1, 1] {
                    return Err(bad(format!(
                        "indices {} along dim {axis}",
                        shape_text(&idx.ne)
                    )));
                }
                let mut ne = a.ne;
                ne[*axis as usize] = idx.ne[0];
                vec![contiguous(ne)]
            }
            Op::TopK { has_k_input } => {
                let a = &ins[0];
                let k = if decl.ne[0] >= 0 {
                    decl.ne[0]
                } else if *has_k_input {
                    let h = host_of(g, env, n.inputs[1]).ok_or_else(|| {
                        bad("a dynamic k must come from a graph input that was set".to_string())
                    })?;
                    *host_i64s(h, g.ty(n.inputs[1]).dtype)
                        .first()
                        .ok_or_else(|| bad("the k input is empty".to_string()))?
                } else {
                    return Err(bad("k is dynamic and there is no k input".to_string()));
                };
                if k < 0 || k > a.ne[0] {
                    return Err(bad(format!("k = {k} for rows of {}", a.ne[0])));
                }
                let ne = [k, a.ne[1], a.ne[2], a.ne[3]];
                vec![
                    TensorType::contiguous(F32, ne),
                    TensorType::contiguous(I32, ne),
                ]
            }
            // The fusion passes run on the ggml path only, whose tensors are
            // all placed; this planner never sees their ops.
            Op::FusedRmsNorm { .. }
            | Op::MulMatGroup
            | Op::MulMatGlu { .. }
            | Op::RopeStore(_)
            | Op::MulMatGroupRope(_)
            | Op::RopeRotStore(_)
            | Op::MulMatAddNorm { .. }
            | Op::MulMatNormed => {
                return Err(bad(format!(
                    "{} is made by the ggml path's fusion passes only",
                    n.op.kind()
                )))
            }
        };
        for (p, t) in out.iter().enumerate() {
            let d = &n.outputs[p].ty;
            if d.has_dynamic_rank() {
                continue;
            }
            if (0..4).any(|k| d.ne[k] >= 0 && d.ne[k] != t.ne[k]) || t.ne.iter().any(|&x| x < 0) {
                return Err(mismatch(
                    g,
                    i,
                    format!(
                        "computes {} but is declared {}",
                        shape_text(&t.ne),
                        shape_text(&d.ne)
                    ),
                ));
            }
        }
        types.push(out);
    }
    let r = Resolved { types };
    check_indices(g, env, &r)?;
    Ok(r)
}

/// Index values that come from the host are checked before any kernel uses them:
/// an out-of-range row would write or read outside a tensor.
fn check_indices(g: &Graph, env: &Env, r: &Resolved) -> Result<()> {
    for n in &g.nodes {
        let (idx_v, limit, what) = match &n.op {
            Op::ScatterRows => (n.inputs[2], r.ty(n.inputs[0]).ne[1], "row index"),
            Op::GetRows => (n.inputs[1], r.ty(n.inputs[0]).ne[1], "row id"),
            Op::Gather { axis } => (
                n.inputs[1],
                r.ty(n.inputs[0]).ne[(*axis).clamp(0, 3) as usize],
                "index",
            ),
            _ => continue,
        };
        let Some(h) = host_of(g, env, idx_v) else {
            continue;
        };
        for (j, x) in host_i64s(h, g.ty(idx_v).dtype).into_iter().enumerate() {
            if x < 0 || x >= limit {
                return Err(Error::InvalidArgument(format!(
                    "input '{}': {what} {x} at position {j} is outside [0, {limit}) of {} '{}'",
                    g.nodes[idx_v.node].name,
                    n.op.kind(),
                    n.name
                )));
            }
        }
    }
    Ok(())
}

/// A variable read: the ReadValue's region, and where its initial value is.
#[derive(Clone, Debug)]
pub struct StateRead {
    pub variable: String,
    pub at: MemRef,
    pub ty: TensorType,
    pub init: MemRef,
}

/// A resolved graph placed in device memory.
pub struct Placed {
    /// Concrete types; every output `Bound`.
    pub graph: Graph,
    /// Plan-owned memory of the values (registered, so `Plan::build` can bind it).
    pub arena: Arc<DeviceBuffer>,
    /// Where to upload each graph input.
    pub inputs: Vec<(String, MemRef, TensorType)>,
    pub reads: Vec<StateRead>,
    /// Variable commits: the Assign's source region and type.
    pub assigns: Vec<(String, MemRef, TensorType)>,
    /// Graph results by name.
    pub results: Vec<(String, MemRef, TensorType)>,
}

impl Drop for Placed {
    fn drop(&mut self) {
        DeviceBuffer::release(self.arena.base);
    }
}

/// Gives every value memory: data-making values a region of one arena, views
/// and in-place ops (ScatterRows, Assign) their source's memory.
pub fn place(g: &Graph, r: &Resolved, device: &Arc<Device>) -> Result<Placed> {
    let align = BUFFER_ALIGNMENT as u64;
    let mut offsets: Vec<Vec<Option<u64>>> = Vec::with_capacity(g.nodes.len());
    let mut total = 0u64;
    for (i, n) in g.nodes.iter().enumerate() {
        let owns = !matches!(
            n.op,
            Op::View | Op::ViewAs(_) | Op::Assign { .. } | Op::ScatterRows
        ) && !matches!(n.outputs[0].place, Place::Bound(_));
        let mut ports = Vec::new();
        for p in 0..n.outputs.len() {
            if owns {
                ports.push(Some(total));
                total += nbytes(&r.types[i][p]).div_ceil(align) * align;
            } else {
                ports.push(None);
            }
        }
        offsets.push(ports);
    }
    // Always one buffer, so even a graph of empty tensors binds real memory.
    let arena = DeviceBuffer::alloc(device, total.max(1) as usize)?;
    let arena_ref = |off: u64| MemRef {
        buffer: arena.base,
        offset: off,
    };
    let mut out = g.clone();
    let mut mem: Vec<Vec<MemRef>> = Vec::with_capacity(g.nodes.len());
    for (i, n) in g.nodes.iter().enumerate() {
        let mut ports = Vec::new();
        for (p, off) in offsets[i].iter().enumerate() {
            let m = match (*off, n.outputs[p].place) {
                (Some(off), _) => arena_ref(off),
                (None, Place::Bound(m)) => m,
                (None, Place::Internal) => {
                    let src = n.inputs[0];
                    let base = mem[src.node][src.port as usize];
                    let extra = match n.op {
                        Op::ViewAs(ViewRule::Offset(o)) => o,
                        _ => 0,
                    };
                    if let Op::ScatterRows = n.op {
                        if matches!(g.nodes[root_of(g, src).node].op, Op::Constant { .. }) {
                            return Err(Error::Unsupported(format!(
                                "ScatterRows '{}' writes into a constant (a weight)",
                                n.name
                            )));
                        }
                    }
                    MemRef {
                        buffer: base.buffer,
                        offset: base.offset + extra,
                    }
                }
            };
            out.nodes[i].outputs[p] = crate::ir::Output {
                ty: r.types[i][p].clone(),
                place: Place::Bound(m),
            };
            ports.push(m);
        }
        mem.push(ports);
    }
    let mut placed = Placed {
        graph: out,
        arena,
        inputs: Vec::new(),
        reads: Vec::new(),
        assigns: Vec::new(),
        results: Vec::new(),
    };
    for (i, n) in g.nodes.iter().enumerate() {
        let at = mem[i][0];
        let ty = r.types[i][0].clone();
        match &n.op {
            Op::Parameter if offsets[i][0].is_some() => {
                placed.inputs.push((n.name.clone(), at, ty))
            }
            Op::Constant { data } if offsets[i][0].is_some() => {
                placed.arena.write(at.offset as usize, data)?;
            }
            Op::ReadValue { variable } => {
                let init = mem[n.inputs[0].node][n.inputs[0].port as usize];
                placed.reads.push(StateRead {
                    variable: variable.clone(),
                    at,
                    ty,
                    init,
                });
            }
            Op::Assign { variable } => {
                if !ty.is_contiguous() && ty.nelements() > 0 {
                    return Err(Error::Unsupported(format!(
                        "Assign '{}' of a non-contiguous value",
                        n.name
                    )));
                }
                placed.assigns.push((variable.clone(), at, ty));
            }
            _ => {}
        }
    }
    for &v in &g.results {
        placed.results.push((
            g.value_name(v),
            mem[v.node][v.port as usize],
            r.ty(v).clone(),
        ));
    }
    Ok(placed)
}

/// The value whose memory `v` aliases (through views and in-place ops).
fn root_of(g: &Graph, mut v: Value) -> Value {
    while matches!(
        g.nodes[v.node].op,
        Op::View | Op::ViewAs(_) | Op::Assign { .. } | Op::ScatterRows
    ) && !matches!(g.nodes[v.node].outputs[0].place, Place::Bound(_))
    {
        v = g.nodes[v.node].inputs[0];
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ggml::types::GgmlType::F16;
    use crate::ir::Output;

    fn internal(t: TensorType) -> Vec<Output> {
        vec![Output {
            ty: t,
            place: Place::Internal,
        }]
    }

    #[test]
    fn dynamic_dims_follow_the_inputs() {
        let mut g = Graph::default();
        let x = g.add(
            Op::Parameter,
            vec![],
            internal(TensorType::contiguous(F32, [-1, -1, 1, 1])),
            "x",
        );
        let r = g.add(
            Op::ViewAs(ViewRule::Reshape),
            vec![Value::new(x, 0)],
            internal(TensorType::contiguous(F32, [4, 2, -1, 1])),
            "r",
        );
        let p = g.add(
            Op::ViewAs(ViewRule::Permute([0, 2, 1, 3])),
            vec![Value::new(r, 0)],
            internal(TensorType::contiguous(F32, [4, -1, 2, 1])),
            "p",
        );
        let c = g.add(
            Op::Copy,
            vec![Value::new(p, 0)],
            internal(TensorType::contiguous(F16, [4, -1, 2, 1])),
            "c",
        );
        g.results = vec![Value::new(c, 0)];
        let mut inputs = HashMap::new();
        inputs.insert(
            "x".to_string(),
            HostTensor {
                ne: [8, 3, 1, 1],
                data: vec![0; 8 * 3 * 4],
            },
        );
        let vars = HashMap::new();
        let res = resolve(
            &g,
            &Env {
                inputs: &inputs,
                variables: &vars,
            },
        )
        .unwrap();
        assert_eq!(res.types[r][0].ne, [4, 2, 3, 1]);
        assert_eq!(res.types[p][0].ne, [4, 3, 2, 1]);
        assert_eq!(res.types[p][0].nb, [4, 32, 16, 96]);
        assert_eq!(res.types[c][0].ne, [4, 3, 2, 1]);
        // 18 elements cannot be reshaped to [4, 2, ?]: the error names the node.
        inputs.insert(
            "x".to_string(),
            HostTensor {
                ne: [6, 3, 1, 1],
                data: vec![0; 6 * 3 * 4],
            },
        );
        let e = resolve(
            &g,
            &Env {
                inputs: &inputs,
                variables: &vars,
            },
        )
        .err()
        .unwrap()
        .to_string();
        assert!(e.contains("'r'"), "{e}");
    }

    #[test]
    fn by_count_infers_one_dim() {
        let t = TensorType::contiguous(F32, [4, -1, 2, 1]);
        assert_eq!(by_count(&t, 24), Some([4, 3, 2, 1]));
        assert_eq!(by_count(&t, 25), None);
        assert_eq!(by_count(&t, 0), Some([4, 0, 2, 1]));
        assert_eq!(
            by_count(&TensorType::contiguous(F32, [-1, -1, 1, 1]), 4),
            None
        );
    }
}
