//! NONE (leaves), VIEW, RESHAPE, PERMUTE, TRANSPOSE: no computation; the
//! output is the input's memory seen through its own ne/nb. The scheduler
//! needs a yes for these on any tensor in our buffers.

use crate::decoder::{Decoder, NodeDesc};
use crate::error::Result;
use crate::frontend::Ctx;
use crate::ir::{Op, Value};

pub fn supports(_: &dyn Decoder, _: &NodeDesc) -> bool {
    true
}

pub fn translate(ctx: &mut Ctx, node: &NodeDesc) -> Result<Value> {
    let src = ctx.input(node, 0)?;
    Ok(ctx.emit(Op::View, vec![src], node))
}
