//! CPU references for RoPE, following HF `modeling_rope_utils.py` and
//! `modeling_gemma4.apply_rotary_pos_emb` in f32, as torch computes them.

use super::RopeConfig;

/// HF's `inv_freq` [head_dim / 2], in f32 as torch computes it:
/// `1.0 / (base ** (arange(0, 2n, 2).float() / head_dim))`.
/// - `Default`: n = head_dim / 2 (every pair rotates).
/// - `Proportional` (`_compute_proportional_rope_parameters`): n = int(partial_rotary_factor *
///   head_dim // 2) rotated pairs whose exponents are still over the WHOLE head_dim, then
///   head_dim / 2 - n zeros (those pairs get cos 1, sin 0: they pass through). For Gemma 4
///   full layers (512, 0.25, 1e6): pairs 0..64 rotate, i.e. dims 0..64 and 256..320.
pub fn rope_inv_freq(config: &RopeConfig) -> Vec<f32> {
    let half = config.head_dim / 2;
    let rotated = config.rotated_pairs();
    let base = config.theta as f32;
    let dim = config.head_dim as f32;
    (0..half)
        .map(|i| {
            if i < rotated {
                let exponent = (2 * i) as f32 / dim;
                1.0f32 / base.powf(exponent)
            } else {
                0.0
            }
        })
        .collect()
}

/// HF's cos/sin for one position: the f32 angle `f32(pos) * inv_freq[i]`, then an accurate
/// f32 cos/sin of that angle (torch's CPU cos/sin are within an ulp of correctly rounded).
pub fn rope_cos_sin_ref(position: u32, inv_freq: &[f32]) -> (Vec<f32>, Vec<f32>) {
    inv_freq
        .iter()
        .map(|&f| {
            let angle = position as f32 * f;
            ((angle as f64).cos() as f32, (angle as f64).sin() as f32)
        })
        .unzip()
}

/// `x * cos + rotate_half(x) * sin` on `x` [rows, heads, head_dim] with `positions` [rows].
pub fn rope_ref(
    x: &[f32],
    rows: usize,
    heads: usize,
    config: &RopeConfig,
    positions: &[u32],
) -> Vec<f32> {
    let d = config.head_dim;
    let half = d / 2;
    let inv_freq = rope_inv_freq(config);
    let mut out = x.to_vec();
    for (r, &position) in positions.iter().enumerate().take(rows) {
        let (cos, sin) = rope_cos_sin_ref(position, &inv_freq);
        for h in 0..heads {
            let base = (r * heads + h) * d;
            for i in 0..half {
                let (a, b) = (x[base + i], x[base + i + half]);
                out[base + i] = a * cos[i] - b * sin[i];
                out[base + i + half] = b * cos[i] + a * sin[i];
            }
        }
    }
    out
}
