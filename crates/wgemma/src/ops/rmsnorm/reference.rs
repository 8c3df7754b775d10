//! CPU reference for Gemma 4 RMSNorm (HF `Gemma4RMSNorm`: f32, plain `w`, `eps` inside the
//! square root) and its fused residual form.

/// `y = x * in_scale / sqrt(mean((x * in_scale)^2) + eps) * w * out_scale` per row of `d`;
/// `w = 1` when `weight` is `None`. The sum of squares is accumulated in f64.
pub fn rmsnorm_ref(
    x: &[f32],
    d: usize,
    weight: Option<&[f32]>,
    eps: f32,
    in_scale: f32,
    out_scale: f32,
) -> Vec<f32> {
    let mut y = Vec::with_capacity(x.len());
    for row in x.chunks(d) {
        let sum: f64 = row
            .iter()
            .map(|&v| {
                let v = (v * in_scale) as f64;
                v * v
            })
            .sum();
        let inv = 1.0 / ((sum / d as f64) as f32 + eps).sqrt();
        for (k, &v) in row.iter().enumerate() {
            let w = weight.map_or(1.0, |w| w[k]);
            y.push(v * in_scale * inv * w * out_scale);
        }
    }
    y
}

/// `out = (residual + rmsnorm(x * in_scale) * w) * out_scale`: the post-norm + residual add
/// of a Gemma 4 block, with `out_scale` = the layer's `layer_scalar` (HF multiplies the sum)
/// or `2^-0.5` for the per-layer-input combine.
pub fn rmsnorm_add_ref(
    x: &[f32],
    d: usize,
    weight: Option<&[f32]>,
    residual: &[f32],
    eps: f32,
    in_scale: f32,
    out_scale: f32,
) -> Vec<f32> {
    rmsnorm_ref(x, d, weight, eps, in_scale, 1.0)
        .iter()
        .zip(residual)
        .map(|(n, r)| (r + n) * out_scale)
        .collect()
}
