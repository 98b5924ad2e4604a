//! FlashAttn -> (RESHAPE views) -> Hadamard => FlashAttn with the rotation
//! fused in (`rotation` = the Hadamard's width).
//!
//! With a quantized V cache llama rotates the attention's output back by the
//! Hadamard matrix (llama_mul_mat_hadamard after build_attn_mha, rows of 64)
//! before the O projection: a launch a layer of its own. The split kernels'
//! merge already holds each output row in local memory for the O
//! projection's Q8_1 copy; the butterflies there (fa_split.cl
//! fa_rotate_rows) write the rotated rows and their copy instead, so a
//! quantized cache's layer takes the launches of an F16 one's plus the rope
//! and rotation launch. Kernels without the rotation (the prompt's tiled
//! kernels, the portable one) write the attention and a Hadamard launch
//! follows them, as before the fusion (plan/lower.rs).
//!
//! Preconditions: the attention's output is contiguous F32, placed, and
//! read only by the Hadamard (through views), never by the host; the
//! rotation is F32 rows in and out, contiguous, of a width n that is a power
//! of 4 (so 1/sqrt(n) is a power of two, which the kernel makes exactly)
//! and divides the head size (a rotation never spans two heads' rows). The
//! rotated output is written while the attention's groups read q, k, v and
//! the mask, and ggml's allocator may give the Hadamard memory freed at the
//! attention: so it may overlap none of them, but q element for element (a
//! row of the output is written only by the last of the groups that read
//! its q row, once every one of them has counted). The mask every head's
//! groups read: the tiny test model's last layer, whose rotated output lies
//! over it, keeps its Hadamard launch.

use super::rope_store::{fuse_matches, Match};
use super::{overlap, readers, span};
use crate::ggml::types::GgmlType::F32;
use crate::ir::{Graph, NodeId, Op, Place, TensorType, Value};

/// The widest head the split kernels hold (FA_MAX_D in fa_split.cl).
const MAX_HEAD: i64 = 256;

/// Fuses every match; returns how many.
pub fn run(g: &mut Graph) -> usize {
    fuse_matches(g, try_match, "attention+rotation")
}

/// The attention `i` and the Hadamard that rotates its output, where the
/// rotation fuses.
fn try_match(g: &Graph, i: NodeId) -> Option<Match> {
    let n = &g.nodes[i];
    let Op::FlashAttn { rotation: 0, .. } = n.op else {
        return None;
    };
    let out = Value::new(i, 0);
    let att = g.ty(out);
    if n.outputs.len() != 1 || !placed_f32(g, out) || att.ne[0] > MAX_HEAD {
        return None;
    }
    let [h] = readers(g, out)?[..] else {
        return None;
    };
    let hn = &g.nodes[h];
    if hn.op != Op::Hadamard || hn.outputs.len() != 1 {
        return None;
    }
    let (x, rotated) = (hn.inputs[1], Value::new(h, 0));
    let width = g.ty(x).ne[0];
    let fits = g.reshaped_source(x) == out
        && g.ty(x).ne == g.ty(rotated).ne
        && placed_f32(g, x)
        && placed_f32(g, rotated)
        && width >= 4
        && (width as u64).is_power_of_two()
        && width.trailing_zeros().is_multiple_of(2)
        && att.ne[0] % width == 0;
    if !fits || !memory_safe(g, &n.inputs, att, rotated) {
        return None;
    }
    let mut op = n.op.clone();
    if let Op::FlashAttn { rotation, .. } = &mut op {
        *rotation = width as i32;
    }
    Some(Match {
        members: vec![i, h],
        found_at: i,
        named_by: i,
        op,
        inputs: n.inputs.clone(),
    })
}

/// Contiguous F32 of static shape in memory the host placed.
fn placed_f32(g: &Graph, v: Value) -> bool {
    let o = g.output(v);
    o.ty.dtype == F32
        && o.ty.is_contiguous()
        && !o.ty.is_dynamic()
        && matches!(o.place, Place::Bound(_))
}

