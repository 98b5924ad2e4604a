//! The fusion passes on hand-built IR: what each pattern fuses, what its
//! preconditions refuse, and that uses and results follow the fused ports.

use ggml_polycl::ggml::types::GgmlType::{self, F16, F32, Q4_0};
use ggml_polycl::ir::{BinaryOp, GluKind, Graph, MemRef, Op, Output, Place, TensorType, Value};
use ggml_polycl::passes::fuse;

struct B {
    g: Graph,
    next: u64,
}

impl B {
    fn new() -> B {
        B {
            g: Graph::default(),
            next: 0,
        }
    }
    fn node(&mut self, op: Op, inputs: Vec<Value>, ty: GgmlType, ne: [i64; 4]) -> Value {
        self.next += 1;
        let out = Output {
            ty: TensorType::contiguous(ty, ne),
            place: Place::Bound(MemRef {
                buffer: 0x1000,
                offset: self.next << 20,
            }),
        };
        let id = self.g.add(op, inputs, vec![out], format!("n{}", self.next));
        let v = Value::new(id, 0);
        self.g.results.push(v);
        v
    }
    fn param(&mut self, ty: GgmlType, ne: [i64; 4]) -> Value {
        self.node(Op::Parameter, vec![], ty, ne)
    }
    /// A llama FFN on `x`: RmsNorm, its weight, gate and up matmuls of 512
    /// rows and their swiglu. Returns the norm and the weighted norm.
    fn norm_and_glu(&mut self, x: Value) -> (Value, Value) {
        let n = self.node(Op::RmsNorm { eps: 1e-5 }, vec![x], F32, [E, 1, 1, 1]);
        let nw = self.param(F32, [E, 1, 1, 1]);
        let m = self.node(Op::Binary(BinaryOp::Mul), vec![n, nw], F32, [E, 1, 1, 1]);
        self.gate_up_glu(m, Q4_0, false);
        (n, m)
    }
    /// Gate and up matmuls of 512 rows (weights `wt`) on `x` and their
    /// swiglu; returns the swiglu.
    fn gate_up_glu(&mut self, x: Value, wt: GgmlType, swapped: bool) -> Value {
        let wg = self.param(wt, [E, 512, 1, 1]);
        let g = self.node(Op::MulMat, vec![wg, x], F32, [512, 1, 1, 1]);
        let wu = self.param(wt, [E, 512, 1, 1]);
        let u = self.node(Op::MulMat, vec![wu, x], F32, [512, 1, 1, 1]);
        let glu = Op::Glu {
            kind: GluKind::Swiglu,
            swapped,
        };
        self.node(glu, vec![g, u], F32, [512, 1, 1, 1])
    }
}

const E: i64 = 256;

fn norm_graph(with_add: bool, gap: bool) -> (Graph, Value) {
    let mut b = B::new();
    let a = b.param(F32, [E, 1, 1, 1]);
    let c = b.param(F32, [E, 1, 1, 1]);
    let x = if with_add {
        b.node(Op::Binary(BinaryOp::Add), vec![a, c], F32, [E, 1, 1, 1])
    } else {
        a
    };
    if gap {
        b.node(
            Op::Scale {
                scale: 2.0,
                bias: 0.0,
            },
            vec![c],
            F32,
            [E, 1, 1, 1],
        );
    }
    let n = b.node(Op::RmsNorm { eps: 1e-5 }, vec![x], F32, [E, 1, 1, 1]);
    let w = b.param(F32, [E, 1, 1, 1]);
    let m = b.node(Op::Binary(BinaryOp::Mul), vec![n, w], F32, [E, 1, 1, 1]);
    // A later user of the sum (the residual stream).
    b.node(Op::Binary(BinaryOp::Add), vec![m, x], F32, [E, 1, 1, 1]);
    (b.g, x)
}

