//! MulMatGroup and MulMatGlu lowering.

use super::Binder;
use crate::error::{Error, Result};
use crate::ir::{GluKind, Node};
use crate::runtime::executor::Launch;

pub fn lower_group(_b: &mut Binder, _id: usize, n: &Node, _out: &mut Vec<Launch>) -> Result<()> {
    Err(Error::Unsupported(format!("MulMatGroup '{}'", n.name)))
}

pub fn lower_glu(
    _b: &mut Binder,
    _id: usize,
    n: &Node,
    _kind: GluKind,
    _out: &mut Vec<Launch>,
) -> Result<()> {
    Err(Error::Unsupported(format!("MulMatGlu '{}'", n.name)))
}
