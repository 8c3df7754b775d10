//! CPU references for the embedding gather.

use half::f16;

/// One Q4 row: `words` `[dim/8]`, `scales` `[dim/group]`; value `(nibble - 8) * scale`.
pub fn dequant_q4_row(words: &[u32], scales: &[f16], group: usize) -> Vec<f32> {
    (0..words.len() * 8)
        .map(|k| {
            let nib = (words[k / 8] >> (4 * (k % 8))) & 15;
            (nib as f32 - 8.0) * scales[k / group].to_f32()
        })
        .collect()
}

/// `out[t] = row(ids[t]) * scale` for ids below `vocab`, zeros for the others (the GPU
/// rule for out-of-range ids). `row` returns one dequantised row of `dim` values.
pub fn gather_ref(
    vocab: usize,
    dim: usize,
    ids: &[u32],
    scale: f32,
    row: impl Fn(usize) -> Vec<f32>,
) -> Vec<f32> {
    ids.iter()
        .flat_map(|&id| {
            if (id as usize) < vocab {
                row(id as usize).into_iter().map(|v| v * scale).collect()
            } else {
                vec![0.0; dim]
            }
        })
        .collect()
}

/// HF's `embed_scale.to(weight.dtype)` for a bf16 checkpoint: `dim ** 0.5` (f64), held as
/// an f32 tensor, then cast to bf16 (round to nearest even). sqrt(1536) = 39.19 -> 39.25,
/// sqrt(3072) = 55.43 -> 55.5, sqrt(256) = 16 exactly.
pub fn bf16_embed_scale(dim: usize) -> f32 {
    half::bf16::from_f32((dim as f64).sqrt() as f32).to_f32()
}