#[test]
fn residual_add_norm_and_weight_fuse_into_one_node_with_three_ports() {
    let (mut g, _) = norm_graph(true, false);
    let results = g.results.len();
    assert_eq!(fuse::run(&mut g).rms_norm, 1);
    assert_eq!(g.count("FusedAddRmsNorm"), 1);
    assert_eq!(g.count("RmsNorm") + g.count("Mul") + g.count("Add"), 1);
    let f = g
        .nodes
        .iter()
        .position(|n| n.op.kind() == "FusedAddRmsNorm")
        .unwrap();
    assert_eq!(g.nodes[f].outputs.len(), 3);
    // The later residual add reads the fused node's product (port 0) and sum (port 2).
    let last = g.nodes.last().unwrap();
    assert_eq!(last.inputs, vec![Value::new(f, 0), Value::new(f, 2)]);
    // Every former node's output is still a result, now a port.
    assert_eq!(g.results.len(), results);
    assert!(g.results.contains(&Value::new(f, 1)));
    ggml_polycl::ir::verify::verify(&g).unwrap();
}

#[test]
fn a_computing_node_between_add_and_norm_keeps_the_add_apart() {
    let (mut g, _) = norm_graph(true, true);
    assert_eq!(fuse::run(&mut g).rms_norm, 1);
    assert_eq!(g.count("FusedRmsNorm"), 1);
    assert_eq!(g.count("FusedAddRmsNorm"), 0);
    assert_eq!(g.count("Add"), 2);
}

#[test]
fn norm_without_add_and_a_broadcast_weight_only() {
    let (mut g, _) = norm_graph(false, false);
    assert_eq!(fuse::run(&mut g).rms_norm, 1);
    assert_eq!(g.count("FusedRmsNorm"), 1);
    // A weight that is not one row does not fuse.
    let mut b = B::new();
    let x = b.param(F32, [E, 2, 1, 1]);
    let n = b.node(Op::RmsNorm { eps: 1e-5 }, vec![x], F32, [E, 2, 1, 1]);
    let w = b.param(F32, [E, 2, 1, 1]);
    b.node(Op::Binary(BinaryOp::Mul), vec![n, w], F32, [E, 2, 1, 1]);
    assert_eq!(fuse::run(&mut b.g).rms_norm, 0);
}

fn matmuls(count: usize, wt: GgmlType, x_cols: i64) -> Graph {
    let mut b = B::new();
    let x = b.param(F32, [E, x_cols, 1, 1]);
    for _ in 0..count {
        let w = b.param(wt, [E, 128, 1, 1]);
        let y = b.node(Op::MulMat, vec![w, x], F32, [128, x_cols, 1, 1]);
        // The reshape llama puts after each projection.
        b.node(Op::View, vec![y], F32, [64, 2, x_cols, 1]);
    }
    b.g
}

#[test]
fn sibling_decode_matmuls_group_by_three() {
    let mut g = matmuls(4, Q4_0, 1);
    assert_eq!(fuse::run(&mut g).matmul_group, 1);
    assert_eq!(g.count("MulMatGroup"), 1);
    assert_eq!(g.count("MulMat"), 1);
    let f = g
        .nodes
        .iter()
        .position(|n| n.op == Op::MulMatGroup)
        .unwrap();
    assert_eq!(g.nodes[f].inputs.len(), 4);
    assert_eq!(g.nodes[f].outputs.len(), 3);
    // The views now read the group's ports.
    let readers: Vec<Value> = g
        .nodes
        .iter()
        .filter(|n| n.op == Op::View)
        .map(|n| n.inputs[0])
        .filter(|v| v.node == f)
        .collect();
    assert_eq!(
        readers,
        vec![Value::new(f, 0), Value::new(f, 1), Value::new(f, 2)]
    );
    ggml_polycl::ir::verify::verify(&g).unwrap();
}

#[test]
fn batches_and_unsupported_weight_types_do_not_group() {
    assert_eq!(fuse::run(&mut matmuls(3, Q4_0, 4)).matmul_group, 0);
    assert_eq!(fuse::run(&mut matmuls(3, F16, 1)).matmul_group, 0);
}

fn glu_graph(wt: GgmlType, swapped: bool) -> Graph {
    let mut b = B::new();
    let x = b.param(F32, [E, 1, 1, 1]);
    b.gate_up_glu(x, wt, swapped);
    b.g
}

#[test]
fn gate_up_and_swiglu_fuse_unless_swapped_or_f16() {
    let mut g = glu_graph(Q4_0, false);
    let f = fuse::run(&mut g);
    assert_eq!((f.matmul_glu, f.matmul_group), (1, 0));
    assert_eq!(g.count("MulMatGlu"), 1);
    assert_eq!(g.count("MulMat") + g.count("Swiglu"), 0);
    assert_eq!(fuse::run(&mut glu_graph(Q4_0, true)).matmul_glu, 0);
    assert_eq!(fuse::run(&mut glu_graph(F16, false)).matmul_glu, 0);
}

