//! make_stateful and the cache callback on host-described graphs (Rust side of
//! the C decoder path; the C tests in ctest/decoder assert the same table
//! through polycl.h): the seed's regression table, the append-axis rules,
//! beam_idx reuse, mixed graphs, and extension order.

use ggml_polycl::decoder::foreign::{
    convert, GraphDesc, NodeSpec, ShapeDesc, SourceRef, TensorSpec,
};
use ggml_polycl::ggml::types::GgmlType::{self, F16, F32, I32, I64};
use ggml_polycl::ir::{Graph, Op};
use ggml_polycl::passes::extension::{CacheChoice, CachePolicy, CacheWrite};
use ggml_polycl::passes::make_stateful::{MakeStateful, StatefulOptions};
use ggml_polycl::passes::Pass;
use std::cell::RefCell;
use std::rc::Rc;

fn t(name: &str, dtype: GgmlType, ne: &[i64]) -> TensorSpec {
    TensorSpec {
        name: name.into(),
        dtype: dtype as i32,
        shape: ShapeDesc::new(ne),
    }
}

/// One SET_ROWS: data f32 [1,?,2,4] and idx i64 [?] into cache f16 [1,?,2,4]
/// (shapes in ggml ne order), output cache_out.
fn fixture(cache: TensorSpec) -> GraphDesc {
    let out_shape = if cache.shape.rank < 0 {
        ShapeDesc::new(&[1, -1, 2, 4])
    } else {
        cache.shape
    };
    let mut data_shape = out_shape;
    data_shape.ne[1] = -1;
    GraphDesc {
        inputs: vec![t("data", F32, &[]), t("idx", I64, &[-1]), cache]
            .into_iter()
            .enumerate()
            .map(|(i, mut s)| {
                if i == 0 {
                    s.shape = data_shape;
                }
                s
            })
            .collect(),
        weights: vec![],
        nodes: vec![NodeSpec {
            op: "SET_ROWS".into(),
            params: vec![],
            inputs: vec![
                Some(SourceRef::Input(0)),
                Some(SourceRef::Input(1)),
                Some(SourceRef::Input(2)),
            ],
            outputs: vec![TensorSpec {
                name: "cache_out".into(),
                dtype: F16 as i32,
                shape: out_shape,
            }],
        }],
        outputs: vec![SourceRef::Node { node: 0, port: 0 }],
    }
}

fn cache_1_dyn_2_4() -> TensorSpec {
    t("cache", F16, &[1, -1, 2, 4])
}

fn inputs(g: &Graph) -> Vec<String> {
    g.nodes
        .iter()
        .filter(|n| n.op == Op::Parameter)
        .map(|n| n.name.clone())
        .collect()
}

fn outputs(g: &Graph) -> Vec<String> {
    g.results.iter().map(|&v| g.value_name(v)).collect()
}

fn stateful(skip: &[&str], axis: i64) -> Box<dyn Pass> {
    Box::new(MakeStateful::new(
        skip.iter().map(|s| s.to_string()),
        axis,
        "beam_idx",
    ))
}

fn assert_stateless(g: &Graph) {
    assert_eq!(g.variables().len(), 0);
    assert_eq!(g.sinks().len(), 0);
    assert_eq!(g.count("ReadValue"), 0);
    assert_eq!(g.count("Assign"), 0);
    assert_eq!(g.count("ScatterRows"), 1);
    assert_eq!(g.count("SetRows"), 0);
    assert_eq!(inputs(g), ["data", "idx", "cache"]);
    assert_eq!(outputs(g), ["cache_out"]);
}

#[test]
fn no_extension_is_stateless() {
    let (_, g) = convert(&fixture(cache_1_dyn_2_4()), &mut []).unwrap();
    assert_stateless(&g);
}

#[test]
fn make_stateful_owns_the_cache() {
    let (_, g) = convert(&fixture(cache_1_dyn_2_4()), &mut [stateful(&[], -1)]).unwrap();
    let vars = g.variables();
    assert_eq!(vars.len(), 1);
    assert_eq!(vars[0].0, "cache");
    assert_eq!(vars[0].1.dtype, F16);
    assert_eq!(vars[0].1.ne, [1, -1, 2, 4]);
    assert_eq!(g.sinks().len(), 1);
    for (kind, n) in [
        ("ReadValue", 1),
        ("Assign", 1),
        ("Gather", 1),
        ("ScatterRows", 0),
        ("SetRows", 0),
    ] {
        assert_eq!(g.count(kind), n, "{kind}");
    }
    assert_eq!(inputs(&g), ["data", "idx", "beam_idx"]);
    assert!(outputs(&g).is_empty());
    let beam = g.nodes.iter().find(|n| n.name == "beam_idx").unwrap();
    assert_eq!(
        (beam.outputs[0].ty.dtype, beam.outputs[0].ty.ne),
        (I32, [-1, 1, 1, 1])
    );
    // The initial value is empty on the append axis.
    let init = g
        .nodes
        .iter()
        .find(|n| matches!(n.op, Op::Constant { .. }))
        .unwrap();
    assert_eq!(init.outputs[0].ty.ne, [1, 0, 2, 4]);
}

#[test]
fn skipping_the_cache_is_the_same_as_no_extension() {
    let (_, g) = convert(&fixture(cache_1_dyn_2_4()), &mut [stateful(&["cache"], -1)]).unwrap();
    assert_stateless(&g);
    let (_, plain) = convert(&fixture(cache_1_dyn_2_4()), &mut []).unwrap();
    assert_eq!(g, plain);
}

