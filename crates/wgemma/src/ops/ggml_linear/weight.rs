//! A ggml-format weight on the GPU: its blocks as the file stores them (byte for byte, no
//! second rounding), split into row chunks that each fit one storage binding.

use super::blocks::GgmlType;
use crate::error::{Error, Result};
use crate::gpu::{plan_row_chunks, DType, GpuContext, Tensor};
use std::ops::Range;

const OP: &str = "ggml_linear";

/// Chunk starts are multiples of this many rows, so every chunk (and every block of rows
/// the loader writes) starts on a whole u32 word whatever a row's byte count.
pub const GGML_CHUNK_ROW_MULTIPLE: usize = 64;

/// The ggml types this op runs at their stored precision (Q4_0 needs no op of its own: its
/// blocks are wgemma's Q4 group 32, moved bit for bit).
pub const NATIVE_TYPES: [GgmlType; 7] = [
    GgmlType::Q8_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
];

/// Whether [`super::ggml_linear`] runs `ty` as stored.
pub fn is_native(ty: GgmlType) -> bool {
    NATIVE_TYPES.contains(&ty)
}

/// One row range of a [`GgmlWeight`], in its own buffer: the rows' bytes as stored (the
/// last word zero-padded).
#[derive(Debug, Clone)]
pub struct GgmlChunk {
    pub rows: Range<usize>,
    pub blocks: Tensor,
}

/// A `[n, k]` weight stored in ggml blocks of `ty`.
#[derive(Debug, Clone)]
pub struct GgmlWeight {
    ty: GgmlType,
    n: usize,
    k: usize,
    chunks: Vec<GgmlChunk>,
}

impl GgmlWeight {
    /// A zeroed weight in chunks of at most the device's binding limit, for a loader that
    /// writes it a block of rows at a time ([`GgmlWeight::write_rows`]).
    pub fn zeros(ctx: &GpuContext, ty: GgmlType, n: usize, k: usize) -> Result<GgmlWeight> {
        let max = ctx
            .limits
            .max_storage_buffer_binding_size
            .min(ctx.limits.max_buffer_size);
        GgmlWeight::zeros_with_max_binding(ctx, ty, n, k, max)
    }

    /// [`GgmlWeight::zeros`] with chunks of at most `max_binding` bytes (tests and the op
    /// cases force splits).
    pub fn zeros_with_max_binding(
        ctx: &GpuContext,
        ty: GgmlType,
        n: usize,
        k: usize,
        max_binding: u64,
    ) -> Result<GgmlWeight> {
        if !is_native(ty) || n == 0 || k == 0 || k % ty.block_elements() != 0 {
            return Err(Error::invalid(
                OP,
                format!("a [{n}, {k}] weight in {ty:?}"),
                format!(
                    "one of {NATIVE_TYPES:?}, N >= 1, K a multiple of the block ({})",
                    ty.block_elements()
                ),
                format!("{ty:?} [{n}, {k}]"),
            ));
        }
        let row_bytes = ty.bytes_of(k) as u64;
        let ranges = plan_row_chunks(n, row_bytes, max_binding, GGML_CHUNK_ROW_MULTIPLE)?;
        let chunks = ranges
            .into_iter()
            .enumerate()
            .map(|(c, rows)| {
                let words = (rows.len() as u64 * row_bytes).div_ceil(4) as usize;
                Ok(GgmlChunk {
                    blocks: Tensor::zeros(
                        ctx,
                        &format!("{ty:?} blocks chunk {c}"),
                        &[words],
                        DType::U32,
                    )?,
                    rows,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(GgmlWeight { ty, n, k, chunks })
    }

    /// Uploads a whole `[n, k]` matrix of stored blocks (`bytes`: its rows, in order).
    pub fn upload(
        ctx: &GpuContext,
        ty: GgmlType,
        n: usize,
        k: usize,
        bytes: &[u8],
        max_binding: Option<u64>,
    ) -> Result<GgmlWeight> {
        let w = match max_binding {
            Some(max) => GgmlWeight::zeros_with_max_binding(ctx, ty, n, k, max)?,
            None => GgmlWeight::zeros(ctx, ty, n, k)?,
        };
        w.write_rows(ctx, 0, bytes)?;
        Ok(w)
    }

    /// Writes the stored bytes of whole rows `first_row..` through the queue. Blocks of
    /// rows must start on a word: `first_row` a multiple of 64 (every chunk start is) or
    /// its byte offset a multiple of 4.
    pub fn write_rows(&self, ctx: &GpuContext, first_row: usize, bytes: &[u8]) -> Result<()> {
        let row_bytes = self.row_bytes();
        let rows = bytes.len() / row_bytes;
        let end = first_row + rows;
        let aligned = |row: usize, c: &GgmlChunk| ((row - c.rows.start) * row_bytes) % 4 == 0;
        let bad = bytes.len() % row_bytes != 0
            || end > self.n
            || self
                .chunks
                .iter()
                .any(|c| c.rows.contains(&first_row) && !aligned(first_row, c));
        if bad {
            return Err(Error::invalid(
                OP,
                format!(
                    "rows written to a [{}, {}] {:?} weight",
                    self.n, self.k, self.ty
                ),
                format!("whole rows of {row_bytes} bytes inside it, starting on a word"),
                format!("{} bytes from row {first_row}", bytes.len()),
            ));
        }
        for c in &self.chunks {
            let (lo, hi) = (first_row.max(c.rows.start), end.min(c.rows.end));
            if lo >= hi {
                continue;
            }
            let src = &bytes[(lo - first_row) * row_bytes..(hi - first_row) * row_bytes];
            let dst = ((lo - c.rows.start) * row_bytes) as u64;
            if src.len() % 4 == 0 {
                ctx.queue.write_buffer(c.blocks.buffer(), dst, src);
            } else {
                let mut padded = src.to_vec();
                padded.resize(src.len().div_ceil(4) * 4, 0);
                ctx.queue.write_buffer(c.blocks.buffer(), dst, &padded);
            }
        }
        Ok(())
    }

    pub fn ty(&self) -> GgmlType {
        self.ty
    }
    pub fn n(&self) -> usize {
        self.n
    }
    pub fn k(&self) -> usize {
        self.k
    }
    /// Stored bytes of one row.
    pub fn row_bytes(&self) -> usize {
        self.ty.bytes_of(self.k)
    }
    pub fn chunks(&self) -> &[GgmlChunk] {
        &self.chunks
    }
    /// Bytes on the GPU (what a full read moves).
    pub fn bytes(&self) -> u64 {
        self.chunks.iter().map(|c| c.blocks.byte_size()).sum()
    }
}
