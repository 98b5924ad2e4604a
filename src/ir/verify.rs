//! Structural checks every graph must pass before planning.

use super::graph::Graph;
use crate::error::{Error, Result};

pub fn verify(g: &Graph) -> Result<()> {
    for (i, n) in g.nodes.iter().enumerate() {
        let bad = |msg: String| {
            Error::InvalidGraph(format!("node {i} ({} '{}'): {msg}", n.op.kind(), n.name))
        };
        if !n.op.arity().contains(&n.inputs.len()) {
            return Err(bad(format!(
                "{} inputs, expected {:?}",
                n.inputs.len(),
                n.op.arity()
            )));
        }
        if n.outputs.is_empty() {
            return Err(bad("no outputs".into()));
        }
        for v in &n.inputs {
            if v.node >= i {
                return Err(bad(format!(
                    "input %{}:{} is not an earlier node (cycle or dangling input)",
                    v.node, v.port
                )));
            }
            if v.port as usize >= g.nodes[v.node].outputs.len() {
                return Err(bad(format!(
                    "input %{}:{} names a missing output port",
                    v.node, v.port
                )));
            }
        }
        for o in &n.outputs {
            if o.ty.ne.contains(&0) {
                continue;
            }
            if o.ty.ne.iter().any(|&d| d < -1) {
                return Err(bad(format!("bad shape {:?}", o.ty.ne)));
            }
        }
    }
    let variables = g.variables();
    for (i, n) in g.nodes.iter().enumerate() {
        if let super::op::Op::Assign { variable } = &n.op {
            if !variables.iter().any(|(id, _)| id == variable) {
                return Err(Error::InvalidGraph(format!(
                    "node {i} (Assign '{}') commits variable '{variable}', which no ReadValue reads",
                    n.name
                )));
            }
        }
    }
    for r in &g.results {
        if r.node >= g.nodes.len() || r.port as usize >= g.nodes[r.node].outputs.len() {
            return Err(Error::InvalidGraph(format!(
                "result %{}:{} names no node output",
                r.node, r.port
            )));
        }
    }
    Ok(())
}
