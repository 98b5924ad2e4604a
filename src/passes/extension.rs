//! Caller extensions as passes. `CachePolicy` asks a callback (the C API wraps
//! a host function pointer in it) about every cache write still in the graph —
//! each `SetRows`, with its destination's name, type and whether it is a graph
//! Parameter — and applies the answers: stateful (the `make_stateful` rewrite
//! with this extension's options), stateless (lowered to a scatter now, so
//! later extensions no longer see it) or leave it for the next extension.

use super::make_stateful::{make_caches_stateful, StatefulOptions};
use super::Pass;
use crate::error::{Error, Result};
use crate::ir::{Graph, NodeId, Op, TensorType};

/// One cache write, as the callback sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct CacheWrite {
    /// The destination's name (the cache Parameter's, or the node's).
    pub name: String,
    pub ty: TensorType,
    pub is_parameter: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheChoice {
    Stateful,
    Stateless,
    Leave,
}

pub type Chooser = Box<dyn FnMut(&CacheWrite) -> Result<CacheChoice>>;

pub struct CachePolicy {
    pub name: String,
    pub choose: Chooser,
    pub options: StatefulOptions,
}

impl Pass for CachePolicy {
    fn name(&self) -> &str {
        &self.name
    }
    fn run(&mut self, g: &mut Graph) -> Result<()> {
        let writes: Vec<NodeId> = (0..g.nodes.len())
            .filter(|&i| g.nodes[i].op == Op::SetRows)
            .collect();
        let mut stateful = Vec::new();
        for i in writes {
            let dst = g.nodes[i].inputs[0];
            let is_parameter = super::make_stateful::cache_parameter(g, i).is_some();
            let w = CacheWrite {
                name: g.nodes[dst.node].name.clone(),
                ty: g.ty(dst).clone(),
                is_parameter,
            };
            match (self.choose)(&w)? {
                CacheChoice::Leave => {}
                CacheChoice::Stateless => g.nodes[i].op = Op::ScatterRows,
                CacheChoice::Stateful if is_parameter => stateful.push(i),
                CacheChoice::Stateful => {
                    return Err(Error::InvalidGraph(format!(
                        "{}: cache write '{}' into '{}' was chosen stateful, but its destination is not a graph Parameter",
                        self.name, g.nodes[i].name, w.name
                    )))
                }
            }
        }
        make_caches_stateful(g, &stateful, &self.options)?;
        Ok(())
    }
}
