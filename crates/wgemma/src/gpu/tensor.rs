//! GPU tensors. Each tensor owns its buffer, allocated once when a model or op case is
//! planned, never on the decode path. Activations are not sub-allocated from one big
//! buffer on purpose: wgpu tracks read/write usage per buffer, not per range, so two
//! tensors of one buffer could not be read and written by the same dispatch.
//!
//! This file holds what a tensor is (buffer, shape, dtype, views); creating one on the
//! device is in `allocate.rs`, so that the context can hold tensors (its shared scratch)
//! without a circle between the two.

use crate::error::{Error, Result};
use std::ops::Range;
use std::sync::Arc;

/// Element type of a tensor as the kernels see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    F32,
    /// IEEE half, two per u32 word; kernels read it with `unpack2x16float`, so it needs
    /// no `shader-f16` feature.
    F16,
    I32,
    U32,
}

impl DType {
    /// Bytes for `n` elements, rounded up to whole 4-byte words.
    pub fn bytes_for(self, n: usize) -> u64 {
        match self {
            DType::F16 => (n as u64 * 2).div_ceil(4) * 4,
            _ => n as u64 * 4,
        }
    }
}

/// A tensor in its own GPU buffer.
#[derive(Debug, Clone)]
pub struct Tensor {
    buffer: Arc<wgpu::Buffer>,
    shape: Vec<usize>,
    dtype: DType,
}

impl Tensor {
    /// The identity of the buffer behind this tensor (views share it): what wgpu tracks.
    pub fn buffer_key(&self) -> usize {
        Arc::as_ptr(&self.buffer) as usize
    }

    /// A tensor over a freshly created `buffer` (see `allocate.rs` for the constructors).
    pub(super) fn from_buffer(buffer: wgpu::Buffer, shape: &[usize], dtype: DType) -> Tensor {
        Tensor {
            buffer: Arc::new(buffer),
            shape: shape.to_vec(),
            dtype,
        }
    }

    pub fn shape(&self) -> &[usize] {
        &self.shape
    }
    pub fn dtype(&self) -> DType {
        self.dtype
    }
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }
    /// Bytes of the buffer (padded to whole words).
    pub fn byte_size(&self) -> u64 {
        self.buffer.size()
    }
    pub fn buffer(&self) -> &wgpu::Buffer {
        &self.buffer
    }
    /// Same buffer seen with a smaller shape: the first `numel(shape)` elements (e.g. an
    /// activation buffer allocated for the largest M, used by a plan with fewer rows).
    pub fn prefix_view(&self, shape: &[usize]) -> Result<Tensor> {
        let numel: usize = shape.iter().product();
        if self.dtype.bytes_for(numel) > self.buffer.size() {
            return Err(Error::invalid(
                "tensor",
                "view element count",
                format!("<= {} elements", self.numel()),
                format!("{numel} for shape {shape:?}"),
            ));
        }
        Ok(Tensor {
            buffer: self.buffer.clone(),
            shape: shape.to_vec(),
            dtype: self.dtype,
        })
    }

    /// Same buffer, another shape of the same element count (a view, no copy).
    pub fn reshaped(&self, shape: &[usize]) -> Result<Tensor> {
        let numel: usize = shape.iter().product();
        if numel != self.numel() {
            return Err(Error::invalid(
                "tensor",
                "reshape element count",
                self.numel(),
                format!("{numel} for shape {shape:?}"),
            ));
        }
        Ok(Tensor {
            buffer: self.buffer.clone(),
            shape: shape.to_vec(),
            dtype: self.dtype,
        })
    }

    /// Same buffer seen as another dtype and shape of the same (word-padded) byte size, e.g.
    /// f16 data as u32 words for a bit-exact comparison (a view, no copy).
    pub fn bitcast(&self, shape: &[usize], dtype: DType) -> Result<Tensor> {
        let bytes = dtype.bytes_for(shape.iter().product());
        let own = self.dtype.bytes_for(self.numel());
        if bytes != own {
            return Err(Error::invalid(
                "tensor",
                format!("bytes of a {dtype:?} {shape:?} view"),
                own,
                bytes,
            ));
        }
        Ok(Tensor {
            buffer: self.buffer.clone(),
            shape: shape.to_vec(),
            dtype,
        })
    }
}

/// Splits `rows` rows of `row_bytes` bytes into contiguous chunks that each fit in
/// `max_binding` bytes, for tensors (embedding table, lm_head) larger than one storage
/// binding. Chunk row counts are multiples of `row_multiple` (except the last), so that
/// kernels tiling rows never straddle chunks.
pub fn plan_row_chunks(
    rows: usize,
    row_bytes: u64,
    max_binding: u64,
    row_multiple: usize,
) -> Result<Vec<Range<usize>>> {
    let tile_bytes = row_bytes * row_multiple as u64;
    if tile_bytes == 0 || tile_bytes > max_binding {
        return Err(Error::invalid(
            "plan_row_chunks",
            "bytes of one row tile",
            format!("1..={max_binding}"),
            tile_bytes,
        ));
    }
    let rows_per_chunk = (max_binding / tile_bytes) as usize * row_multiple;
    Ok((0..rows)
        .step_by(rows_per_chunk)
        .map(|start| start..(start + rows_per_chunk).min(rows))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn row_chunks_fit_and_cover() {
        // E2B embedding, Q4 packed: 262144 rows x 768 bytes = 192 MiB > 128 MiB.
        let chunks = plan_row_chunks(262_144, 768, 128 << 20, 64).unwrap();
        assert_eq!(chunks.len(), 2);
        assert_eq!(chunks[0].start, 0);
        assert_eq!(chunks.last().unwrap().end, 262_144);
        for w in chunks.windows(2) {
            assert_eq!(w[0].end, w[1].start);
        }
        for c in &chunks {
            assert!(c.len() as u64 * 768 <= 128 << 20);
            assert_eq!(c.start % 64, 0);
        }
        assert_eq!(plan_row_chunks(10, 4, 1 << 20, 1).unwrap(), vec![0..10]);
        assert!(plan_row_chunks(10, 1 << 21, 1 << 20, 1).is_err());
    }

    #[test]
    fn f16_bytes_round_to_words() {
        assert_eq!(DType::F16.bytes_for(3), 8);
        assert_eq!(DType::F32.bytes_for(3), 12);
    }
}
