//! Every `extern "C"` function polycl defines (the ggml vtables and entry
//! points, polycl.h) runs its body through the one boundary: `guard`, `api`
//! or `void_entry` (all in capi/boundary.rs, capi/mod.rs, backend/mod.rs),
//! which catch panics and turn failures into statuses. This reads the
//! sources, so a new entry without the boundary fails here by name; the
//! forced-panic tests (reliability_capi.rs, ctest/reliability) prove the
//! boundary itself.

use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The first statement of the body that starts at `text[open]` (`{`),
/// skipping comments and `static` items.
fn first_statement(text: &str, open: usize) -> String {
    let mut rest = &text[open + 1..];
    loop {
        rest = rest.trim_start();
        if rest.starts_with("//") {
            rest = rest.split_once('\n').map_or("", |x| x.1);
        } else if rest.starts_with("static ") {
            rest = rest.split_once(';').map_or("", |x| x.1);
        } else {
            return rest.chars().take(60).collect();
        }
    }
}

#[test]
fn every_extern_c_function_runs_inside_the_boundary() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    let boundaries = [
        "guard(",
        "api(",
        "void_entry(",
        "super::void_entry(",
        "boundary::guard(",
        "super::boundary::guard(",
        "crate::capi::boundary::guard(",
    ];
    let mut found = 0;
    let mut missing = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        let mut from = 0;
        while let Some(i) = text[from..].find("extern \"C\" fn ") {
            let at = from + i;
            from = at + 1;
            // Definitions only: not fn pointer types (`= unsafe extern "C" fn(`,
            // `Option<unsafe extern "C" fn(`).
            let after = &text[at + "extern \"C\" fn ".len()..];
            let name: String = after
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if name.is_empty() {
                continue;
            }
            // The body: the first `{` after the signature's closing `)`.
            let sig_end = at + after.find(')').unwrap();
            let Some(open) = text[sig_end..].find('{').map(|o| sig_end + o) else {
                continue;
            };
            if text[sig_end..open].contains(';') {
                continue; // a declaration in an extern block
            }
            found += 1;
            let first = first_statement(&text, open);
            if !boundaries.iter().any(|b| first.starts_with(b)) {
                missing.push(format!(
                    "{}: {name} starts with `{first}`",
                    f.strip_prefix(&root).unwrap().display()
                ));
            }
        }
    }
    eprintln!("extern \"C\" functions checked: {found}");
    assert!(found > 60, "only {found} extern \"C\" functions found");
    assert!(
        missing.is_empty(),
        "outside the boundary:\n{}",
        missing.join("\n")
    );
}
