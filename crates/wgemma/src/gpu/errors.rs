//! The errors a device reports on its own (validation, out of memory), collected. In the
//! browser they arrive asynchronously and otherwise only as console warnings, while the
//! failed work is silently skipped and readbacks return stale bytes: a caller checks the
//! collection after each step it reads back.

use super::GpuContext;
use crate::error::{Error, Result};
use std::sync::{Arc, Mutex};

/// The errors `ctx`'s device reported since [`GpuErrors::collect`] (clones share them).
#[derive(Clone)]
pub struct GpuErrors(Arc<Mutex<Vec<String>>>);

impl GpuErrors {
    /// Collects every error `ctx`'s device reports from now on.
    pub fn collect(ctx: &GpuContext) -> GpuErrors {
        let errors = GpuErrors(Arc::new(Mutex::new(Vec::new())));
        let sink = errors.0.clone();
        ctx.device
            .on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
                sink.lock()
                    .expect("GPU error list poisoned")
                    .push(e.to_string());
            }));
        errors
    }

    /// Whether any error has been reported (and not yet taken by [`GpuErrors::check`]).
    pub fn any(&self) -> bool {
        !self.0.lock().expect("GPU error list poisoned").is_empty()
    }

    /// Fails with the first error reported, if any (and forgets them all).
    pub fn check(&self) -> Result<()> {
        let errors = std::mem::take(&mut *self.0.lock().expect("GPU error list poisoned"));
        match errors.first() {
            None => Ok(()),
            Some(first) => Err(Error::Gpu(format!(
                "the device reported {} error(s); the output cannot be trusted. First: {first}",
                errors.len()
            ))),
        }
    }
}
