//! Embedding tables on the GPU, split by rows into chunks that each fit one storage binding
//! (E2B's 262144 x 1536 table and its 262144 x 8960 per-layer table exceed lavapipe's
//! 128 MiB; a chunk limit given by the caller lets tests force many chunks on small tables).

use crate::error::{Error, Result};
use crate::gpu::{plan_row_chunks, DType, GpuContext, Tensor};
use crate::ops::ggml_linear::GgmlType;
use crate::ops::ggml_linear::GgmlWeight;
use crate::ops::linear::Q4Weight;
use half::f16;
use std::ops::Range;

const OP: &str = "embedding";

/// Storage format of a table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TableFormat {
    F32,
    /// IEEE half, two per u32; `dim` must be even so rows (and chunks) start on a word.
    F16,
    /// The project's Q4: u32 words `[rows, dim/8]`, element `k = 8w + i` is nibble `i` of
    /// word `w` (bits `4i..4i+3`), value `(nibble - 8) * scale`; f16 scales
    /// `[rows, dim/group]` two per u32. `group % 8 == 0`, `dim % group == 0`.
    Q4 {
        group: usize,
    },
    /// ggml blocks of this type as a GGUF file stores them (one u32-padded buffer of row
    /// bytes per chunk), shared with the tied lm_head: made by [`EmbeddingTable::from_ggml`],
    /// gathered by [`crate::ops::ggml_linear::ggml_gather`].
    Ggml(GgmlType),
}

impl TableFormat {
    fn validate(self, dim: usize) -> Result<()> {
        let bad = |what: &str, expected: &str| {
            Err(Error::invalid(
                OP,
                what.to_string(),
                expected,
                format!("dim {dim}, {self:?}"),
            ))
        };
        match self {
            _ if dim == 0 => bad("table dim", ">= 1"),
            TableFormat::F32 => Ok(()),
            TableFormat::F16 if dim % 2 != 0 => bad("f16 table dim", "even"),
            TableFormat::F16 => Ok(()),
            TableFormat::Q4 { group } if group == 0 || group % 8 != 0 => {
                bad("q4 group size", "a multiple of 8")
            }
            TableFormat::Q4 { group } if dim % group != 0 => {
                bad("q4 table dim", "a multiple of the group")
            }
            TableFormat::Q4 { .. } => Ok(()),
            TableFormat::Ggml(ty) if dim % ty.block_elements() != 0 => {
                bad("ggml table dim", "a multiple of the block")
            }
            TableFormat::Ggml(_) => Ok(()),
        }
    }

    /// Bytes of one row of the main buffer.
    pub fn row_bytes(self, dim: usize) -> u64 {
        match self {
            TableFormat::F32 => 4 * dim as u64,
            TableFormat::F16 => 2 * dim as u64,
            TableFormat::Q4 { .. } => dim as u64 / 2,
            TableFormat::Ggml(ty) => ty.bytes_of(dim) as u64,
        }
    }

    /// f16 scales per row (Q4 only).
    pub fn scales_per_row(self, dim: usize) -> usize {
        match self {
            TableFormat::Q4 { group } => dim / group,
            _ => 0,
        }
    }

    /// Chunks start at multiples of this row count, so that every chunk's scales start on
    /// a u32 word.
    fn row_multiple(self, dim: usize) -> usize {
        if self.scales_per_row(dim) % 2 == 1 {
            2
        } else {
            1
        }
    }
}

