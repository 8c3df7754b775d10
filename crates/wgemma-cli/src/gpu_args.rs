//! The GPU option every command shares (`--activations`, a global flag): the precision the
//! Q4 matvecs run their activations at, set once before any context opens.

use std::sync::OnceLock;
use wgemma::gpu::{ActivationChoice, ContextOptions};

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
