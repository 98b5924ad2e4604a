//! Several devices at once, below the ggml glue: row-split matmuls against
//! one-device matmuls (bit for bit), the graph-scoped Q8_1 activation cache
//! (bit-identical outputs, exact hit counts, fewer quantize kernels and peer
//! copies), a device failing mid-compute, and bad split ratios.
//!
//! Needs two OpenCL devices: with PoCL, `POCL_DEVICES="pthread pthread"`,
//! which these tests set for their own process when it is unset. With one
//! device they say so and pass.

use ggml_polycl::backend::split::split_buffer_type;
use ggml_polycl::ggml::types::GgmlType::{self, F16, F32, Q4K, Q4_0, Q6K, Q8_0};
use ggml_polycl::ir::{Graph, MemRef, Op, Output, Place, TensorType, Value};
use ggml_polycl::plan::{q8_cache, Plan};
use ggml_polycl::runtime::peer::{self, SplitTensor};
use ggml_polycl::runtime::{counters, devices, quant, Device, DeviceBuffer};
use parking_lot::Mutex;
use std::sync::{Arc, Once};

/// Tests that read process-wide counters or set the cache mode run one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn two_devices() -> Option<Vec<Arc<Device>>> {
    static ENV: Once = Once::new();
    ENV.call_once(|| {
        if std::env::var_os("POCL_DEVICES").is_none() {
            // Before the first OpenCL call of this process: PoCL reads it once.
            std::env::set_var("POCL_DEVICES", "pthread pthread");
        }
    });
    let d = devices().expect("an OpenCL device (install pocl-opencl-icd)");
    if d.len() < 2 {
        eprintln!(
            "multi-device tests need two OpenCL devices; found {}",
            d.len()
        );
        return None;
    }
    Some(d[..2].to_vec())
}

/// Deterministic values in [-1, 1).
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) & 0xFF_FFFF) as f32 / 8_388_608.0 - 1.0
        })
        .collect()
}

/// `rows` rows of `k` values in ggml's encoding of `ty`.
fn encode(ty: GgmlType, k: usize, rows: usize, seed: u64) -> Vec<u8> {
    let f = quant::format(ty as u32).expect("a codec");
    let v = values(k * rows, seed);
    let rb = f.row_bytes(k);
    let mut out = vec![0u8; rb * rows];
    for r in 0..rows {
        (f.quantize_row)(&v[r * k..(r + 1) * k], &mut out[r * rb..(r + 1) * rb]);
    }
    out
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_ne_bytes()).collect()
}

fn param(g: &mut Graph, name: &str, ty: TensorType, at: MemRef) -> Value {
    let id = g.add(
        Op::Parameter,
        vec![],
        vec![Output {
            ty,
            place: Place::Bound(at),
        }],
        name,
    );
    Value::new(id, 0)
}

fn at(b: &DeviceBuffer) -> MemRef {
    MemRef {
        buffer: b.base,
        offset: 0,
    }
}

/// A weight of `n` rows of `k` elements: in one device buffer of `main`, or
/// split over `devs` at `points` with `main` owning it.
struct Weight {
    ty: TensorType,
    at: MemRef,
    _plain: Option<Arc<DeviceBuffer>>,
    split: Option<Arc<SplitTensor>>,
}

impl Drop for Weight {
    fn drop(&mut self) {
        if let Some(b) = &self._plain {
            DeviceBuffer::release(b.base);
        }
        if self.split.is_some() {
            peer::remove_range(self.at.buffer);
        }
    }
}

fn weight(
    wt: GgmlType,
    k: i64,
    n: i64,
    seed: u64,
    devs: &[Arc<Device>],
    main: usize,
    points: Option<&[f32]>,
) -> Weight {
    let ty = TensorType::contiguous(wt, [k, n, 1, 1]);
    let data = encode(wt, k as usize, n as usize, seed);
    match points {
        None => {
            let b = DeviceBuffer::alloc(&devs[main], data.len()).unwrap();
            b.write(0, &data).unwrap();
            Weight {
                ty,
                at: at(&b),
                _plain: Some(b),
                split: None,
            }
        }
        Some(p) => {
            let base = DeviceBuffer::reserve_addresses(data.len());
            peer::add_range(base, data.len() as u64);
            let st = SplitTensor::new(base, ty.nb[1], n, devs, p, main).unwrap();
            let st = peer::add_tensor(st);
            st.write(0, &data).unwrap();
            let mut back = vec![0u8; data.len()];
            st.read(0, &mut back).unwrap();
            assert_eq!(back, data, "split set/get round trip");
            Weight {
                ty,
                at: MemRef {
                    buffer: base,
                    offset: 0,
                },
                _plain: None,
                split: Some(st),
            }
        }
    }
}