#[test]
fn fusing_members_joined_through_another_node_is_refused() {
    // y = norm(x); z = scale(y); w = mul(y, z): fusing norm and mul would
    // make scale both read and feed the fused node (and scale computes
    // between the members).
    let mut b = B::new();
    let x = b.param(F32, [E, 1, 1, 1]);
    let y = b.node(Op::RmsNorm { eps: 1e-5 }, vec![x], F32, [E, 1, 1, 1]);
    let z = b.node(
        Op::Scale {
            scale: 1.0,
            bias: 0.0,
        },
        vec![y],
        F32,
        [E, 1, 1, 1],
    );
    b.node(Op::Binary(BinaryOp::Mul), vec![y, z], F32, [E, 1, 1, 1]);
    let before = b.g.clone();
    let members = [y.node, y.node + 2];
    let op = Op::FusedRmsNorm {
        eps: 1e-5,
        has_add: false,
    };
    assert!(b.g.fuse(&members, op, vec![x, z], "f".into()).is_none());
    assert_eq!(b.g, before);
}

#[test]
fn members_with_several_outputs_and_views_between_them() {
    // t = two-output node; s = scale(view(t:1)); fuse [t, s]: ports are t:0,
    // t:1, s:0; the view between them reads the fused node afterwards; the
    // view as an input of the fused node would be a cycle.
    let build = || {
        let mut b = B::new();
        let x = b.param(F32, [E, 1, 1, 1]);
        let out = |k: u64| Output {
            ty: TensorType::contiguous(F32, [E, 1, 1, 1]),
            place: Place::Bound(MemRef {
                buffer: 0x2000,
                offset: k << 20,
            }),
        };
        let t = b.g.add(
            Op::MulMatGroup,
            vec![x, x],
            vec![out(1), out(2)],
            "t".to_string(),
        );
        let view = b.node(Op::View, vec![Value::new(t, 1)], F32, [E, 1, 1, 1]);
        let s = b.node(
            Op::Scale {
                scale: 2.0,
                bias: 0.0,
            },
            vec![view],
            F32,
            [E, 1, 1, 1],
        );
        b.node(
            Op::Binary(BinaryOp::Add),
            vec![Value::new(t, 1), s],
            F32,
            [E, 1, 1, 1],
        );
        (b.g, x, t, view, s)
    };
    let (mut g, x, t, view, s) = build();
    let before = g.clone();
    assert!(g
        .fuse(&[t, s.node], Op::MulMatGroup, vec![x, x, view], "f".into())
        .is_none());
    assert_eq!(g, before);

    let (mut g, x, t, _, s) = build();
    let f = g
        .fuse(&[t, s.node], Op::MulMatGroup, vec![x, x], "f".into())
        .expect("fused");
    assert_eq!(g.nodes[f].outputs.len(), 3);
    let add = g
        .nodes
        .iter()
        .position(|n| n.op == Op::Binary(BinaryOp::Add))
        .expect("the add survives");
    assert_eq!(
        g.nodes[add].inputs,
        vec![Value::new(f, 1), Value::new(f, 2)]
    );
    let view = g
        .nodes
        .iter()
        .position(|n| n.op == Op::View)
        .expect("view kept");
    assert_eq!(g.nodes[view].inputs, vec![Value::new(f, 1)]);
}

/// o = w x; sum = o + res; the norm of sum times its weight, read by a gate
/// and up pair (one MulMatGlu after fusing); `hidden`: neither the normed
/// row nor normed * weight is a result (the ggml decoder's use counts).
/// `extra`: normed * weight is also read by a Scale.
fn matvec_norm_graph(hidden: bool, extra: bool) -> Graph {
    let mut b = B::new();
    let x = b.param(F32, [E, 1, 1, 1]);
    let res = b.param(F32, [E, 1, 1, 1]);
    let w = b.param(Q4_0, [E, E, 1, 1]);
    let o = b.node(Op::MulMat, vec![w, x], F32, [E, 1, 1, 1]);
    let sum = b.node(Op::Binary(BinaryOp::Add), vec![o, res], F32, [E, 1, 1, 1]);
    let (n, m) = b.norm_and_glu(sum);
    if extra {
        let scale = Op::Scale {
            scale: 2.0,
            bias: 0.0,
        };
        b.node(scale, vec![m], F32, [E, 1, 1, 1]);
    }
    // The residual stream goes on.
    b.node(Op::Binary(BinaryOp::Add), vec![sum, res], F32, [E, 1, 1, 1]);
    if hidden {
        b.g.results.retain(|v| *v != n && *v != m);
    }
    b.g
}

