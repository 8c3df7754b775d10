//! CPU reference for the GPU Q4 quantiser: the raw source decoded to f32 (exact for all three
//! dtypes), then the CPU quantiser [`quantize_q4`] itself, which stays the definition of
//! the format.

use super::SourceDtype;
use crate::error::Result;
use crate::ops::linear::{quantize_q4, Q4Host};

/// Decodes little-endian `bytes` of `dtype` to f32 (bf16 and f16 widen exactly).
pub fn source_to_f32(bytes: &[u8], dtype: SourceDtype) -> Vec<f32> {
    match dtype {
        SourceDtype::F32 => bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect(),
        SourceDtype::F16 => bytes
            .chunks_exact(2)
            .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32())
            .collect(),
        SourceDtype::BF16 => bytes
            .chunks_exact(2)
            .map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f32())
            .collect(),
    }
}

/// What [`super::q4_quantize`] must write for the `[n, k]` weight in `bytes`.
pub fn q4_quantize_ref(
    bytes: &[u8],
    dtype: SourceDtype,
    n: usize,
    k: usize,
    group: usize,
) -> Result<Q4Host> {
    quantize_q4(&source_to_f32(bytes, dtype), n, k, group)
}
