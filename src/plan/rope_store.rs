//! RopeStore lowering.

use super::Binder;
use crate::error::{Error, Result};
use crate::ir::{Node, RopeParams};
use crate::runtime::executor::Launch;

pub fn lower(
    _b: &mut Binder,
    _id: usize,
    n: &Node,
    _p: &RopeParams,
    _out: &mut Vec<Launch>,
) -> Result<()> {
    Err(Error::Unsupported(format!("RopeStore '{}'", n.name)))
}
