//! stub

use crate::ir::Graph;

pub fn run(_g: &mut Graph) -> usize {
    0
}