/// One MUL_MAT of weight `w` and `cols` columns of activations on `dev`.
fn matmul(dev: &Arc<Device>, w: &Weight, cols: i64, seed: u64) -> Vec<u8> {
    let k = w.ty.ne[0];
    let n = w.ty.ne[1];
    let xt = TensorType::contiguous(F32, [k, cols, 1, 1]);
    let ot = TensorType::contiguous(F32, [n, cols, 1, 1]);
    let xb = DeviceBuffer::alloc(dev, (4 * k * cols) as usize).unwrap();
    xb.write(0, &f32_bytes(&values((k * cols) as usize, seed)))
        .unwrap();
    let ob = DeviceBuffer::alloc(dev, (4 * n * cols) as usize).unwrap();
    ob.fill(0, ob.size, 0x7f).unwrap();
    let mut g = Graph::default();
    let x = param(&mut g, "x", xt, at(&xb));
    let wv = param(&mut g, "w", w.ty.clone(), w.at);
    let mm = g.add(
        Op::MulMat,
        vec![wv, x],
        vec![Output {
            ty: ot,
            place: Place::Bound(at(&ob)),
        }],
        "out",
    );
    g.results.push(Value::new(mm, 0));
    let plan = std::sync::Arc::new(Plan::build(&g, dev).unwrap());
    plan.run().unwrap();
    for d in devices().unwrap() {
        d.synchronize().unwrap();
    }
    let mut out = vec![0u8; ob.size];
    ob.read(0, &mut out).unwrap();
    drop(plan);
    DeviceBuffer::release(xb.base);
    DeviceBuffer::release(ob.base);
    out
}

fn points(a: f32, b: f32) -> Vec<f32> {
    let mut r = [0.0f32; 16];
    r[0] = a;
    r[1] = b;
    peer::split_points(Some(&r), 2).unwrap()
}

#[test]
fn row_split_matmuls_equal_one_device_bit_for_bit() {
    let Some(devs) = two_devices() else { return };
    let _s = SERIAL.lock();
    // 200 rows: shares are whole 16-row granules except the last (200 = 12.5 granules).
    let (k, n) = (256i64, 200i64);
    for (ti, wt) in [Q4_0, Q8_0, Q4K, Q6K, F16, F32].into_iter().enumerate() {
        for cols in [1i64, 5] {
            for main in 0..2 {
                let seed = 10 + ti as u64;
                let plain = weight(wt, k, n, seed, &devs, main, None);
                let want = matmul(&devs[main], &plain, cols, 99);
                for (a, b) in [(1.0, 1.0), (3.0, 1.0), (1.0, 3.0), (0.0, 1.0), (1.0, 0.0)] {
                    let p = points(a, b);
                    let w = weight(wt, k, n, seed, &devs, main, Some(&p));
                    let st = w.split.as_ref().unwrap();
                    let shares: Vec<i64> =
                        st.parts.iter().map(|p| p.rows.end - p.rows.start).collect();
                    assert_eq!(shares.iter().sum::<i64>(), n);
                    let got = matmul(&devs[main], &w, cols, 99);
                    assert!(
                        got == want,
                        "{} x {cols} columns, main POLYCL{main}, ratios {a}/{b} (rows {shares:?}): \
                         the split result differs from one device",
                        wt.name()
                    );
                }
            }
        }
    }
}