#[test]
fn matvec_add_norm_fuses_only_where_fused_matmuls_alone_read_the_norm() {
    let mut g = matvec_norm_graph(true, false);
    let f = fuse::run(&mut g);
    assert_eq!((f.rms_norm, f.matmul_glu, f.matmul_norm), (1, 1, 1));
    assert_eq!(g.count("MulMatAddRmsNorm"), 1);
    assert_eq!(g.count("MulMat") + g.count("FusedAddRmsNorm"), 0);
    // The GLU reads the fused node's normed * weight port.
    let mm = (0..g.nodes.len())
        .find(|&i| matches!(g.nodes[i].op, Op::MulMatAddNorm { .. }))
        .unwrap();
    let glu = g.users(Value::new(mm, 1));
    assert_eq!(glu.len(), 1);
    assert_eq!(g.nodes[glu[0]].op.kind(), "MulMatGlu");
    // The host may read the norm, or another op reads it as floats: no fusion.
    assert_eq!(
        fuse::run(&mut matvec_norm_graph(false, false)).matmul_norm,
        0
    );
    assert_eq!(fuse::run(&mut matvec_norm_graph(true, true)).matmul_norm, 0);
}

#[test]
fn matvec_add_norm_and_row_select_wait_for_wide_enough_work_groups() {
    // MulMatAddNorm's kernel runs 512 work-items a group: a device that
    // allows 256 keeps the matmul and the norm apart (and the row selection
    // that only helps that fusion), and still fuses the rest.
    let narrow = fuse::matmul_norm::WORK_GROUP / 2;
    let f = fuse::run_for(&mut matvec_norm_graph(true, false), narrow);
    assert_eq!((f.rms_norm, f.matmul_glu, f.matmul_norm), (1, 1, 0));
    let f = fuse::run_for(&mut row_select_graph(1, None, false), narrow);
    assert_eq!((f.row_select, f.matmul_norm), (0, 0));
    let wide = fuse::matmul_norm::WORK_GROUP;
    let f = fuse::run_for(&mut row_select_graph(1, None, false), wide);
    assert_eq!((f.row_select, f.matmul_norm), (2, 1));
}

/// llama's last layer for one token: the attention's O projection and the
/// residual each pass through a GetRows of the one output row, then the
/// residual add, the FFN norm and the gate/up matmuls. `reuse`: the host's
/// allocator handed the O result's memory to a node after the GetRows
/// (`Some(true)`), or a scale that runs before the add writes there
/// (`Some(false)`); `rows`: rows of the selected tensors.
fn row_select_graph(rows: i64, reuse: Option<bool>, result: bool) -> Graph {
    let mut b = B::new();
    let x = b.param(F32, [E, 1, 1, 1]);
    let res = b.param(F32, [E, rows, 1, 1]);
    let w = b.param(Q4_0, [E, E, 1, 1]);
    let o = if rows == 1 {
        b.node(Op::MulMat, vec![w, x], F32, [E, 1, 1, 1])
    } else {
        b.param(F32, [E, rows, 1, 1])
    };
    let ids = b.param(GgmlType::I32, [1, 1, 1, 1]);
    let go = b.node(Op::GetRows, vec![o, ids], F32, [E, 1, 1, 1]);
    let gr = b.node(Op::GetRows, vec![res, ids], F32, [E, 1, 1, 1]);
    if reuse == Some(false) {
        let s = Op::Scale {
            scale: 2.0,
            bias: 0.0,
        };
        let t = b.node(s, vec![x], F32, [E, 1, 1, 1]);
        b.g.nodes[t.node].outputs[0].place = b.g.output(o).place;
    }
    let sum = b.node(Op::Binary(BinaryOp::Add), vec![go, gr], F32, [E, 1, 1, 1]);
    // In place over the residual, as ggml's allocator places it.
    b.g.nodes[sum.node].outputs[0].place = b.g.output(res).place;
    if reuse == Some(true) {
        b.g.nodes[sum.node].outputs[0].place = b.g.output(o).place;
    }
    let (_, m) = b.norm_and_glu(sum);
    b.node(Op::Binary(BinaryOp::Add), vec![sum, x], F32, [E, 1, 1, 1]);
    let keep = if result { vec![go] } else { vec![] };
    b.g.results.retain(|v| {
        *v != m
            && (!matches!(b.g.nodes[v.node].op, Op::GetRows | Op::RmsNorm { .. })
                || keep.contains(v))
    });
    b.g
}

