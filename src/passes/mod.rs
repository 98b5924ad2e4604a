//! Graph rewrites, run in order: caller-registered extensions first, then the
//! built-in `lower_set_rows_stateless`, which lowers every `SetRows` left.

pub mod extension;
pub mod fuse;
pub mod lower_set_rows_stateless;
pub mod make_stateful;

use crate::error::Result;
use crate::ir::{verify::verify, Graph};

pub trait Pass {
    fn name(&self) -> &str;
    fn run(&mut self, g: &mut Graph) -> Result<()>;
}

/// Runs `extensions` in registration order, then the built-in lowering, and
/// verifies the result after each pass.
pub fn run_pipeline(g: &mut Graph, extensions: &mut [Box<dyn Pass>]) -> Result<()> {
    for p in extensions.iter_mut() {
        p.run(g)?;
        verify(g)?;
    }
    lower_set_rows_stateless::LowerSetRowsStateless.run(g)?;
    verify(g)
}
