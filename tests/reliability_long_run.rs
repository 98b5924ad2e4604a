//! Long run: 2,000 decode steps through the C API (convert, compile, infer)
//! keep polycl's device memory and plan counts flat, and the process's
//! resident memory bounded: a leak of one buffer, plan or host allocation
//! per step would show.

mod reliability_common;
use ggml_polycl::capi::{polycl_memory_stats, PolyclMemoryStats, PolyclStatus};
use reliability_common::*;

fn stats() -> PolyclMemoryStats {
    let mut s = PolyclMemoryStats::default();
    assert_eq!(polycl_memory_stats(&mut s), PolyclStatus::Ok);
    s
}

/// Resident set size in KiB (Linux /proc), for the host-memory bound.
fn rss_kib() -> usize {
    let s = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: usize = s
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    pages * 4
}

#[test]
fn two_thousand_decode_steps_keep_memory_flat() {
    let steps: usize = std::env::var("POLYCL_LONG_RUN_STEPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000);
    let before = stats();
    let mut g = decode_step();
    let model = g.convert().expect("convert");
    let compiled = compile(&model, &[0]).expect("compile");
    let req = request(&compiled, 0).expect("request");
    let reference = reference_steps(64);
    let mut cache = vec![0u8; (C * ROWS * 4) as usize];
    let warmup = 100.min(steps / 2);
    let mut at_warmup = (stats(), 0usize);
    let mut peak = (stats(), rss_kib());
    for step in 0..steps {
        let probs = run_step(&req, step, &mut cache).expect("infer");
        if let Some(want) = reference.get(step) {
            assert!(close(&probs, want), "step {step}: {probs:?} vs {want:?}");
        }
        let s = stats();
        let rss = rss_kib();
        peak.0.device_buffers = peak.0.device_buffers.max(s.device_buffers);
        peak.0.device_bytes = peak.0.device_bytes.max(s.device_bytes);
        peak.0.plans = peak.0.plans.max(s.plans);
        peak.1 = peak.1.max(rss);
        if step == warmup {
            at_warmup = (s, rss);
        } else if step > warmup {
            assert_eq!(s, at_warmup.0, "step {step}: device memory or plans moved");
        }
    }
    let end_rss = rss_kib();
    eprintln!(
        "long run: {steps} steps; device buffers {}, bytes {}, plans {} (peak {:?}); rss {} KiB after warm-up, {} KiB at the end, peak {} KiB",
        at_warmup.0.device_buffers, at_warmup.0.device_bytes, at_warmup.0.plans, peak.0, at_warmup.1, end_rss, peak.1
    );
    // Host memory: bounded growth after warm-up (allocator noise only).
    assert!(
        end_rss <= at_warmup.1 + 8 * 1024,
        "resident memory grew from {} KiB to {end_rss} KiB",
        at_warmup.1
    );
    drop(req);
    drop(compiled);
    drop(model);
    assert_eq!(
        stats(),
        before,
        "freeing everything returns every buffer and plan"
    );
}
