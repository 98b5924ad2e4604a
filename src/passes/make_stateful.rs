//! `make_stateful(skip_caches, append_axis, beam_idx_name)`: the caller's choice
//! to let polycl own KV caches (OpenVINO's GGUFMakeStateful, PR #37435).
//!
//! Candidates are the `SetRows` whose destination is a graph Parameter whose
//! name is not skipped; all are collected before any rewrite. Per cache:
//! Variable (id = the Parameter's name, its shape with the append axis
//! dynamic) read by ReadValue from an empty initial Constant (extent 0 on the
//! append axis) -> Gather(beam_idx) on the outermost dim (ne[3], the seed's
//! axis 0) -> Concat(past, new rows copied into the cache type and layout,
//! append axis), which replaces the SetRows for its readers -> Assign. The cache
//! Parameter and every graph result that is the SetRows output itself are
//! removed. `beam_idx` is reused when a Parameter of that name exists, else an
//! I32 1-D dynamic one is created, and only if some cache was converted.
//!
//! Append axis (a ggml dim, 0..=3): explicit, or the single dynamic dim. Zero or
//! several dynamic dims, a dynamic rank, or a dynamic dim off the append axis
//! are errors naming the cache. The rows' indices are not read: a stateful
//! cache grows by appending in order.

use super::Pass;
use crate::error::{Error, Result};
use crate::ggml::types::GgmlType::{I32, I64};
use crate::ir::{Graph, NodeId, Op, Output, Place, TensorType, Value};
use std::collections::BTreeSet;

/// The dim `Gather(beam_idx)` reorders: the outermost.
pub const BEAM_AXIS: i32 = 3;

#[derive(Clone, Debug, PartialEq)]
pub struct StatefulOptions {
    /// A ggml dim (0..=3), or negative to infer the single dynamic dim.
    pub append_axis: i64,
    pub beam_idx_name: String,
}

impl Default for StatefulOptions {
    fn default() -> Self {
        StatefulOptions {
            append_axis: -1,
            beam_idx_name: "beam_idx".into(),
        }
    }
}

pub struct MakeStateful {
    pub skip_caches: BTreeSet<String>,
    pub options: StatefulOptions,
}

impl MakeStateful {
    pub fn new(
        skip_caches: impl IntoIterator<Item = String>,
        append_axis: i64,
        beam_idx_name: &str,
    ) -> Self {
        MakeStateful {
            skip_caches: skip_caches.into_iter().collect(),
            options: StatefulOptions {
                append_axis,
                beam_idx_name: beam_idx_name.to_string(),
            },
        }
    }
}

/// The graph Parameter a SetRows writes into, if its destination is one.
pub fn cache_parameter(g: &Graph, set_rows: NodeId) -> Option<NodeId> {
    let dst = g.nodes[set_rows].inputs[0];
    (dst.port == 0 && g.nodes[dst.node].op == Op::Parameter).then_some(dst.node)
}

impl Pass for MakeStateful {
    fn name(&self) -> &str {
        "make_stateful"
    }
    fn run(&mut self, g: &mut Graph) -> Result<()> {
        let candidates: Vec<NodeId> = (0..g.nodes.len())
            .filter(|&i| g.nodes[i].op == Op::SetRows)
            .filter(|&i| {
                cache_parameter(g, i).is_some_and(|p| !self.skip_caches.contains(&g.nodes[p].name))
            })
            .collect();
        make_caches_stateful(g, &candidates, &self.options)?;
        Ok(())
    }
}

struct Cache {
    set_rows: NodeId,
    param: NodeId,
    variable: String,
    var_ty: TensorType,
    init_ty: TensorType,
    axis: usize,
}

fn internal(ty: TensorType) -> Vec<Output> {
    vec![Output {
        ty,
        place: Place::Internal,
    }]
}

fn shape_text(ne: &[i64; 4]) -> String {
    let d: Vec<String> = ne
        .iter()
        .map(|d| if *d < 0 { "?".into() } else { d.to_string() })
        .collect();
    format!("[{}]", d.join(","))
}

