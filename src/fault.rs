//! Fault injection for tests: `POLYCL_FAULT` (read once by `config`) or
//! `arm_thread` (Rust tests) makes one chosen event fail, so the tests can
//! prove that every failure path ends in a status and that polycl recovers.
//!
//! A spec is a comma list of faults, each `KIND[:ENTRY][@N]`:
//!
//! | fault | effect |
//! |---|---|
//! | `panic:ENTRY` | the FFI entry whose boundary label is ENTRY (or ends with ` ENTRY`) panics inside its boundary; `panic:*` matches any entry |
//! | `alloc` | a device allocation (ggml buffer, plan scratch, weights, state) is refused as out of memory |
//! | `build` | fetching a kernel program fails as a build failure (cached or not) |
//! | `queue` | a queue operation (kernel enqueue, peer transfer) fails with CL_OUT_OF_RESOURCES (`queue@5`: the fifth, i.e. mid-graph) |
//! | `handoff` | a chain's first launch is not enqueued (`handoff@5`: in the fifth run of a plan with chains), so the launch after it waits for arrivals that never come and gives up, as a wait on a launch that found no places does (runtime/handoff.rs) |
//!
//! Each fault fires once, on the N-th matching event (default 1), then is
//! spent; later events run normally, which is what lets a test check that
//! the next compute works.

use crate::error::{Error, Result};
use parking_lot::Mutex;
use std::cell::RefCell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Kind {
    Panic(String),
    Alloc,
    Build,
    Queue,
    Handoff,
}

/// One armed fault: fires when `skip` matching events have gone by.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fault {
    pub kind: Kind,
    pub skip: u32,
}

/// Parses a `POLYCL_FAULT` value; the error says what is wrong with it.
pub fn parse(spec: &str) -> std::result::Result<Vec<Fault>, String> {
    let mut out = Vec::new();
    for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (body, nth) = match item.split_once('@') {
            Some((b, n)) => match n.trim().parse::<u32>() {
                Ok(n) if n >= 1 => (b.trim(), n),
                _ => return Err(format!("'{item}': @N needs a positive integer")),
            },
            None => (item, 1),
        };
        let kind = match body.split_once(':') {
            Some(("panic", entry)) if !entry.trim().is_empty() => {
                Kind::Panic(entry.trim().to_string())
            }
            None if body == "alloc" => Kind::Alloc,
            None if body == "build" => Kind::Build,
            None if body == "queue" => Kind::Queue,
            None if body == "handoff" => Kind::Handoff,
            _ => {
                return Err(format!(
                    "'{item}': expected panic:ENTRY, alloc, build, queue or handoff (each optionally @N)"
                ))
            }
        };
        out.push(Fault {
            kind,
            skip: nth - 1,
        });
    }
    if out.is_empty() {
        return Err("names no fault".into());
    }
    Ok(out)
}

/// Faults armed anywhere (process or any thread): the fast path of every
/// hook is one relaxed load while nothing is armed.
static ARMED: AtomicUsize = AtomicUsize::new(0);

fn process_faults() -> &'static Mutex<Vec<Fault>> {
    static P: OnceLock<Mutex<Vec<Fault>>> = OnceLock::new();
    P.get_or_init(|| {
        let f = crate::config::get().faults.clone();
        ARMED.fetch_add(f.len(), Ordering::Relaxed);
        Mutex::new(f)
    })
}

thread_local! {
    static THREAD: RefCell<Vec<Fault>> = const { RefCell::new(Vec::new()) };
}

/// Arms `spec` for events on the calling thread only, so tests running in
/// parallel threads of one process do not see each other's faults.
pub fn arm_thread(spec: &str) -> Result<()> {
    let f = parse(spec).map_err(|e| Error::Config(format!("fault spec {spec:?}: {e}")))?;
    ARMED.fetch_add(f.len(), Ordering::Relaxed);
    THREAD.with(|t| t.borrow_mut().extend(f));
    Ok(())
}

/// Drops the calling thread's unspent faults; returns how many there were.
pub fn disarm_thread() -> usize {
    let n = THREAD.with(|t| std::mem::take(&mut *t.borrow_mut()).len());
    ARMED.fetch_sub(n, Ordering::Relaxed);
    n
}

fn take_from(list: &mut Vec<Fault>, matches: &dyn Fn(&Kind) -> bool) -> bool {
    let Some(i) = list.iter().position(|f| matches(&f.kind)) else {
        return false;
    };
    if list[i].skip > 0 {
        list[i].skip -= 1;
        return false;
    }
    list.remove(i);
    ARMED.fetch_sub(1, Ordering::Relaxed);
    true
}

fn fires(matches: &dyn Fn(&Kind) -> bool) -> bool {
    // The process list is made on first use, so read it before the fast path.
    let process = process_faults();
    if ARMED.load(Ordering::Relaxed) == 0 {
        return false;
    }
    // try_with: a hook reached while the thread is being torn down sees no
    // thread faults instead of panicking.
    if THREAD
        .try_with(|t| take_from(&mut t.borrow_mut(), matches))
        .unwrap_or(false)
    {
        return true;
    }
    take_from(&mut process.lock(), matches)
}

fn entry_matches(pattern: &str, label: &str) -> bool {
    pattern == "*" || pattern == label || label.rsplit(' ').next() == Some(pattern)
}

/// Called inside every FFI boundary (`guard`, `api`) with the entry's label.
pub fn panic_point(label: &str) {
    if fires(&|k| matches!(k, Kind::Panic(p) if entry_matches(p, label))) {
        panic!("POLYCL_FAULT: injected panic in {label}");
    }
}

/// Whether the next device allocation must be refused.
pub fn alloc() -> bool {
    fires(&|k| *k == Kind::Alloc)
}

/// Whether the next program fetch must fail as a build failure.
pub fn build() -> bool {
    fires(&|k| *k == Kind::Build)
}

/// Whether the next queue operation (kernel enqueue, peer transfer) must fail.
pub fn queue() -> bool {
    fires(&|k| *k == Kind::Queue)
}

/// Whether the next run of a plan with chains must leave out its first
/// chained launch.
pub fn handoff() -> bool {
    fires(&|k| *k == Kind::Handoff)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_or_say_why_not() {
        assert_eq!(
            parse("panic:graph_compute, queue@3,alloc,handoff@2").unwrap(),
            vec![
                Fault {
                    kind: Kind::Panic("graph_compute".into()),
                    skip: 0
                },
                Fault {
                    kind: Kind::Queue,
                    skip: 2
                },
                Fault {
                    kind: Kind::Alloc,
                    skip: 0
                },
                Fault {
                    kind: Kind::Handoff,
                    skip: 1
                },
            ]
        );
        for bad in [
            "",
            "panic",
            "panic:",
            "queue@0",
            "handoff:x",
            "queue@x",
            "melt",
            "alloc:3",
        ] {
            assert!(parse(bad).is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn thread_faults_fire_once_on_the_nth_event() {
        arm_thread("build@2").unwrap();
        assert!(!build());
        assert!(build());
        assert!(!build());
        assert_eq!(disarm_thread(), 0);
        arm_thread("panic:free").unwrap();
        assert!(std::panic::catch_unwind(|| panic_point("backend free")).is_err());
        panic_point("backend free");
        arm_thread("panic:*,queue").unwrap();
        assert!(std::panic::catch_unwind(|| panic_point("polycl_version")).is_err());
        assert_eq!(disarm_thread(), 1);
        assert!(!queue());
    }
}
