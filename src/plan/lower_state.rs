//! Kernel selection for the ops the state passes and the C decoder path add.
//! ReadValue and Assign launch nothing: the infer request moves state in and
//! out with device copies around the plan (`plan::internal`), because a
//! variable's storage outlives any one plan. Constants are uploaded when placed.

use super::Binder;
use crate::error::{Error, Result};
use crate::ggml::types::GgmlType::{I32, I64};
use crate::ir::{Node, Op, Value};
use crate::runtime::executor::{ArgBinder, Launch, Operand};
use crate::runtime::program::kernel;

fn nelements(t: &Operand) -> usize {
    t.ne.iter().product::<i64>().max(0) as usize
}

fn flat(
    b: &Binder,
    name: &str,
    n: usize,
    kind: &'static str,
    bind: impl FnOnce(&mut ArgBinder) -> Result<()>,
) -> Result<Launch> {
    let k = kernel(&b.device, "state", name)?;
    bind(&mut ArgBinder::new(&k))?;
    Ok(Launch {
        kernel: k,
        global: [n, 1, 1],
        local: None,
        dims: 1,
        kind,
        packed: None,
    })
}

/// Raw element width suffix of the copy kernels.
fn width(bytes: usize, what: &str) -> Result<&'static str> {
    match bytes {
        2 => Ok("b2"),
        4 => Ok("b4"),
        _ => Err(Error::Unsupported(format!(
            "{what} of {bytes}-byte elements"
        ))),
    }
}

pub fn lower(b: &mut Binder, id: usize, n: &Node, out: &mut Vec<Launch>) -> Result<()> {
    let g = b.graph;
    let v = Value::new(id, 0);
    match &n.op {
        Op::Constant { .. } | Op::ReadValue { .. } | Op::Assign { .. } | Op::ViewAs(_) => Ok(()),
        Op::Gather { axis } => {
            let (src, idx, dst) = (
                b.operand(n.inputs[0])?,
                b.operand(n.inputs[1])?,
                b.operand(v)?,
            );
            let elem = g.ty(v).dtype;
            if elem.block_elems() != 1 {
                return Err(Error::Unsupported(format!(
                    "Gather '{}' of {}",
                    n.name,
                    elem.name()
                )));
            }
            let it = match g.ty(n.inputs[1]).dtype {
                I32 => "i32",
                I64 => "i64",
                other => {
                    return Err(Error::Unsupported(format!(
                        "Gather '{}' with {} indices",
                        n.name,
                        other.name()
                    )))
                }
            };
            let name = format!(
                "kernel_gather_{}_{it}",
                width(elem.block_bytes(), "Gather")?
            );
            out.push(flat(b, &name, nelements(&dst), "gather", |a| {
                a.tensor(&src)?.tensor(&idx)?.tensor(&dst)?.i32(*axis)?;
                Ok(())
            })?);
            Ok(())
        }
        Op::Concat { dim } => {
            // Only 2-byte types come here; lower.rs keeps 4-byte ones on misc.cl.
            let (x, y, dst) = (
                b.operand(n.inputs[0])?,
                b.operand(n.inputs[1])?,
                b.operand(v)?,
            );
            let bytes = g.ty(v).dtype.block_bytes();
            if bytes != 2 || g.ty(v).dtype.block_elems() != 1 {
                return Err(Error::Unsupported(format!(
                    "Concat '{}' of {}",
                    n.name,
                    g.ty(v).dtype.name()
                )));
            }
            out.push(flat(
                b,
                "kernel_concat_b2",
                nelements(&dst),
                "concat",
                |a| {
                    a.tensor(&x)?.tensor(&y)?.tensor(&dst)?.i32(*dim)?;
                    Ok(())
                },
            )?);
            Ok(())
        }
        Op::TopK { .. } => {
            let src = b.operand(n.inputs[0])?;
            let values = b.operand(v)?;
            let indices = b.operand(Value::new(id, 1))?;
            let k = values.ne[0];
            let rows = (src.ne[1] * src.ne[2] * src.ne[3]).max(0) as usize;
            out.push(flat(b, "kernel_top_k_f32", rows, "top_k", |a| {
                a.tensor(&src)?
                    .tensor(&values)?
                    .tensor(&indices)?
                    .i32(k as i32)?;
                Ok(())
            })?);
            Ok(())
        }
        other => Err(Error::Unsupported(format!(
            "lower_state has no rule for {}",
            other.kind()
        ))),
    }
}
