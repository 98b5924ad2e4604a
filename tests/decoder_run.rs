//! Running host-described graphs on every OpenCL device: the attention-with-
//! cache graph of examples/ stateless (the test feeds caches back) and
//! stateful (polycl owns them), with and without beam reordering, plus TOP_K.

use ggml_polycl::decoder::foreign::{
    convert, GraphDesc, NodeSpec, ShapeDesc, SourceRef, TensorSpec, WeightSpec,
};
use ggml_polycl::ggml::types::GgmlType::{self, F16, F32, I32, I64};
use ggml_polycl::passes::make_stateful::MakeStateful;
use ggml_polycl::passes::Pass;
use ggml_polycl::plan::request::{Compiled, Request};
use ggml_polycl::runtime::devices;

const D: i64 = 4; // head size
const H: i64 = 2; // heads
const B: i64 = 2; // beams (outermost dim)
const C: i64 = 8; // model width

fn t(name: &str, dtype: GgmlType, ne: &[i64]) -> TensorSpec {
    TensorSpec {
        name: name.into(),
        dtype: dtype as i32,
        shape: ShapeDesc::new(ne),
    }
}

fn f32s(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_ne_bytes()).collect()
}

fn to_f32(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// A small deterministic generator, so runs are reproducible.
struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> f32 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
    fn vec(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.next()).collect()
    }
}

fn node(op: &str, params: Vec<u8>, inputs: Vec<SourceRef>, out: TensorSpec) -> NodeSpec {
    NodeSpec {
        op: op.into(),
        params,
        inputs: inputs.into_iter().map(Some).collect(),
        outputs: vec![out],
    }
}

fn n(i: usize) -> SourceRef {
    SourceRef::Node { node: i, port: 0 }
}

/// x [C, T, 1, B] -> q/k/v projections -> heads [D, T, H, B] -> SET_ROWS into
/// k_cache/v_cache [D, ?, H, B] at rows idx -> FLASH_ATTN_EXT -> output
/// projection [C, T, 1, B]. Outputs: out, k_cache_out, v_cache_out.
fn attention() -> GraphDesc {
    let mut rng = Lcg(7);
    let w = |name: &str, rng: &mut Lcg, ne: [i64; 2]| WeightSpec {
        name: name.into(),
        dtype: F32 as i32,
        shape: ShapeDesc::new(&ne),
        data: f32s(
            &rng.vec((ne[0] * ne[1]) as usize)
                .iter()
                .map(|x| x * 0.5)
                .collect::<Vec<_>>(),
        ),
    };
    let weights = vec![
        w("wq", &mut rng, [C, H * D]),
        w("wk", &mut rng, [C, H * D]),
        w("wv", &mut rng, [C, H * D]),
        w("wo", &mut rng, [H * D, C]),
    ];
    let inputs = vec![
        t("x", F32, &[C, -1, 1, B]),
        t("idx", I64, &[-1]),
        t("k_cache", F16, &[D, -1, H, B]),
        t("v_cache", F16, &[D, -1, H, B]),
    ];
    let permute: Vec<u8> = [0i32, 2, 1, 3]
        .iter()
        .flat_map(|x| x.to_ne_bytes())
        .collect();
    let scale = 1.0f32 / (D as f32).sqrt();
    let fa: Vec<u8> = [scale, 0.0, 0.0]
        .iter()
        .flat_map(|x| x.to_ne_bytes())
        .collect();
    use SourceRef::{Input, Weight};
    let mut nodes = Vec::new();
    for (i, name) in ["q", "k", "v"].iter().enumerate() {
        let base = nodes.len();
        nodes.push(node(
            "MUL_MAT",
            vec![],
            vec![Weight(i), Input(0)],
            t(name, F32, &[H * D, -1, 1, B]),
        ));
        nodes.push(node(
            "RESHAPE",
            vec![],
            vec![n(base)],
            t(&format!("{name}_heads"), F32, &[D, H, -1, B]),
        ));
        nodes.push(node(
            "PERMUTE",
            permute.clone(),
            vec![n(base + 1)],
            t(&format!("{name}_p"), F32, &[D, -1, H, B]),
        ));
    }
    // q_p = 2, k_p = 5, v_p = 8
    nodes.push(node(
        "SET_ROWS",
        vec![],
        vec![n(5), Input(1), Input(2)],
        t("k_cache_out", F16, &[D, -1, H, B]),
    )); // 9
    nodes.push(node(
        "SET_ROWS",
        vec![],
        vec![n(8), Input(1), Input(3)],
        t("v_cache_out", F16, &[D, -1, H, B]),
    )); // 10
    nodes.push(node(
        "FLASH_ATTN_EXT",
        fa,
        vec![n(2), n(9), n(10)],
        t("attn", F32, &[D, H, -1, B]),
    )); // 11
    nodes.push(node(
        "RESHAPE",
        vec![],
        vec![n(11)],
        t("attn_flat", F32, &[H * D, -1, 1, B]),
    )); // 12
    nodes.push(node(
        "MUL_MAT",
        vec![],
        vec![Weight(3), n(12)],
        t("out", F32, &[C, -1, 1, B]),
    )); // 13
    GraphDesc {
        inputs,
        weights,
        nodes,
        outputs: vec![n(13), n(9), n(10)],
    }
}