/// Checks one candidate against the append-axis rules.
fn plan_cache(g: &Graph, set_rows: NodeId, opts: &StatefulOptions) -> Result<Cache> {
    let param = cache_parameter(g, set_rows).ok_or_else(|| {
        Error::InvalidGraph(format!(
            "make_stateful: SetRows '{}' does not write into a graph Parameter",
            g.nodes[set_rows].name
        ))
    })?;
    let name = g.nodes[param].name.clone();
    let ps = g.nodes[param].outputs[0].ty.clone();
    let err = |msg: String| Error::InvalidGraph(format!("make_stateful: cache '{name}' {msg}"));
    if ps.has_dynamic_rank() {
        return Err(err(
            "requires a static cache rank, but its rank is dynamic".into()
        ));
    }
    let dynamic: Vec<usize> = (0..4).filter(|&d| ps.ne[d] < 0).collect();
    let axis = if opts.append_axis >= 0 {
        if opts.append_axis >= 4 {
            return Err(err(format!(
                "has rank 4: append axis {} is out of range for cache '{name}'",
                opts.append_axis
            )));
        }
        opts.append_axis as usize
    } else {
        match dynamic.as_slice() {
            [d] => *d,
            [] => {
                return Err(err(format!(
                    "has the fully static shape {}, so its token axis cannot be inferred; \
                     construct the pass with an explicit append_axis",
                    shape_text(&ps.ne)
                )))
            }
            _ => {
                return Err(err(format!(
                    "has more than one dynamic axis {}, so its token axis cannot be inferred; \
                     construct the pass with an explicit append_axis",
                    shape_text(&ps.ne)
                )))
            }
        }
    };
    if let Some(d) = dynamic.iter().find(|&&d| d != axis) {
        return Err(err(format!(
            "requires static non-token cache dims: dim {d} of {} is dynamic (append axis {axis})",
            shape_text(&ps.ne)
        )));
    }
    let mut var_ne = ps.ne;
    var_ne[axis] = -1;
    let mut init_ne = ps.ne;
    init_ne[axis] = 0;
    Ok(Cache {
        set_rows,
        param,
        variable: name,
        var_ty: TensorType::contiguous(ps.dtype, var_ne),
        init_ty: TensorType::contiguous(ps.dtype, init_ne),
        axis,
    })
}

/// Rewrites the given SetRows (each into a graph Parameter) into state, as the
/// module says. Returns whether anything changed.
pub fn make_caches_stateful(
    g: &mut Graph,
    candidates: &[NodeId],
    opts: &StatefulOptions,
) -> Result<bool> {
    if candidates.is_empty() {
        return Ok(false);
    }
    // Collect and check every cache before touching the graph.
    let mut caches = Vec::new();
    for &c in candidates {
        let cache = plan_cache(g, c, opts)?;
        if caches.iter().any(|k: &Cache| k.param == cache.param) {
            return Err(Error::InvalidGraph(format!(
                "make_stateful: cache '{}' is written by more than one SetRows",
                cache.variable
            )));
        }
        if let Some(&u) = g
            .users(Value::new(cache.param, 0))
            .iter()
            .find(|&&u| u != c)
        {
            return Err(Error::InvalidGraph(format!(
                "make_stateful: cache '{}' is also read by {} '{}'; only its SetRows may use it",
                cache.variable,
                g.nodes[u].op.kind(),
                g.nodes[u].name
            )));
        }
        if g.results.contains(&Value::new(cache.param, 0)) {
            return Err(Error::InvalidGraph(format!(
                "make_stateful: cache '{}' is itself a graph output",
                cache.variable
            )));
        }
        caches.push(cache);
    }
    let existing_beam = g
        .nodes
        .iter()
        .position(|n| n.op == Op::Parameter && n.name == opts.beam_idx_name);
    if let Some(b) = existing_beam {
        let t = &g.nodes[b].outputs[0].ty;
        if ![I32, I64].contains(&t.dtype) || t.has_dynamic_rank() || t.ne[1..] != [1, 1, 1] {
            return Err(Error::InvalidGraph(format!(
                "make_stateful: the existing input '{}' is {} {}; beam indices must be 1-D I32 or I64",
                opts.beam_idx_name,
                t.dtype.name(),
                shape_text(&t.ne)
            )));
        }
    }

    *g = rebuild(g, &caches, existing_beam, opts)?;
    Ok(true)
}