/// A decode step of an `layers`-layer llama block structure (attention
/// Q/K/V/O and FFN gate/up/down per layer, then the output matmul), every
/// matmul's weight Q4_0 (so every activation is Q8_1), optionally split
/// over two devices. Returns the results of every matmul and the counters
/// of one run.
fn llama_like_step(
    devs: &[Arc<Device>],
    layers: usize,
    split: Option<&[f32]>,
    cols: i64,
) -> (Vec<Vec<u8>>, counters::Snapshot) {
    let (e, ff, kv, vocab) = (256i64, 512i64, 128i64, 320i64);
    let main = &devs[0];
    let mut g = Graph::default();
    let mut keep = Vec::new();
    let mut weights = Vec::new();
    let mut outs = Vec::new();
    let mut seed = 1u64;
    let act = |g: &mut Graph, keep: &mut Vec<Arc<DeviceBuffer>>, k: i64, seed: u64| {
        let b = DeviceBuffer::alloc(main, (4 * k * cols) as usize).unwrap();
        b.write(0, &f32_bytes(&values((k * cols) as usize, seed)))
            .unwrap();
        let v = param(g, "x", TensorType::contiguous(F32, [k, cols, 1, 1]), at(&b));
        keep.push(b);
        v
    };
    let mm = |g: &mut Graph,
              keep: &mut Vec<Arc<DeviceBuffer>>,
              weights: &mut Vec<Weight>,
              x: Value,
              k: i64,
              n: i64,
              seed: u64| {
        let w = weight(Q4_0, k, n, seed, devs, 0, split);
        let wv = param(g, "w", w.ty.clone(), w.at);
        weights.push(w);
        let ob = DeviceBuffer::alloc(main, (4 * n * cols) as usize).unwrap();
        let id = g.add(
            Op::MulMat,
            vec![wv, x],
            vec![Output {
                ty: TensorType::contiguous(F32, [n, cols, 1, 1]),
                place: Place::Bound(at(&ob)),
            }],
            "mm",
        );
        g.results.push(Value::new(id, 0));
        keep.push(ob.clone());
        ob
    };
    for _ in 0..layers {
        let x = act(&mut g, &mut keep, e, seed);
        for n in [e, kv, kv] {
            seed += 1;
            outs.push(mm(&mut g, &mut keep, &mut weights, x, e, n, seed));
        }
        seed += 1;
        let o = act(&mut g, &mut keep, e, seed);
        outs.push(mm(&mut g, &mut keep, &mut weights, o, e, e, seed));
        seed += 1;
        let f = act(&mut g, &mut keep, e, seed);
        for _ in 0..2 {
            seed += 1;
            outs.push(mm(&mut g, &mut keep, &mut weights, f, e, ff, seed));
        }
        seed += 1;
        let d = act(&mut g, &mut keep, ff, seed);
        outs.push(mm(&mut g, &mut keep, &mut weights, d, ff, e, seed));
    }
    seed += 1;
    let x = act(&mut g, &mut keep, e, seed);
    outs.push(mm(&mut g, &mut keep, &mut weights, x, e, vocab, seed));
    let plan = std::sync::Arc::new(Plan::build(&g, main).unwrap());
    // Plan-time work (program builds) stays out of the counts.
    let before = counters::snapshot();
    plan.run().unwrap();
    let delta = counters::snapshot() - before;
    for d in devs {
        d.synchronize().unwrap();
    }
    let results = outs
        .iter()
        .map(|b| {
            let mut v = vec![0u8; b.size];
            b.read(0, &mut v).unwrap();
            v
        })
        .collect();
    drop(plan);
    for b in keep {
        DeviceBuffer::release(b.base);
    }
    drop(weights);
    (results, delta)
}