fn err(cache: TensorSpec, axis: i64) -> String {
    match convert(&fixture(cache), &mut [stateful(&[], axis)]) {
        Ok(_) => panic!("converted"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn append_axis_rules() {
    let e = err(t("cache", F16, &[-1, -1, 2, 4]), -1);
    assert!(
        e.contains("cache 'cache'") && e.contains("more than one dynamic axis"),
        "{e}"
    );
    let e = err(t("cache", F16, &[-1, -1, 2, 4]), 1);
    assert!(
        e.contains("cache 'cache'") && e.contains("static non-token"),
        "{e}"
    );
    let e = err(t("cache", F16, &[1, 16, 2, 4]), -1);
    assert!(
        e.contains("cache 'cache'") && e.contains("explicit append_axis"),
        "{e}"
    );
    let e = err(t("cache", F16, &[1, 16, 2, 4]), 4);
    assert!(e.contains("out of range"), "{e}");
    let e = err(
        TensorSpec {
            name: "cache".into(),
            dtype: F16 as i32,
            shape: ShapeDesc::dynamic_rank(),
        },
        -1,
    );
    assert!(
        e.contains("cache 'cache'") && e.contains("static cache rank"),
        "{e}"
    );
    let (_, g) = convert(
        &fixture(t("cache", F16, &[1, 16, 2, 4])),
        &mut [stateful(&[], 1)],
    )
    .unwrap();
    assert_eq!(g.variables()[0].1.ne, [1, -1, 2, 4]);
}

#[test]
fn beam_idx_is_reused_and_only_added_when_something_converts() {
    // An existing beam_idx input (read by a node of its own) is reused.
    let mut d = fixture(cache_1_dyn_2_4());
    d.inputs.push(t("beam_idx", I32, &[-1]));
    d.nodes.push(NodeSpec {
        op: "SCALE".into(),
        params: vec![0; 8],
        inputs: vec![Some(SourceRef::Input(0))],
        outputs: vec![t("scaled", F32, &[1, -1, 2, 4])],
    });
    let (_, g) = convert(&d, &mut [stateful(&[], -1)]).unwrap();
    assert_eq!(inputs(&g).iter().filter(|n| *n == "beam_idx").count(), 1);
    let gather = g.nodes.iter().find(|n| n.op.kind() == "Gather").unwrap();
    assert_eq!(g.nodes[gather.inputs[1].node].name, "beam_idx");
    // A write into a computed tensor (not a Parameter) converts nothing.
    let mut d = fixture(cache_1_dyn_2_4());
    d.nodes.insert(
        0,
        NodeSpec {
            op: "CPY".into(),
            params: vec![],
            inputs: vec![Some(SourceRef::Input(2)), Some(SourceRef::Input(2))],
            outputs: vec![t("scratch", F16, &[1, -1, 2, 4])],
        },
    );
    d.nodes[1].inputs[2] = Some(SourceRef::Node { node: 0, port: 0 });
    d.outputs = vec![SourceRef::Node { node: 1, port: 0 }];
    let (_, g) = convert(&d, &mut [stateful(&[], -1)]).unwrap();
    assert_eq!(g.variables().len(), 0);
    assert!(!inputs(&g).contains(&"beam_idx".to_string()));
    assert_eq!(g.count("ScatterRows"), 1);
}

#[test]
fn extensions_run_in_registration_order_before_the_stateless_lowering() {
    let seen: Rc<RefCell<Vec<String>>> = Rc::default();
    let policy =
        |tag: &'static str, answer: CacheChoice, seen: Rc<RefCell<Vec<String>>>| -> Box<dyn Pass> {
            Box::new(CachePolicy {
                name: tag.into(),
                options: StatefulOptions::default(),
                choose: Box::new(move |w: &CacheWrite| {
                    seen.borrow_mut()
                        .push(format!("{tag}:{}:{}", w.name, w.is_parameter));
                    Ok(answer)
                }),
            })
        };
    let mut passes = vec![
        policy("first", CacheChoice::Leave, seen.clone()),
        policy("second", CacheChoice::Stateful, seen.clone()),
        policy("third", CacheChoice::Stateless, seen.clone()),
    ];
    let (_, g) = convert(&fixture(cache_1_dyn_2_4()), &mut passes).unwrap();
    assert_eq!(*seen.borrow(), ["first:cache:true", "second:cache:true"]);
    assert_eq!(g.variables().len(), 1);
}

#[test]
fn ggml_top_k_with_one_output_is_not_claimed() {
    use ggml_polycl::decoder::{NodeDesc, SingleNode, Source, TensorDesc};
    use ggml_polycl::ggml::op_params::OpParams;
    use ggml_polycl::ggml::ops::OP_TOP_K;
    use ggml_polycl::ir::TensorType;
    // ggml's TOP_K: one I32 output, the indices. polycl only computes the
    // two-port form of the C decoder path, so supports_op must say no.
    let leaf = TensorDesc {
        name: "x".into(),
        ty: TensorType::contiguous(F32, [8, 2, 1, 1]),
        mem: None,
    };
    let out = TensorDesc {
        name: "top".into(),
        ty: TensorType::contiguous(I32, [2, 2, 1, 1]),
        mem: None,
    };
    let dec = SingleNode {
        leaves: vec![leaf],
        nodes: vec![NodeDesc {
            op: OP_TOP_K,
            params: OpParams::default(),
            srcs: vec![Some(Source::Leaf(0))],
            out,
        }],
        results: vec![Source::Node(0)],
    };
    assert!(!ggml_polycl::frontend::supports(&dec, &dec.nodes[0]));
}