/// The attention graph on the CPU, reading K/V from the (F16) caches the device wrote.
fn reference(x: &[f32], k: &[u8], v: &[u8], n_kv: usize) -> Vec<f32> {
    let g = attention();
    let w: Vec<Vec<f32>> = g.weights.iter().map(|w| to_f32(&w.data)).collect();
    let f16 = |c: &[u8], i: usize| half::f16::from_le_bytes([c[2 * i], c[2 * i + 1]]).to_f32();
    let (c, d, h, b) = (C as usize, D as usize, H as usize, B as usize);
    let hd = h * d;
    let mut out = vec![0f32; c * b];
    for beam in 0..b {
        let xb = &x[beam * c..(beam + 1) * c];
        let q: Vec<f32> = (0..hd)
            .map(|i| (0..c).map(|k| w[0][k + i * c] * xb[k]).sum())
            .collect();
        let mut attn = vec![0f32; hd];
        for head in 0..h {
            let at = |j: usize, dd: usize| dd + d * (j + n_kv * (head + h * beam));
            let s: Vec<f32> = (0..n_kv)
                .map(|j| {
                    (0..d)
                        .map(|dd| q[dd + head * d] * f16(k, at(j, dd)))
                        .sum::<f32>()
                        / (d as f32).sqrt()
                })
                .collect();
            let m = s.iter().cloned().fold(f32::MIN, f32::max);
            let e: Vec<f32> = s.iter().map(|v| (v - m).exp()).collect();
            let z: f32 = e.iter().sum();
            for dd in 0..d {
                attn[dd + head * d] = (0..n_kv).map(|j| e[j] / z * f16(v, at(j, dd))).sum();
            }
        }
        for o in 0..c {
            out[o + beam * c] = (0..hd).map(|i| w[3][i + o * hd] * attn[i]).sum();
        }
    }
    out
}

fn all_devices() -> Vec<std::sync::Arc<ggml_polycl::runtime::Device>> {
    match devices() {
        Ok(d) => d.to_vec(),
        Err(e) => panic!("device tests need an OpenCL device (install pocl-opencl-icd): {e}"),
    }
}

fn compile(stateful: bool, dev: &std::sync::Arc<ggml_polycl::runtime::Device>) -> Request {
    let mut passes: Vec<Box<dyn Pass>> = Vec::new();
    if stateful {
        passes.push(Box::new(MakeStateful::new(
            Vec::<String>::new(),
            -1,
            "beam_idx",
        )));
    }
    let (_, g) = convert(&attention(), &mut passes).unwrap();
    Request::new(Compiled::new(&g, std::slice::from_ref(dev)).unwrap(), 0).unwrap()
}