/// Whether the rotated output overlaps none of the attention's inputs, but
/// q where each of its elements lies where the output's element of the same
/// head, query and head element does (q: [D, queries, heads, n3], the
/// output: [D, heads, queries, n3], both F32, from the same byte).
fn memory_safe(g: &Graph, inputs: &[Value], att: &TensorType, rotated: Value) -> bool {
    let Some(out) = span(g, rotated) else {
        return false;
    };
    inputs.iter().enumerate().all(|(k, &input)| {
        let Some(s) = span(g, input) else {
            return false;
        };
        let q = g.ty(input);
        let aliases_q = k == 0
            && s.1 == out.1
            && q.dtype == F32
            && q.ne == [att.ne[0], att.ne[2], att.ne[1], att.ne[3]]
            && q.nb == [att.nb[0], att.nb[2], att.nb[1], att.nb[3]];
        !overlap(&[out], &[s]) || aliases_q
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{MemRef, Node, Output};

    const BUF: u64 = 0x1000;

    fn out(ty: TensorType, offset: u64) -> Output {
        Output {
            ty,
            place: Place::Bound(MemRef {
                buffer: BUF,
                offset,
            }),
        }
    }

    /// q [128, 1, 4] (a permuted view of [128, 4, 1]), k, v [128, 256, 2]
    /// F16, the attention [128, 4, 1] at 0x10000, its [64, 8] reshape and
    /// rotation at `rotated_at`, read by one matmul.
    fn graph(rotated_at: u64, width: i64) -> Graph {
        use crate::ggml::types::GgmlType::F16;
        let f32 = |ne| TensorType::contiguous(F32, ne);
        let q_rows = f32([128, 4, 1, 1]);
        let mut q_view = q_rows.clone();
        q_view.ne = [128, 1, 4, 1];
        q_view.nb = [4, q_rows.nb[2], q_rows.nb[1], q_rows.nb[3]];
        let kv = TensorType::contiguous(F16, [128, 256, 2, 1]);
        let rows = 128 * 4 / width;
        let node = |op, inputs: Vec<Value>, outputs, name: &str| Node {
            op,
            inputs,
            outputs: vec![outputs],
            name: name.into(),
            port_names: Vec::new(),
        };
        let nodes = vec![
            node(Op::Parameter, vec![], out(q_view, 0x100), "q"),
            node(Op::Parameter, vec![], out(kv.clone(), 0x20000), "k"),
            node(Op::Parameter, vec![], out(kv, 0x40000), "v"),
            node(
                Op::FlashAttn {
                    scale: 1.0,
                    max_bias: 0.0,
                    softcap: 0.0,
                    has_mask: false,
                    rotation: 0,
                },
                vec![Value::new(0, 0), Value::new(1, 0), Value::new(2, 0)],
                out(f32([128, 4, 1, 1]), 0x10000),
                "attn",
            ),
            node(
                Op::View,
                vec![Value::new(3, 0)],
                out(f32([width, rows, 1, 1]), 0x10000),
                "reshape",
            ),
            node(
                Op::Parameter,
                vec![],
                out(f32([width, width, 1, 1]), 0x60000),
                "rot",
            ),
            node(
                Op::Hadamard,
                vec![Value::new(5, 0), Value::new(4, 0)],
                out(f32([width, rows, 1, 1]), rotated_at),
                "rotated",
            ),
            node(
                Op::Parameter,
                vec![],
                out(f32([512, 8, 1, 1]), 0x70000),
                "w_o",
            ),
            node(
                Op::MulMat,
                vec![Value::new(7, 0), Value::new(6, 0)],
                out(f32([8, 1, 1, 1]), 0x80000),
                "o",
            ),
        ];
        Graph {
            nodes,
            results: vec![Value::new(8, 0)],
        }
    }

    fn rotation(g: &Graph) -> Option<i32> {
        g.nodes.iter().find_map(|n| match n.op {
            Op::FlashAttn { rotation, .. } => Some(rotation),
            _ => None,
        })
    }

    #[test]
    fn the_rotation_joins_the_attention() {
        let mut g = graph(0x90000, 64);
        assert_eq!(run(&mut g), 1);
        assert_eq!(rotation(&g), Some(64));
        assert_eq!(g.count("Hadamard"), 0);
        // The matmul reads the rotated rows: the fused node's port 1.
        let o = g.nodes.iter().find(|n| n.op == Op::MulMat).unwrap();
        let fa = g.nodes.iter().position(|n| n.op.kind() == "FlashAttn");
        assert_eq!(o.inputs[1], Value::new(fa.unwrap(), 1));
    }

    #[test]
    fn over_q_only_element_for_element() {
        // The rotated q's memory, [128, 4] rows: the output's elements lie
        // over q's of the same head and query.
        let mut g = graph(0x100, 64);
        assert_eq!(run(&mut g), 1);
        // Half a row further, the output would overwrite q rows other
        // groups still read.
        let mut g = graph(0x100 + 256, 64);
        assert_eq!(run(&mut g), 0);
        // Over k.
        let mut g = graph(0x20000, 64);
        assert_eq!(run(&mut g), 0);
    }

    #[test]
    fn widths_whose_scale_is_not_a_power_of_two_stay_apart() {
        for (width, fused) in [(16, 1), (32, 0), (64, 1), (128, 0)] {
            let mut g = graph(0x90000, width);
            assert_eq!(run(&mut g), fused, "width {width}");
        }
    }

    #[test]
    fn an_attention_the_host_reads_stays_apart() {
        let mut g = graph(0x90000, 64);
        g.results.push(Value::new(3, 0));
        assert_eq!(run(&mut g), 0);
    }
}
