//! Threads: requests on two devices computing from two threads at once,
//! many threads sharing one compiled model and device queue, and the
//! program cache hit from many threads, all give the single-threaded
//! (host reference) results. `POLYCL_THREAD_RUNS` repeats each (CI: many).
//! With one OpenCL device both threads share it; scripts/test-reliability.sh
//! runs this file with POCL_DEVICES="pthread pthread" for two.

mod reliability_common;
use ggml_polycl::runtime::{devices, program};
use reliability_common::*;
use std::sync::{Arc, Barrier};

fn runs() -> usize {
    std::env::var("POLYCL_THREAD_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2)
}

struct SharedCompiled(Compiled);
// SAFETY: a compiled model is immutable once made and polycl.h allows
// requests on it from several threads; only the requests are per thread.
unsafe impl Send for SharedCompiled {}
// SAFETY: as above.
unsafe impl Sync for SharedCompiled {}

/// `threads` threads, thread t on device slot t % slots, each running
/// `steps` decode steps on its own request; every result must equal the
/// host reference.
fn run_threads(compiled: &Arc<SharedCompiled>, slots: usize, threads: usize, steps: usize) {
    let reference = Arc::new(reference_steps(steps));
    let barrier = Arc::new(Barrier::new(threads));
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let (c, refs, bar) = (compiled.clone(), reference.clone(), barrier.clone());
            std::thread::spawn(move || {
                let r = request(&c.0, t % slots).expect("request");
                let mut k = vec![0u8; (C * ROWS * 4) as usize];
                bar.wait();
                for (step, want) in refs.iter().enumerate() {
                    let p = run_step(&r, step, &mut k).expect("infer");
                    assert!(close(&p, want), "thread {t} step {step}: {p:?} vs {want:?}");
                }
            })
        })
        .collect();
    for h in handles {
        h.join().expect("a thread failed");
    }
}

#[test]
fn two_devices_from_two_threads_at_once() {
    let n = devices().map(|d| d.len()).unwrap_or(0);
    assert!(n > 0, "no OpenCL device");
    let list: Vec<i32> = if n >= 2 { vec![0, 1] } else { vec![0] };
    eprintln!("threads on devices {list:?}, {} runs", runs());
    for _ in 0..runs() {
        let mut g = decode_step();
        let m = g.convert().unwrap();
        let c = Arc::new(SharedCompiled(compile(&m, &list).expect("compile")));
        run_threads(&c, list.len(), 2, 40);
    }
}

#[test]
fn many_threads_share_one_compiled_model_and_queue() {
    for _ in 0..runs() {
        let mut g = decode_step();
        let m = g.convert().unwrap();
        let c = Arc::new(SharedCompiled(compile(&m, &[0]).expect("compile")));
        run_threads(&c, 1, 6, 24);
    }
}

#[test]
fn the_program_cache_from_many_threads_gives_one_program_per_device() {
    for d in devices().expect("no OpenCL device") {
        let barrier = Arc::new(Barrier::new(8));
        let handles: Vec<_> = (0..8)
            .map(|t| {
                let (d, bar) = (d.clone(), barrier.clone());
                std::thread::spawn(move || {
                    bar.wait();
                    // Each thread walks the programs from a different start.
                    let names: Vec<&'static str> =
                        program::PROGRAMS.iter().map(|(n, _)| *n).collect();
                    let k = names.len();
                    (0..k)
                        .map(|i| {
                            let name = names[(i + t) % k];
                            let p = program::program(&d, name).expect("program");
                            (name, Arc::as_ptr(&p) as usize)
                        })
                        .collect::<std::collections::HashMap<_, _>>()
                })
            })
            .collect();
        let maps: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        for (name, p) in &maps[0] {
            // Built at most a few times concurrently, but one program is kept
            // and every later fetch gets it.
            let kept = program::program(d, name).unwrap();
            assert_eq!(Arc::as_ptr(&kept) as usize, *p, "{}: {name}", d.name);
            for m in &maps[1..] {
                assert_eq!(m[name], *p, "{}: {name} differs between threads", d.name);
            }
        }
    }
}
