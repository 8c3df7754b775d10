//! CPU reference for logit soft-capping.

/// `cap * tanh(x / cap)` in f32, in HF's order (divide, tanh, multiply).
pub fn softcap_ref(x: &[f32], cap: f32) -> Vec<f32> {
    x.iter().map(|&v| (v / cap).tanh() * cap).collect()
}