#[test]
fn one_row_selections_become_views_and_the_o_projection_meets_its_norm() {
    let mut g = row_select_graph(1, None, false);
    let f = fuse::run(&mut g);
    assert_eq!((f.row_select, f.matmul_norm), (2, 1));
    assert_eq!(g.count("GetRows"), 0);
    assert_eq!(g.count("MulMatAddRmsNorm"), 1);
    // Each view has its row's memory.
    for i in 0..g.nodes.len() {
        if g.nodes[i].op == Op::View {
            let src = g.nodes[i].inputs[0];
            assert_eq!(g.nodes[i].outputs[0].place, g.output(src).place);
        }
    }
    // Several rows (a prompt), a selection the host reads, or the O result's
    // memory written before the add reads it: the GetRows stays.
    assert_eq!(
        fuse::run(&mut row_select_graph(8, None, false)).row_select,
        0
    );
    assert_eq!(
        fuse::run(&mut row_select_graph(1, None, true)).row_select,
        1
    );
    assert_eq!(
        fuse::run(&mut row_select_graph(1, Some(false), false)).row_select,
        1
    );
    // The add itself may take the O result's memory (in place, element-wise).
    assert_eq!(
        fuse::run(&mut row_select_graph(1, Some(true), false)).row_select,
        2
    );
}

/// llama's last layer and output: o = w x; sum = o + res; the norm of sum
/// times its weight, which the host may read (a result) and the lm head
/// reads. `deep`: res is the sum of an O projection and its residual whose
/// FFN norm the gate and up matmuls read, and x their GLU (a decode step's
/// last layer); else res and x are parameters (a prompt's last layer, after
/// its row selection). `extra`: the weighted norm is also read by a Scale.
/// Returns the graph and the weighted norm's memory.
fn output_norm_graph(deep: bool, extra: bool) -> (Graph, Place) {
    let mut b = B::new();
    let x = b.param(F32, [E, 1, 1, 1]);
    let res = b.param(F32, [E, 1, 1, 1]);
    let mut hidden = vec![];
    let (x, res, k) = if deep {
        let w = b.param(Q4_0, [E, E, 1, 1]);
        let o = b.node(Op::MulMat, vec![w, x], F32, [E, 1, 1, 1]);
        let s = b.node(Op::Binary(BinaryOp::Add), vec![o, res], F32, [E, 1, 1, 1]);
        let n = b.node(Op::RmsNorm { eps: 1e-5 }, vec![s], F32, [E, 1, 1, 1]);
        let nw = b.param(F32, [E, 1, 1, 1]);
        let m = b.node(Op::Binary(BinaryOp::Mul), vec![n, nw], F32, [E, 1, 1, 1]);
        hidden.extend([n, m]);
        (b.gate_up_glu(m, Q4_0, false), s, 512)
    } else {
        (x, res, E)
    };
    let w = b.param(Q4_0, [k, E, 1, 1]);
    let o = b.node(Op::MulMat, vec![w, x], F32, [E, 1, 1, 1]);
    let sum = b.node(Op::Binary(BinaryOp::Add), vec![o, res], F32, [E, 1, 1, 1]);
    let n = b.node(Op::RmsNorm { eps: 1e-5 }, vec![sum], F32, [E, 1, 1, 1]);
    let nw = b.param(F32, [E, 1, 1, 1]);
    let m = b.node(Op::Binary(BinaryOp::Mul), vec![n, nw], F32, [E, 1, 1, 1]);
    let head = b.param(Q4_0, [E, 1000, 1, 1]);
    b.node(Op::MulMat, vec![head, m], F32, [1000, 1, 1, 1]);
    if extra {
        let scale = Op::Scale {
            scale: 2.0,
            bias: 0.0,
        };
        b.node(scale, vec![m], F32, [E, 1, 1, 1]);
    }
    hidden.push(n);
    b.g.results.retain(|v| !hidden.contains(v));
    let place = b.g.output(m).place;
    (b.g, place)
}