/// Host rows to write into a table, in the table's format.
#[derive(Debug, Clone, Copy)]
pub enum TableRows<'a> {
    F32(&'a [f32]),
    F16(&'a [f16]),
    Q4 { words: &'a [u32], scales: &'a [f16] },
}

/// Rows `rows` of a table, in their own buffer(s).
#[derive(Debug, Clone)]
pub struct TableChunk {
    pub rows: Range<usize>,
    /// f32 `[n, dim]`, f16 `[n, dim]`, or Q4 words u32 `[n, dim/8]`.
    pub data: Tensor,
    /// Q4 scales, f16 `[n, dim/group]`.
    pub scales: Option<Tensor>,
}

/// A `[rows, dim]` table split into row chunks.
#[derive(Debug, Clone)]
pub struct EmbeddingTable {
    rows: usize,
    dim: usize,
    format: TableFormat,
    chunks: Vec<TableChunk>,
}

impl EmbeddingTable {
    /// Allocates a zeroed table. Chunks hold at most `max_chunk_bytes` per buffer (`None`:
    /// the device's storage-binding and buffer limits; a larger value is capped by them).
    pub fn new(
        ctx: &GpuContext,
        label: &str,
        rows: usize,
        dim: usize,
        format: TableFormat,
        max_chunk_bytes: Option<u64>,
    ) -> Result<EmbeddingTable> {
        format.validate(dim)?;
        if rows == 0 || u32::try_from(rows).is_err() {
            return Err(Error::invalid(OP, "table rows", "1..2^32", rows));
        }
        let device_max = ctx
            .limits
            .max_storage_buffer_binding_size
            .min(ctx.limits.max_buffer_size);
        let limit = max_chunk_bytes.unwrap_or(u64::MAX).min(device_max);
        let spr = format.scales_per_row(dim);
        let row_bytes = format.row_bytes(dim).max(2 * spr as u64);
        // Words-per-row indexing inside a chunk must stay below 2^32 elements.
        let limit = limit.min(row_bytes * (u32::MAX as u64 / dim as u64).max(1));
        let ranges = plan_row_chunks(rows, row_bytes, limit, format.row_multiple(dim))?;
        let chunks = ranges
            .into_iter()
            .enumerate()
            .map(|(i, r)| {
                let n = r.len();
                let name = format!("{label}.chunk{i}");
                let (data, scales) = match format {
                    TableFormat::F32 => (Tensor::zeros(ctx, &name, &[n, dim], DType::F32)?, None),
                    TableFormat::F16 => (Tensor::zeros(ctx, &name, &[n, dim], DType::F16)?, None),
                    TableFormat::Q4 { .. } => (
                        Tensor::zeros(ctx, &name, &[n, dim / 8], DType::U32)?,
                        Some(Tensor::zeros(
                            ctx,
                            &format!("{name}.scales"),
                            &[n, spr],
                            DType::F16,
                        )?),
                    ),
                    TableFormat::Ggml(_) => {
                        return Err(Error::invalid(
                            OP,
                            "how a ggml table is made",
                            "EmbeddingTable::from_ggml (the blocks as uploaded)",
                            "EmbeddingTable::new",
                        ))
                    }
                };
                Ok(TableChunk {
                    rows: r,
                    data,
                    scales,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(EmbeddingTable {
            rows,
            dim,
            format,
            chunks,
        })
    }

    /// The table over a ggml weight's blocks, sharing its buffers (the tied embedding and
    /// lm_head hold one copy).
    pub fn from_ggml(w: &GgmlWeight) -> EmbeddingTable {
        EmbeddingTable {
            rows: w.n(),
            dim: w.k(),
            format: TableFormat::Ggml(w.ty()),
            chunks: w
                .chunks()
                .iter()
                .map(|c| TableChunk {
                    rows: c.rows.clone(),
                    data: c.blocks.clone(),
                    scales: None,
                })
                .collect(),
        }
    }

    /// The table over a Q4 weight's chunks, sharing its buffers (the tied embedding and
    /// lm_head hold one copy): the weight's words and scale words are the table's Q4 layout,
    /// and its chunks start at multiples of 64 rows, so every chunk's scales start on a word.
    pub fn from_q4(w: &Q4Weight) -> EmbeddingTable {
        EmbeddingTable {
            rows: w.n(),
            dim: w.k(),
            format: TableFormat::Q4 { group: w.group() },
            chunks: w
                .chunks()
                .iter()
                .map(|c| TableChunk {
                    rows: c.rows.clone(),
                    data: c.packed.clone(),
                    scales: Some(c.scales.clone()),
                })
                .collect(),
        }
    }

    /// Allocates a table and writes all its rows.
    pub fn from_rows(
        ctx: &GpuContext,
        label: &str,
        dim: usize,
        format: TableFormat,
        data: TableRows<'_>,
        max_chunk_bytes: Option<u64>,
    ) -> Result<EmbeddingTable> {
        let rows = rows_in(data, dim, format)?;
        let table = EmbeddingTable::new(ctx, label, rows, dim, format, max_chunk_bytes)?;
        table.write_rows(ctx, 0, data)?;
        Ok(table)
    }

    pub fn rows(&self) -> usize {
        self.rows
    }
    pub fn dim(&self) -> usize {
        self.dim
    }
    pub fn format(&self) -> TableFormat {
        self.format
    }
    /// The row chunks, in order (e.g. to bind the same tensors as a tied lm_head).
    pub fn chunks(&self) -> &[TableChunk] {
        &self.chunks
    }

    /// Writes whole rows starting at `first_row` through the queue (no CPU wait), so a
    /// loader can stream a checkpoint tensor in pieces. For Q4 tables whose `dim / group`
    /// is odd, `first_row` must be even and the row count even unless the write ends the
    /// table (two rows share a scale word).
    pub fn write_rows(
        &self,
        ctx: &GpuContext,
        first_row: usize,
        data: TableRows<'_>,
    ) -> Result<()> {
        let n = rows_in(data, self.dim, self.format)?;
        let end = first_row
            .checked_add(n)
            .filter(|&e| e <= self.rows)
            .ok_or_else(|| {
                Error::invalid(
                    OP,
                    "rows written",
                    format!("within 0..{}", self.rows),
                    format!("{first_row}..{}", first_row.saturating_add(n)),
                )
            })?;
        if self.format.row_multiple(self.dim) == 2
            && (first_row % 2 != 0 || (n % 2 != 0 && end != self.rows))
        {
            return Err(Error::invalid(
                OP,
                "q4 rows written (odd scales per row: two rows share a scale word)",
                "an even first row and an even count (or up to the table end)",
                format!("{first_row}..{end}"),
            ));
        }
        for chunk in &self.chunks {
            let (lo, hi) = (first_row.max(chunk.rows.start), end.min(chunk.rows.end));
            if lo >= hi {
                continue;
            }
            let (src, local) = (lo - first_row..hi - first_row, lo - chunk.rows.start);
            match data {
                TableRows::F32(v) => write_at(
                    ctx,
                    &chunk.data,
                    local * self.dim * 4,
                    as_bytes(&v[scaled(&src, self.dim)]),
                ),
                TableRows::F16(v) => write_at(
                    ctx,
                    &chunk.data,
                    local * self.dim * 2,
                    as_bytes(&v[scaled(&src, self.dim)]),
                ),
                TableRows::Q4 { words, scales } => {
                    let (wpr, spr) = (self.dim / 8, self.format.scales_per_row(self.dim));
                    write_at(
                        ctx,
                        &chunk.data,
                        local * wpr * 4,
                        as_bytes(&words[scaled(&src, wpr)]),
                    );
                    if let Some(s) = &chunk.scales {
                        write_at(
                            ctx,
                            s,
                            local * spr * 2,
                            as_bytes(&scales[scaled(&src, spr)]),
                        );
                    }
                }
            }
        }
        Ok(())
    }
}

fn scaled(r: &Range<usize>, per_row: usize) -> Range<usize> {
    r.start * per_row..r.end * per_row
}

fn as_bytes<T: bytemuck::Pod>(v: &[T]) -> &[u8] {
    bytemuck::cast_slice(v)
}

/// Queue write at a word-aligned offset; a ragged tail is padded to a word (the tensor's
/// buffer is word-padded, and callers only pad at the end of a chunk).
fn write_at(ctx: &GpuContext, t: &Tensor, offset: usize, bytes: &[u8]) {
    if bytes.is_empty() {
        return;
    }
    debug_assert_eq!(offset % 4, 0);
    if bytes.len() % 4 == 0 {
        ctx.queue.write_buffer(t.buffer(), offset as u64, bytes);
    } else {
        let mut padded = bytes.to_vec();
        padded.resize(bytes.len().div_ceil(4) * 4, 0);
        ctx.queue.write_buffer(t.buffer(), offset as u64, &padded);
    }
}

/// Row count of `data`, checking that its variant and lengths fit the table.
fn rows_in(data: TableRows<'_>, dim: usize, format: TableFormat) -> Result<usize> {
    format.validate(dim)?;
    let whole = |len: usize, per_row: usize, what: &str| {
        if len % per_row != 0 {
            Err(Error::invalid(
                OP,
                what.to_string(),
                format!("a multiple of {per_row}"),
                len,
            ))
        } else {
            Ok(len / per_row)
        }
    };
    match (data, format) {
        (TableRows::F32(v), TableFormat::F32) => whole(v.len(), dim, "f32 elements"),
        (TableRows::F16(v), TableFormat::F16) => whole(v.len(), dim, "f16 elements"),
        (TableRows::Q4 { words, scales }, TableFormat::Q4 { .. }) => {
            let n = whole(words.len(), dim / 8, "q4 words")?;
            let spr = format.scales_per_row(dim);
            if scales.len() != n * spr {
                return Err(Error::invalid(OP, "q4 scales", n * spr, scales.len()));
            }
            Ok(n)
        }
        (data, format) => Err(Error::invalid(
            OP,
            "rows format",
            format!("{format:?}"),
            match data {
                TableRows::F32(_) => "f32",
                TableRows::F16(_) => "f16",
                TableRows::Q4 { .. } => "q4",
            },
        )),
    }
}
