//! Device faults through the C API, injected on the test's own thread
//! (`fault::arm_thread`, the runtime twin of POLYCL_FAULT): a refused
//! allocation, a kernel build failure and a queue error in the middle of a
//! graph each give their status and message, and the next infer (same
//! request, and a fresh one) works and gives the right numbers.

mod reliability_common;
use ggml_polycl::capi::PolyclStatus;
use ggml_polycl::fault;
use reliability_common::*;

fn fresh() -> (Model, Compiled, Request) {
    let mut g = decode_step();
    let m = g.convert().expect("convert");
    let c = compile(&m, &[0]).expect("compile");
    let r = request(&c, 0).expect("request");
    (m, c, r)
}

fn cache() -> Vec<u8> {
    vec![0u8; (C * ROWS * 4) as usize]
}

/// A fresh request computes the first steps right after a fault.
fn works_again() {
    let (_m, _c, r) = fresh();
    let reference = reference_steps(3);
    let mut k = cache();
    for (step, want) in reference.iter().enumerate() {
        let p = run_step(&r, step, &mut k).expect("infer after the fault");
        assert!(close(&p, want), "step {step}: {p:?} vs {want:?}");
    }
}

#[test]
fn refused_device_allocations_are_out_of_memory() {
    let mut g = decode_step();
    let m = g.convert().unwrap();
    // Weights upload at compile.
    fault::arm_thread("alloc").unwrap();
    let (st, e) = compile(&m, &[0])
        .err()
        .expect("compile with a refused allocation");
    assert_eq!(fault::disarm_thread(), 0);
    assert_eq!(st, PolyclStatus::OutOfMemory, "{e}");
    assert!(e.contains("refused by POLYCL_FAULT=alloc"), "{e}");
    // Request memory, the second allocation of the run, at the first infer
    // or at request creation, whichever allocates.
    let c = compile(&m, &[0]).unwrap();
    fault::arm_thread("alloc").unwrap();
    let r = request(&c, 0);
    let failed = match &r {
        Err((st, e)) => Some((*st, e.clone())),
        Ok(r) => {
            let mut k = cache();
            run_step(r, 0, &mut k).err()
        }
    };
    let left = fault::disarm_thread();
    if left == 0 {
        let (st, e) = failed.expect("the refused allocation was not reported");
        assert_eq!(st, PolyclStatus::OutOfMemory, "{e}");
    }
    works_again();
}

#[test]
fn a_kernel_build_failure_is_a_device_error() {
    let (_m, _c, r) = fresh();
    fault::arm_thread("build").unwrap();
    let mut k = cache();
    let (st, e) = run_step(&r, 0, &mut k).expect_err("infer with a failed build");
    assert_eq!(fault::disarm_thread(), 0);
    assert_eq!(st, PolyclStatus::DeviceError, "{e}");
    assert!(
        e.contains("failed to build") && e.contains("POLYCL_FAULT=build"),
        "{e}"
    );
    // The same request recovers: the failed plan was not kept.
    let mut k = cache();
    let p = run_step(&r, 0, &mut k).expect("infer after a failed build");
    assert!(close(&p, &reference_steps(1)[0]));
    works_again();
}

#[test]
fn a_queue_error_mid_graph_is_a_device_error() {
    let (_m, _c, r) = fresh();
    let mut k = cache();
    run_step(&r, 0, &mut k).expect("warm-up step");
    // The third kernel of the step fails: two kernels ran, the rest did not.
    fault::arm_thread("queue@3").unwrap();
    let mut k2 = k.clone();
    let (st, e) = run_step(&r, 1, &mut k2).expect_err("infer with a queue error");
    assert_eq!(fault::disarm_thread(), 0);
    assert_eq!(st, PolyclStatus::DeviceError, "{e}");
    assert!(
        e.contains("clEnqueueNDRangeKernel") && e.contains("-5"),
        "{e}"
    );
    // Same request, same step again: right numbers.
    let p = run_step(&r, 1, &mut k).expect("infer after the queue error");
    assert!(close(&p, &reference_steps(2)[1]));
    works_again();
}

/// POLYCL_MEM_LIMIT_MB (read once, so in a child process): a model whose
/// weights exceed the budget is refused as out of memory, naming the switch.
#[test]
fn a_device_memory_budget_refuses_what_exceeds_it() {
    if std::env::var_os("RELIABILITY_CHILD").is_some() {
        let mut g = Graph::default();
        let x = g.input("x", F32, &[1024, 1]);
        let w = g.weight("w", F32, &[1024, 512], vec![0u8; 1024 * 512 * 4]);
        let y = g.node("MUL_MAT", &[], &[wt(w), inp(x)], "y", F32, &[512, 1]);
        g.output(nd(y));
        let m = g.convert().unwrap();
        let (st, e) = compile(&m, &[0])
            .err()
            .expect("2 MiB of weights under a 1 MiB limit");
        assert_eq!(st, PolyclStatus::OutOfMemory, "{e}");
        assert!(
            e.contains("POLYCL_MEM_LIMIT_MB allows 1048576 bytes"),
            "{e}"
        );
        // Within the budget, the same process still works.
        works_again();
        println!("child: refused as expected");
        return;
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "a_device_memory_budget_refuses_what_exceeds_it",
            "--nocapture",
        ])
        .env("RELIABILITY_CHILD", "1")
        .env("POLYCL_MEM_LIMIT_MB", "1")
        .output()
        .unwrap();
    let so = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && so.contains("child: refused as expected"),
        "{so}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