/// The graph with every cache rewritten; `g` is left as it was on error.
fn rebuild(
    old: &Graph,
    caches: &[Cache],
    existing_beam: Option<NodeId>,
    opts: &StatefulOptions,
) -> Result<Graph> {
    let mut ng = Graph::default();
    let mut map: Vec<Vec<Option<Value>>> = old
        .nodes
        .iter()
        .map(|n| vec![None; n.outputs.len()])
        .collect();
    let mut beam: Option<Value> = None;
    for (i, n) in old.nodes.iter().enumerate() {
        if caches.iter().any(|c| c.param == i) || (Some(i) == existing_beam && beam.is_some()) {
            continue;
        }
        if let Some(c) = caches.iter().find(|c| c.set_rows == i) {
            let beam_v = match beam {
                Some(b) => b,
                None => {
                    let id = match existing_beam {
                        Some(b) => ng.add(
                            Op::Parameter,
                            vec![],
                            old.nodes[b].outputs.clone(),
                            old.nodes[b].name.clone(),
                        ),
                        None => ng.add(
                            Op::Parameter,
                            vec![],
                            internal(TensorType::contiguous(I32, [-1, 1, 1, 1])),
                            opts.beam_idx_name.clone(),
                        ),
                    };
                    if let Some(b) = existing_beam {
                        map[b][0] = Some(Value::new(id, 0));
                    }
                    beam = Some(Value::new(id, 0));
                    Value::new(id, 0)
                }
            };
            let var = &c.variable;
            let rows = map[n.inputs[1].node][n.inputs[1].port as usize].ok_or_else(|| {
                Error::InvalidGraph(format!(
                    "make_stateful: the rows of '{}' come from a removed node",
                    n.name
                ))
            })?;
            let init = ng.add(
                Op::Constant {
                    data: std::sync::Arc::from(Vec::new()),
                },
                vec![],
                internal(c.init_ty.clone()),
                format!("{var}/init"),
            );
            let past = ng.add(
                Op::ReadValue {
                    variable: var.clone(),
                },
                vec![Value::new(init, 0)],
                internal(c.var_ty.clone()),
                format!("{var}/past"),
            );
            let reordered = ng.add(
                Op::Gather { axis: BEAM_AXIS },
                vec![Value::new(past, 0), beam_v],
                internal(c.var_ty.clone()),
                format!("{var}/beam_reorder"),
            );
            let new_rows = ng.add(
                Op::Copy,
                vec![rows],
                internal(c.var_ty.clone()),
                format!("{var}/new_rows"),
            );
            let grown = ng.add(
                Op::Concat { dim: c.axis as i32 },
                vec![Value::new(reordered, 0), Value::new(new_rows, 0)],
                internal(c.var_ty.clone()),
                n.name.clone(),
            );
            ng.add(
                Op::Assign {
                    variable: var.clone(),
                },
                vec![Value::new(grown, 0)],
                internal(c.var_ty.clone()),
                format!("{var}/assign"),
            );
            map[i][0] = Some(Value::new(grown, 0));
            continue;
        }
        let mut inputs = Vec::with_capacity(n.inputs.len());
        for v in &n.inputs {
            inputs.push(map[v.node][v.port as usize].ok_or_else(|| {
                Error::InvalidGraph(format!("make_stateful: '{}' reads a removed node", n.name))
            })?);
        }
        let id = ng.add(n.op.clone(), inputs, n.outputs.clone(), n.name.clone());
        ng.nodes[id].port_names = n.port_names.clone();
        for (p, slot) in map[i].iter_mut().enumerate() {
            *slot = Some(Value::new(id, p as u32));
        }
        if Some(i) == existing_beam {
            beam = map[i][0];
        }
    }
    for r in &old.results {
        if caches.iter().any(|c| *r == Value::new(c.set_rows, 0)) {
            continue;
        }
        ng.results.push(map[r.node][r.port as usize].ok_or_else(|| {
            Error::InvalidGraph(format!(
                "make_stateful: result %{}:{} was removed",
                r.node, r.port
            ))
        })?);
    }
    Ok(ng)
}
