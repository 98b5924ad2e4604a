//! Running a compute again: a compute whose hand-off wait gave up
//! (runtime/handoff.rs) has wrong results, found before the host reads
//! them (in its next wait for the device, `Chains::defer`), where the plan
//! runs again in order. A second run computes
//! what the first should have where it starts from the same memory: every
//! byte the plan writes is either written before the plan reads it (its
//! intermediates; a cache row, rewritten with the same values) or was read
//! first, as one of its inputs, and then overwritten (ggml's allocator
//! hands an input's memory to an in-place op that is its only reader, or
//! to a later node once the input is freed: llama's decode step writes its
//! first layer's output over the token embeddings). Those inputs are copied
//! aside on the device before each compute (`Rerun::save`) and back before
//! the second run. State variables (ReadValue / Assign) would read what
//! the first run committed: those plans do not run again.

use crate::error::Result;
use crate::ir::{Graph, Op, Value};
use crate::passes::fuse::{overlap, span, Span};
use crate::runtime::buffer::DeviceBuffer;
use crate::runtime::device::Device;
use std::sync::Arc;

/// Spans of one buffer closer than this are saved as one copy: a copy is
/// an enqueue (~4.5 us of host time on the H200), the bytes between a few
/// microseconds of the GPU's at most.
const MERGE_GAP: u64 = 1 << 20;

/// A plan's inputs that its compute overwrites, and where they are saved.
pub struct Rerun {
    /// (buffer, offset, bytes, offset in `saved`).
    inputs: Vec<(Arc<DeviceBuffer>, usize, usize, usize)>,
    saved: Option<DeviceBuffer>,
}

impl Rerun {
    /// How `g` may run again on `device`; None where it may not (state
    /// variables, or an input in memory polycl does not own).
    pub fn new(g: &Graph, device: &Arc<Device>) -> Result<Option<Rerun>> {
        let Some(spans) = overwritten_inputs(g) else {
            return Ok(None);
        };
        let mut inputs = Vec::new();
        let mut total = 0;
        for (base, start, end) in merged(spans) {
            let Some(buffer) = DeviceBuffer::by_base(base) else {
                return Ok(None);
            };
            if !Arc::ptr_eq(&buffer.device, device) || end > buffer.size as u64 {
                return Ok(None);
            }
            let bytes = (end - start) as usize;
            inputs.push((buffer, start as usize, bytes, total));
            total += bytes;
        }
        crate::log::debug(&format!(
            "{}: a compute whose hand-off wait gave up runs again: {} inputs it \
             overwrites, {total} bytes, saved before each",
            device.name,
            inputs.len()
        ));
        let saved = if total > 0 {
            Some(DeviceBuffer::alloc_scratch(device, total)?)
        } else {
            None
        };
        Ok(Some(Rerun { inputs, saved }))
    }

    /// Copies the inputs aside, ordered before the compute's launches.
    pub fn save(&self) -> Result<()> {
        self.copy(false)
    }

    /// Copies the inputs back, ordered before a second run's launches.
    pub fn restore(&self) -> Result<()> {
        self.copy(true)
    }

    fn copy(&self, back: bool) -> Result<()> {
        let Some(saved) = &self.saved else {
            return Ok(());
        };
        for (buffer, offset, bytes, at) in &self.inputs {
            if back {
                saved.copy_to(*at, buffer, *offset, *bytes)?;
            } else {
                buffer.copy_to(*offset, saved, *at, *bytes)?;
            }
        }
        Ok(())
    }
}

/// The spans `g` reads before writing them and then overwrites; None where
/// it reads or commits state variables.
pub fn overwritten_inputs(g: &Graph) -> Option<Vec<Span>> {
    // Bytes the graph wrote so far, and bytes it read before writing them.
    let mut written: Vec<Span> = Vec::new();
    let mut read_first: Vec<Span> = Vec::new();
    let mut overwritten: Vec<Span> = Vec::new();
    for (id, n) in g.nodes.iter().enumerate() {
        if matches!(n.op, Op::ReadValue { .. } | Op::Assign { .. }) {
            return None;
        }
        if n.op.is_view() {
            continue;
        }
        let destinations = n.op.destinations();
        for (i, &v) in n.inputs.iter().enumerate() {
            if destinations.contains(&i) {
                continue;
            }
            if let Some(s) = span(g, v) {
                if !covered(s, &written) {
                    read_first.push(s);
                }
            }
        }
        for port in 0..n.outputs.len() {
            if let Some(s) = span(g, Value::new(id, port as u32)) {
                for &r in &read_first {
                    if overlap(&[s], &[r]) && !overwritten.contains(&r) {
                        overwritten.push(r);
                    }
                }
                written.push(s);
            }
        }
    }
    Some(overwritten)
}

