//! The stateless default: every `SetRows` still in the graph becomes an
//! explicit `ScatterRows` into its destination, which stays a graph input and
//! whose update is an output (the host owns the cache).

use super::Pass;
use crate::error::Result;
use crate::ir::{Graph, Op};

pub struct LowerSetRowsStateless;

impl Pass for LowerSetRowsStateless {
    fn name(&self) -> &str {
        "lower_set_rows_stateless"
    }
    fn run(&mut self, g: &mut Graph) -> Result<()> {
        for n in g.nodes.iter_mut() {
            if n.op == Op::SetRows {
                n.op = Op::ScatterRows;
            }
        }
        Ok(())
    }
}