#[test]
fn q8_cache_hits_what_sibling_matmuls_imply_and_changes_no_bit() {
    let Some(devs) = two_devices() else { return };
    let _s = SERIAL.lock();
    let layers = 3u64;
    // Per layer Q, K, V share one quantization and gate, up another: 3 hits;
    // the 4 distinct activations per layer and the output's are misses.
    let (hits, misses) = (3 * layers, 4 * layers + 1);
    let p = points(1.0, 1.0);
    for split in [None, Some(p.as_slice())] {
        q8_cache::set_mode(Some(0));
        let (off, c_off) = llama_like_step(&devs, layers as usize, split, 1);
        q8_cache::set_mode(Some(1));
        let (on, c_on) = llama_like_step(&devs, layers as usize, split, 1);
        q8_cache::set_mode(None);
        assert!(
            off == on,
            "cache on and off differ (split: {})",
            split.is_some()
        );
        assert_eq!(
            (c_off.q8_hits, c_off.q8_misses),
            (0, 0),
            "cache off counts nothing"
        );
        assert_eq!((c_on.q8_hits, c_on.q8_misses), (hits, misses));
        // The executor ran exactly the quantize kernels the hits did not skip.
        assert_eq!(c_off.quantize, hits + misses);
        assert_eq!(c_on.quantize, misses);
        assert!(c_on.quantize < c_off.quantize);
        if split.is_some() {
            assert_eq!((c_on.peer_hits, c_on.peer_misses), (hits, misses));
            assert_eq!(c_off.peer_copies, hits + misses);
            assert_eq!(c_on.peer_copies, misses);
            assert!(c_on.peer_copies < c_off.peer_copies);
            // Every split matmul gathers one partial result either way.
            assert_eq!(c_on.gathers, c_off.gathers);
            assert_eq!(c_on.gathers, hits + misses);
        } else {
            assert_eq!(c_on.peer_copies + c_off.peer_copies, 0);
        }
    }
    // The cache applies to the decode shape only: two columns, no hits.
    q8_cache::set_mode(Some(1));
    let (_, c) = llama_like_step(&devs, 1, Some(&p), 2);
    q8_cache::set_mode(None);
    assert_eq!((c.q8_hits, c.q8_misses, c.peer_hits), (0, 0, 0));
    assert_eq!(c.quantize, 7 + 1);
}

#[test]
fn a_device_failing_mid_compute_is_an_error_and_nothing_hangs() {
    let Some(devs) = two_devices() else { return };
    let _s = SERIAL.lock();
    let p = points(1.0, 1.0);
    let w = weight(Q8_0, 256, 256, 7, &devs, 0, Some(&p));
    let plain = weight(Q8_0, 256, 256, 7, &devs, 0, None);
    let want = matmul(&devs[0], &plain, 1, 3);
    let mut failures = 0;
    for nth in 1..=6 {
        ggml_polycl::fault::arm_thread(&format!("queue@{nth}")).unwrap();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            // matmul() unwraps run(): a failed run panics here, after which
            // every queue must still drain.
            matmul(&devs[0], &w, 1, 3)
        }));
        ggml_polycl::fault::disarm_thread();
        if r.is_err() {
            failures += 1;
        }
        for d in &devs {
            d.synchronize()
                .expect("a queue drains after a failed compute");
        }
        assert!(
            matmul(&devs[0], &w, 1, 3) == want,
            "the next compute after a fault at transfer {nth} is right"
        );
    }
    assert!(failures > 0, "no injected fault hit the split matmul");
}

#[test]
fn bad_split_ratios_are_refused() {
    let Some(_) = two_devices() else { return };
    let ts = |v: &[f32]| {
        let mut r = [0.0f32; 16];
        r[..v.len()].copy_from_slice(v);
        r
    };
    // SAFETY (test): 16 floats each.
    unsafe {
        for bad in [
            ts(&[-1.0, 1.0]),
            ts(&[f32::NAN, 1.0]),
            ts(&[1.0, f32::INFINITY]),
            ts(&[1.0, 1.0, 1.0]),
        ] {
            assert!(split_buffer_type(0, bad.as_ptr()).is_null(), "{bad:?}");
        }
        assert!(split_buffer_type(2, ts(&[1.0, 1.0]).as_ptr()).is_null());
        assert!(split_buffer_type(-1, ts(&[1.0, 1.0]).as_ptr()).is_null());
        let a = split_buffer_type(0, ts(&[3.0, 1.0]).as_ptr());
        let b = split_buffer_type(0, ts(&[6.0, 2.0]).as_ptr());
        let c = split_buffer_type(1, ts(&[3.0, 1.0]).as_ptr());
        let d = split_buffer_type(0, ts(&[1.0, 1.0]).as_ptr());
        // All zero (llama without -ts) and NULL split evenly.
        let e = split_buffer_type(0, ts(&[]).as_ptr());
        let f = split_buffer_type(0, std::ptr::null());
        assert!(!a.is_null() && a == b, "same shares, same buffer type");
        assert!(a != c && a != d);
        assert!(d == e && e == f);
    }
}
