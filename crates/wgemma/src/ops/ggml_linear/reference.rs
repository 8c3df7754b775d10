//! CPU reference: each weight row dequantised exactly as ggml does
//! ([`super::blocks::dequantize`], bit-exact against the `gguf` package), then the
//! dense reference ([`crate::ops::linear::linear_ref`]: f64 sums, with the magnitude its
//! tolerance is stated against). Row by row, so a 262144-row lm_head never exists in f32.

use super::blocks::{dequantize, GgmlType};
use crate::error::Result;
use crate::ops::linear::int8::quantize_row_q8;
use crate::ops::linear::linear_ref;

/// `(y [m, n], magnitude)` for x `[m, k]` and the stored blocks `w` of `[n, k]` in `ty`.
pub fn ggml_linear_ref(
    x: &[f32],
    m: usize,
    k: usize,
    ty: GgmlType,
    w: &[u8],
    n: usize,
) -> Result<(Vec<f32>, f64)> {
    let row_bytes = ty.bytes_of(k);
    let mut y = vec![0.0f32; m * n];
    let mut bound = 0.0f64;
    let mut row = vec![0.0f32; k];
    for (nn, bytes) in w.chunks_exact(row_bytes).take(n).enumerate() {
        dequantize(ty, bytes, &mut row)?;
        let (yr, b) = linear_ref(x, m, k, &row, 1);
        for (mi, v) in yr.into_iter().enumerate() {
            y[mi * n + nn] = v;
        }
        bound = bound.max(b);
    }
    Ok((y, bound))
}

/// Reference of the int8 matvec route ([`super::GgmlRoute::MatvecInt8`]): each activation
/// row quantised per block of 32 as the kernel does
/// ([`crate::ops::linear::int8::quantize_row_q8`]), then [`ggml_linear_ref`]. The kernel's
/// integer sums are exact, so against it the kernel differs only by its f32 scale products
/// and accumulation.
pub fn ggml_q8q8_linear_ref(
    x: &[f32],
    m: usize,
    k: usize,
    ty: GgmlType,
    w: &[u8],
    n: usize,
) -> Result<(Vec<f32>, f64)> {
    let x8: Vec<f32> = x.chunks(k).flat_map(quantize_row_q8).collect();
    ggml_linear_ref(&x8, m, k, ty, w, n)
}