/// Steps of one token per beam; `perm(step)` reorders the beams before the step.
fn run_both(steps: usize, perm: impl Fn(usize) -> Vec<i32>) {
    for dev in all_devices() {
        let mut stateless = compile(false, &dev);
        let mut stateful = compile(true, &dev);
        let row = (D * 2) as usize; // bytes of one f16 row
        let mut k_cache: Vec<u8> = Vec::new(); // [D, n, H, B] f16
        let mut v_cache: Vec<u8> = Vec::new();
        let mut rng = Lcg(42);
        for step in 0..steps {
            let npast = step as i64;
            let p = perm(step);
            // The stateless host reorders its caches itself: beam b takes beam p[b].
            let reorder = |c: &[u8]| -> Vec<u8> {
                let per_beam = c.len() / B as usize;
                let mut out = Vec::with_capacity(c.len());
                for &s in p.iter().take(B as usize) {
                    let s = s as usize;
                    out.extend_from_slice(&c[s * per_beam..(s + 1) * per_beam]);
                }
                out
            };
            let (k_past, v_past) = (reorder(&k_cache), reorder(&v_cache));
            // Append one empty row per (head, beam) for the write at idx = npast.
            let grow = |c: &[u8]| -> Vec<u8> {
                let mut out = Vec::new();
                for hb in 0..(H * B) as usize {
                    out.extend_from_slice(
                        &c[hb * npast as usize * row..(hb + 1) * npast as usize * row],
                    );
                    out.extend(std::iter::repeat_n(0u8, row));
                }
                out
            };
            let x = f32s(&rng.vec((C * B) as usize));
            let idx: Vec<u8> = npast.to_ne_bytes().to_vec();
            let cache_ne = [D, npast + 1, H, B];
            stateless.set_input("x", 4, &[C, 1, 1, B], &x).unwrap();
            stateless.set_input("idx", 1, &[1, 1, 1, 1], &idx).unwrap();
            stateless
                .set_input("k_cache", 4, &cache_ne, &grow(&k_past))
                .unwrap();
            stateless
                .set_input("v_cache", 4, &cache_ne, &grow(&v_past))
                .unwrap();
            stateless.infer().unwrap();
            stateful.set_input("x", 4, &[C, 1, 1, B], &x).unwrap();
            stateful.set_input("idx", 1, &[1, 1, 1, 1], &idx).unwrap();
            let beam: Vec<u8> = p.iter().flat_map(|x| x.to_ne_bytes()).collect();
            stateful
                .set_input("beam_idx", 1, &[B, 1, 1, 1], &beam)
                .unwrap();
            stateful.infer().unwrap();
            let (ta, a) = stateless.output("out").unwrap();
            let (tb, b) = stateful.output("out").unwrap();
            assert_eq!(ta.ne, [C, 1, 1, B]);
            assert_eq!(ta, tb);
            assert_eq!(
                a,
                b,
                "{}: step {step}: stateless {:?} vs stateful {:?}",
                dev.name,
                to_f32(&a),
                to_f32(&b)
            );
            assert!(to_f32(&a).iter().all(|v| v.is_finite()));
            k_cache = stateless.output("k_cache_out").unwrap().1;
            v_cache = stateless.output("v_cache_out").unwrap().1;
            let want = reference(&to_f32(&x), &k_cache, &v_cache, npast as usize + 1);
            for (i, (g, w)) in to_f32(&a).iter().zip(&want).enumerate() {
                assert!(
                    (g - w).abs() < 2e-2,
                    "{}: step {step}: out[{i}] = {g}, reference {w}",
                    dev.name
                );
            }
            let (kt, ks) = stateful.state("k_cache").unwrap();
            assert_eq!(kt.ne, cache_ne);
            assert_eq!(ks, k_cache, "{}: step {step}: state k_cache", dev.name);
            assert_eq!(stateful.state("v_cache").unwrap().1, v_cache);
        }
        stateful.reset_state();
        let (t0, b0) = stateful.state("k_cache").unwrap();
        assert_eq!((t0.ne, b0.len()), ([D, 0, H, B], 0));
    }
}

#[test]
fn stateless_and_stateful_decode_give_identical_outputs() {
    run_both(16, |_| (0..B as i32).collect());
}

#[test]
fn beam_reordering_matches_a_host_that_permutes_its_caches() {
    run_both(16, |step| {
        if step % 3 == 1 {
            vec![1, 1]
        } else if step % 2 == 0 {
            vec![1, 0]
        } else {
            vec![0, 1]
        }
    });
}

