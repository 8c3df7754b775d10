//! CPU reference for min_fill.

/// HF's mask value `min(src) - 1` (NaN if any element is NaN, like torch.min), repeated
/// `n_dst` times.
pub fn min_fill_ref(src: &[f32], n_dst: usize) -> Vec<f32> {
    let min = src.iter().fold(f32::INFINITY, |m, &v| {
        if m.is_nan() || v.is_nan() {
            f32::NAN
        } else {
            m.min(v)
        }
    });
    vec![min - 1.0; n_dst]
}
