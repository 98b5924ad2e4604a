//! FusedRmsNorm lowering.

use super::Binder;
use crate::error::{Error, Result};
use crate::ir::Node;
use crate::runtime::executor::Launch;

pub fn lower(
    _b: &mut Binder,
    _id: usize,
    n: &Node,
    _eps: f32,
    _has_add: bool,
    _out: &mut Vec<Launch>,
) -> Result<()> {
    Err(Error::Unsupported(format!("FusedRmsNorm '{}'", n.name)))
}