/// `spans` sorted and joined where they overlap or lie within MERGE_GAP of
/// each other in one buffer.
fn merged(mut spans: Vec<Span>) -> Vec<Span> {
    spans.sort_unstable();
    let mut out: Vec<Span> = Vec::new();
    for s in spans {
        match out.last_mut() {
            Some(last) if last.0 == s.0 && s.1 <= last.2.saturating_add(MERGE_GAP) => {
                last.2 = last.2.max(s.2);
            }
            _ => out.push(s),
        }
    }
    out
}

/// Whether the spans in `by` cover every byte of `s`.
fn covered(s: Span, by: &[Span]) -> bool {
    let mut parts: Vec<(u64, u64)> = by
        .iter()
        .filter(|b| b.0 == s.0 && b.1 < s.2 && s.1 < b.2)
        .map(|b| (b.1, b.2))
        .collect();
    parts.sort_unstable();
    let mut reached = s.1;
    for (start, end) in parts {
        if start > reached {
            return false;
        }
        reached = reached.max(end);
        if reached >= s.2 {
            return true;
        }
    }
    reached >= s.2
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ggml::types::GgmlType::F32;
    use crate::ir::{BinaryOp, MemRef, Node, Output, Place, TensorType};

    fn at(offset: u64, rows: i64) -> Output {
        Output {
            ty: TensorType::contiguous(F32, [4, rows, 1, 1]),
            place: Place::Bound(MemRef { buffer: 1, offset }),
        }
    }

    fn node(op: Op, inputs: &[Value], outputs: Vec<Output>) -> Node {
        Node {
            op,
            inputs: inputs.to_vec(),
            outputs,
            name: String::new(),
            port_names: Vec::new(),
        }
    }

    fn v(node: usize) -> Value {
        Value::new(node, 0)
    }

    /// A graph input (x at 0), a cache (at 1024, 8 rows of 16 bytes) and
    /// its row indices (at 4096): the add writes `add_at`, the scatter one
    /// cache row, and the read of the whole cache after it reads what the
    /// first run left as the second run leaves it.
    fn decode_like(add_at: u64) -> Graph {
        Graph {
            nodes: vec![
                node(Op::Parameter, &[], vec![at(0, 1)]),
                node(Op::Parameter, &[], vec![at(1024, 8)]),
                node(Op::Parameter, &[], vec![at(4096, 1)]),
                node(
                    Op::Binary(BinaryOp::Add),
                    &[v(0), v(0)],
                    vec![at(add_at, 1)],
                ),
                node(Op::ScatterRows, &[v(1), v(3), v(2)], vec![at(1024, 8)]),
                node(Op::Binary(BinaryOp::Add), &[v(4), v(4)], vec![at(2048, 8)]),
            ],
            results: vec![v(5)],
        }
    }

    #[test]
    fn a_decode_step_overwrites_no_input() {
        assert_eq!(overwritten_inputs(&decode_like(512)), Some(vec![]));
    }

    /// The add in place over its graph input: a second run would add to
    /// the first run's sum unless x is saved.
    #[test]
    fn an_op_in_place_over_an_input_overwrites_it() {
        assert_eq!(overwritten_inputs(&decode_like(0)), Some(vec![(1, 0, 16)]));
    }

    #[test]
    fn state_variables_do_not_run_again() {
        let mut g = decode_like(512);
        g.nodes[1].op = Op::ReadValue {
            variable: "k".into(),
        };
        assert_eq!(overwritten_inputs(&g), None);
    }

    #[test]
    fn near_spans_are_saved_together() {
        let far = 2 * MERGE_GAP;
        let spans = vec![(1, far, far + 8), (1, 0, 16), (2, 0, 4), (1, 8, 32)];
        assert_eq!(
            merged(spans),
            vec![(1, 0, 32), (1, far, far + 8), (2, 0, 4)]
        );
    }

    #[test]
    fn spans_cover_a_span_only_without_gaps() {
        let by = [(1, 0, 8), (1, 8, 16), (2, 16, 32), (1, 20, 32)];
        assert!(covered((1, 4, 16), &by));
        assert!(!covered((1, 4, 24), &by));
        assert!(covered((1, 20, 24), &by));
        assert!(!covered((3, 0, 1), &by));
    }
}