#[test]
fn the_output_norm_meets_the_last_down_projection_and_the_lm_head_writes_its_row() {
    let (mut g, row) = output_norm_graph(true, false);
    let f = fuse::run(&mut g);
    assert_eq!((f.rms_norm, f.matmul_glu, f.matmul_norm), (2, 1, 2));
    assert_eq!(g.count("MulMatAddRmsNorm"), 2);
    assert_eq!(g.count("MulMatNormed"), 1);
    assert_eq!(g.count("MulMat") + g.count("FusedAddRmsNorm"), 0);
    let find = |g: &Graph, kind: &str| {
        (0..g.nodes.len())
            .rev()
            .find(|&i| g.nodes[i].op.kind() == kind)
    };
    let (mvn, head) = (
        find(&g, "MulMatAddRmsNorm").unwrap(),
        find(&g, "MulMatNormed").unwrap(),
    );
    // The head reads the weighted norm (through its Q8_1 copy), the sum and
    // the norm weight, and writes the row in the row's memory in its place
    // among the results.
    let hn = &g.nodes[head];
    assert_eq!(
        hn.inputs[1..],
        [
            Value::new(mvn, 3),
            g.nodes[mvn].inputs[2],
            Value::new(mvn, 1)
        ]
    );
    assert_eq!(g.users(Value::new(mvn, 1)), vec![head]);
    assert!(!g.results.contains(&Value::new(mvn, 1)));
    assert!(g.results.contains(&Value::new(head, 1)));
    assert!(g.results.contains(&Value::new(head, 0)));
    assert_eq!(hn.outputs[1].place, row);
    assert_eq!(hn.outputs[1].ty, g.output(Value::new(mvn, 1)).ty);
    // Another reader of the row as floats, or a residual without shares
    // (the kernel's factor c would be 1): the output norm stays apart.
    let (mut g, _) = output_norm_graph(true, true);
    assert_eq!(fuse::run(&mut g).matmul_norm, 1);
    assert_eq!(g.count("MulMatNormed"), 0);
    let (mut g, _) = output_norm_graph(false, false);
    assert_eq!(fuse::run(&mut g).matmul_norm, 0);
    assert_eq!(g.count("MulMatNormed"), 0);
}

#[test]
fn an_input_after_the_members_moves_the_fused_node_after_it() {
    // a = scale(x); b = scale(x); c = add(a, b); fuse [a] reading b: the
    // fused node goes after b, and c after it (Graph::fuse then orders the
    // whole graph from the first member on, not only up to the last one).
    let mut b = B::new();
    let x = b.param(F32, [E, 1, 1, 1]);
    let scale = Op::Scale {
        scale: 2.0,
        bias: 0.0,
    };
    let a = b.node(scale.clone(), vec![x], F32, [E, 1, 1, 1]);
    let y = b.node(scale.clone(), vec![x], F32, [E, 1, 1, 1]);
    b.node(Op::Binary(BinaryOp::Add), vec![a, y], F32, [E, 1, 1, 1]);
    let mut g = b.g;
    let f = g
        .fuse(&[a.node], Op::Binary(BinaryOp::Mul), vec![x, y], "f".into())
        .expect("fused");
    ggml_polycl::ir::verify::verify(&g).unwrap();
    let ops: Vec<&Op> = g.nodes.iter().map(|n| &n.op).collect();
    assert_eq!(
        ops,
        vec![
            &Op::Parameter,
            &scale,
            &Op::Binary(BinaryOp::Mul),
            &Op::Binary(BinaryOp::Add)
        ]
    );
    assert_eq!(f, 2);
    assert_eq!(g.nodes[3].inputs, vec![Value::new(2, 0), Value::new(1, 0)]);
    assert_eq!(g.nodes[2].inputs, vec![Value::new(0, 0), Value::new(1, 0)]);
}
