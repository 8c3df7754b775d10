//! CPU reference for attention (HF `eager_attention_forward` with scale 1.0, GQA, causal and
//! sliding-window masks), accumulated in f64, over the logical key/value history (independent
//! of the cache layout: ring, chunks, K = V).

use crate::ops::rope::{rope_ref, RopeConfig};

/// Keys and values of positions `first..first + n`, each [n, kv_heads, D].
pub struct KvHistory<'a> {
    pub first: usize,
    pub k: &'a [f32],
    pub v: &'a [f32],
}

/// out [rows, heads, D]: for row r at `positions[r]` and head h (kv head h / (heads /
/// kv_heads)), softmax over the visible keys k (p - W < k <= p, or 0 <= k <= p) of q . k,
/// times V. Panics if a visible key is missing from `history` (a test bug, not user input).
pub fn attention_ref(
    q: &[f32],
    positions: &[u32],
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    window: Option<usize>,
    history: &KvHistory<'_>,
) -> Vec<f32> {
    let d = head_dim;
    let group = heads / kv_heads;
    let mut out = vec![0f32; positions.len() * heads * d];
    for (r, &p) in positions.iter().enumerate() {
        let p = p as usize;
        let lo = window.map_or(0, |w| (p + 1).saturating_sub(w));
        assert!(
            lo >= history.first,
            "reference history starts after key {lo}"
        );
        for h in 0..heads {
            let kvh = h / group;
            let qv = &q[(r * heads + h) * d..][..d];
            let row = |t: &[f32], key: usize| -> Vec<f64> {
                t[((key - history.first) * kv_heads + kvh) * d..][..d]
                    .iter()
                    .map(|&x| x as f64)
                    .collect()
            };
            let scores: Vec<f64> = (lo..=p)
                .map(|key| {
                    row(history.k, key)
                        .iter()
                        .zip(qv)
                        .map(|(k, &q)| k * q as f64)
                        .sum()
                })
                .collect();
            let max = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let weights: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
            let total: f64 = weights.iter().sum();
            let mut acc = vec![0f64; d];
            for (key, w) in (lo..=p).zip(&weights) {
                for (a, v) in acc.iter_mut().zip(row(history.v, key)) {
                    *a += w * v;
                }
            }
            for (o, a) in out[(r * heads + h) * d..][..d].iter_mut().zip(acc) {
                *o = (a / total) as f32;
            }
        }
    }
    out
}

/// Keys of a K = V layer as HF computes them in f32: rope(k_norm_weight * V, position), where
/// V = v_norm(k_proj x) is what the cache holds. `v` [n, kv_heads, D] for positions first...
pub fn keys_from_values(
    v: &[f32],
    first: usize,
    kv_heads: usize,
    k_norm_weight: &[f32],
    rope: &RopeConfig,
) -> Vec<f32> {
    let d = rope.head_dim;
    let n = v.len() / (kv_heads * d);
    let scaled: Vec<f32> = v
        .chunks(d)
        .flat_map(|row| row.iter().zip(k_norm_weight).map(|(x, w)| x * w))
        .collect();
    let positions: Vec<u32> = (first..first + n).map(|p| p as u32).collect();
    rope_ref(&scaled, n, kv_heads, rope, &positions)
}