#[test]
fn top_k_values_and_indices_are_separate_ports_with_dynamic_k() {
    let desc = GraphDesc {
        inputs: vec![t("x", F32, &[6, -1]), t("k", I32, &[1])],
        weights: vec![],
        nodes: vec![NodeSpec {
            op: "TOP_K".into(),
            params: vec![],
            inputs: vec![Some(SourceRef::Input(0)), Some(SourceRef::Input(1))],
            outputs: vec![t("values", F32, &[-1, -1]), t("indices", I32, &[-1, -1])],
        }],
        outputs: vec![
            SourceRef::Node { node: 0, port: 1 },
            SourceRef::Node { node: 0, port: 0 },
        ],
    };
    let (_, g) = convert(&desc, &mut []).unwrap();
    for dev in all_devices() {
        let mut r =
            Request::new(Compiled::new(&g, std::slice::from_ref(&dev)).unwrap(), 0).unwrap();
        let x = f32s(&[
            0.1, 0.9, 0.5, 0.7, 0.9, -1.0, 3.0, 2.0, 1.0, 0.0, -1.0, -2.0,
        ]);
        r.set_input("x", 2, &[6, 2, 1, 1], &x).unwrap();
        for k in [2i32, 3] {
            r.set_input("k", 1, &[1, 1, 1, 1], &k.to_ne_bytes())
                .unwrap();
            r.infer().unwrap();
            let (ti, idx) = r.output("indices").unwrap();
            let (tv, vals) = r.output("values").unwrap();
            assert_eq!((ti.dtype, ti.ne), (I32, [k as i64, 2, 1, 1]));
            assert_eq!((tv.dtype, tv.ne), (F32, [k as i64, 2, 1, 1]));
            let idx: Vec<i32> = idx
                .chunks_exact(4)
                .map(|c| i32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
                .collect();
            let want: Vec<i32> = if k == 2 {
                vec![1, 4, 0, 1]
            } else {
                vec![1, 4, 3, 0, 1, 2]
            };
            assert_eq!(idx, want, "{}", dev.name);
            let want_v: Vec<f32> = if k == 2 {
                vec![0.9, 0.9, 3.0, 2.0]
            } else {
                vec![0.9, 0.9, 0.7, 3.0, 2.0, 1.0]
            };
            assert_eq!(to_f32(&vals), want_v);
        }
        // k beyond the row is refused before anything runs.
        r.set_input("k", 1, &[1, 1, 1, 1], &7i32.to_ne_bytes())
            .unwrap();
        let e = r.infer().unwrap_err().to_string();
        assert!(e.contains("k = 7"), "{e}");
    }
}

#[test]
fn inputs_that_contradict_the_graph_are_errors() {
    for dev in all_devices() {
        let mut r = compile(false, &dev);
        assert!(r.set_input("nope", 1, &[1, 1, 1, 1], &[0; 4]).is_err());
        assert!(r
            .set_input("x", 4, &[C + 1, 1, 1, B], &[0; ((C + 1) * B * 4) as usize])
            .is_err());
        assert!(r.set_input("x", 4, &[C, 1, 1, B], &[0; 3]).is_err());
        r.set_input("x", 4, &[C, 1, 1, B], &vec![0; (C * B * 4) as usize])
            .unwrap();
        r.set_input("idx", 1, &[1, 1, 1, 1], &5i64.to_ne_bytes())
            .unwrap();
        let cache = vec![0u8; (D * 2 * H * B * 2) as usize];
        r.set_input("k_cache", 4, &[D, 2, H, B], &cache).unwrap();
        r.set_input("v_cache", 4, &[D, 2, H, B], &cache).unwrap();
        // Row 5 of a 2-row cache would write outside it.
        let e = r.infer().unwrap_err().to_string();
        assert!(e.contains("row index 5"), "{e}");
        // Token counts that disagree (1 new row, 2 indices).
        r.set_input("idx", 1, &[2, 1, 1, 1], &[0u8; 16]).unwrap();
        let e = r.infer().unwrap_err().to_string();
        assert!(e.contains("k_cache_out") || e.contains("indices"), "{e}");
        let _ = I64;
    }
}

#[test]
fn one_compiled_model_serves_every_device_of_its_list() {
    let devs = all_devices();
    let (_, g) = convert(
        &attention(),
        &mut [Box::new(MakeStateful::new(Vec::<String>::new(), -1, "beam_idx")) as Box<dyn Pass>],
    )
    .unwrap();
    let compiled = Compiled::new(&g, &devs).unwrap();
    assert_eq!(compiled.devices(), devs.len());
    let mut outs = Vec::new();
    for slot in 0..devs.len() {
        let mut r = Request::new(compiled.clone(), slot).unwrap();
        let mut rng = Lcg(3);
        for step in 0..3i64 {
            r.set_input("x", 4, &[C, 1, 1, B], &f32s(&rng.vec((C * B) as usize)))
                .unwrap();
            r.set_input("idx", 1, &[1, 1, 1, 1], &step.to_ne_bytes())
                .unwrap();
            r.set_input("beam_idx", 1, &[B, 1, 1, 1], &[0u8, 0, 0, 0, 1, 0, 0, 0])
                .unwrap();
            r.infer().unwrap();
        }
        outs.push(r.output("out").unwrap());
    }
    assert!(outs.windows(2).all(|w| w[0] == w[1]));
    assert!(Request::new(compiled, devs.len()).is_err());
}
