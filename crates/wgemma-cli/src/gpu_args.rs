//! The GPU option every command shares (`--activations`, a global flag): the precision the
//! Q4 matvecs run their activations at, set once before any context opens; and the context
//! the commands that run a model open, with a warning on a software adapter.

use anyhow::Result;
use std::sync::OnceLock;
use wgemma::gpu::{ActivationChoice, ContextOptions, GpuContext};

static ACTIVATIONS: OnceLock<ActivationChoice> = OnceLock::new();

/// Records `--activations` (the first call wins: main calls it once).
pub fn set_activations(choice: ActivationChoice) {
    let _ = ACTIVATIONS.set(choice);
}

/// The context options of every command: the defaults with `--activations`.
pub fn context_options() -> ContextOptions {
    ContextOptions {
        activations: ACTIVATIONS.get().copied().unwrap_or_default(),
        ..ContextOptions::default()
    }
}

/// The context a command runs a model on. A software adapter (lavapipe, the CPU standing
/// in for a GPU where no GPU driver is found) runs everything many times slower than a
/// GPU: one line on stderr says so, so its speeds are not taken for a GPU's.
pub fn open_context(options: ContextOptions) -> Result<GpuContext> {
    let ctx = GpuContext::new_blocking(options)?;
    if ctx.info.device_type == wgpu::DeviceType::Cpu {
        eprintln!(
            "warning: {} is a software adapter (the CPU emulating a GPU): speeds are far \
             below a GPU's (README.md, Troubleshooting)",
            ctx.info.name
        );
    }
    Ok(ctx)
}
