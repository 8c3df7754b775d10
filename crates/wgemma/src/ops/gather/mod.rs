//! Gather rows: `out[i, :] = table[idx[i], :]`, with u32 indices read from a GPU buffer (the
//! assistant's centroid head gathers `token_ordering` rows at the TopK clusters, then 4096
//! rows of the [262144, D] lm_head at those token ids).
//!
//! Tables may exceed one storage binding, so a [`RowTable`] is a list of row chunks, each
//! its own tensor; the op is one kernel per chunk, each writing the output rows whose
//! index falls in its chunk. Out-of-range rule: an index `>= rows` is never read; its
//! output row is all zeros (written by the last chunk's kernel).
//!
//! Routes, chosen by dtypes (no route: [`Error::NoRoute`] naming every failed guard):
//! - [`GatherRoute::Words`]: f32 -> f32, u32 -> u32, i32 -> i32, and f16 -> f16 when the
//!   row length is even (rows start on a word): a copy of 4-byte words.
//! - [`GatherRoute::F16ToF32`]: f16 -> f32, any row length (`unpack2x16float`; a driver may
//!   flush f16 subnormals to zero).

mod reference;

pub use reference::gather_rows_ref;

use crate::error::{Error, Result};
use crate::gpu::{
    plan_row_chunks, workgroups_for, DType, GpuContext, Kernel, KernelBuilder, Tensor,
};
use std::ops::Range;

#[cfg(any(test, feature = "harness"))]
mod cases;
#[cfg(any(test, feature = "harness"))]
pub use cases::{bench_cases, random_cases, GatherCase};

const OP: &str = "gather_rows";
const WORKGROUP: u32 = 256;

/// A `[rows, cols]` table split into contiguous row chunks, each in its own tensor
/// (`[chunk rows, cols]`, same dtype).
#[derive(Debug, Clone)]
pub struct RowTable {
    rows: usize,
    cols: usize,
    dtype: DType,
    chunks: Vec<(Range<usize>, Tensor)>,
}

impl RowTable {
    /// A table in one tensor of shape `[rows, cols]`.
    pub fn from_tensor(tensor: Tensor) -> Result<RowTable> {
        let rows = tensor.shape().first().copied().unwrap_or(0);
        RowTable::from_chunks(vec![(0..rows, tensor)])
    }

    /// A table from its chunks (e.g. an embedding table's), which must be contiguous from
    /// row 0, of one dtype, each `[range.len(), cols]`.
    pub fn from_chunks(chunks: Vec<(Range<usize>, Tensor)>) -> Result<RowTable> {
        let Some((_, first)) = chunks.first() else {
            return Err(Error::invalid(OP, "table chunks", ">= 1", 0));
        };
        let (dtype, cols) = (first.dtype(), first.shape().last().copied().unwrap_or(0));
        if cols == 0 {
            return Err(Error::invalid(
                OP,
                "table shape",
                "[rows, cols >= 1]",
                format!("{:?}", first.shape()),
            ));
        }
        let mut next = 0;
        for (range, t) in &chunks {
            if range.start != next || range.is_empty() {
                return Err(Error::invalid(
                    OP,
                    "chunk row range",
                    format!("a non-empty range starting at row {next}"),
                    format!("{range:?}"),
                ));
            }
            if t.dtype() != dtype || t.shape() != [range.len(), cols] {
                return Err(Error::invalid(
                    OP,
                    format!("chunk for rows {range:?}"),
                    format!("{dtype:?} {:?}", [range.len(), cols]),
                    format!("{:?} {:?}", t.dtype(), t.shape()),
                ));
            }
            next = range.end;
        }
        if u32::try_from(next).is_err() {
            return Err(Error::invalid(OP, "table rows", "< 2^32", next));
        }
        Ok(RowTable {
            rows: next,
            cols,
            dtype,
            chunks,
        })
    }

    /// Uploads `bytes` (little-endian `[rows, cols]` of `dtype`) in chunks of at most
    /// `max_chunk_bytes` (`None`: the device's storage-binding limit; larger values are capped
    /// by it). Tests pass a small limit to exercise the chunked path.
    pub fn upload(
        ctx: &GpuContext,
        label: &str,
        shape: [usize; 2],
        dtype: DType,
        bytes: &[u8],
        max_chunk_bytes: Option<u64>,
    ) -> Result<RowTable> {
        let [rows, cols] = shape;
        let elem = match dtype {
            DType::F16 => 2,
            _ => 4,
        };
        let row_bytes = (cols * elem) as u64;
        if rows == 0 || cols == 0 || bytes.len() as u64 != rows as u64 * row_bytes {
            return Err(Error::invalid(
                OP,
                format!("bytes of table `{label}` {shape:?} {dtype:?}"),
                rows as u64 * row_bytes,
                format!("{} (rows and cols must be >= 1)", bytes.len()),
            ));
        }
        let device = ctx
            .limits
            .max_storage_buffer_binding_size
            .min(ctx.limits.max_buffer_size);
        // Whole words, so that the padding of an f16 chunk stays inside the limit.
        let limit = max_chunk_bytes.unwrap_or(u64::MAX).min(device) / 4 * 4;
        let ranges = plan_row_chunks(rows, row_bytes, limit, 1)?;
        let chunks = ranges
            .into_iter()
            .map(|r| {
                let data = &bytes[r.start * row_bytes as usize..r.end * row_bytes as usize];
                let t = Tensor::from_bytes(
                    ctx,
                    &format!("{label}[{r:?}]"),
                    &[r.len(), cols],
                    dtype,
                    data,
                )?;
                Ok((r, t))
            })
            .collect::<Result<Vec<_>>>()?;
        RowTable::from_chunks(chunks)
    }

    pub fn rows(&self) -> usize {
        self.rows
    }
    pub fn cols(&self) -> usize {
        self.cols
    }
    pub fn dtype(&self) -> DType {
        self.dtype
    }
    pub fn chunks(&self) -> &[(Range<usize>, Tensor)] {
        &self.chunks
    }
}

/// How a gather runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GatherRoute {
    /// 4-byte word copy: f32, u32, i32, and f16 with an even row length.
    Words,
    /// f16 table to f32 output.
    F16ToF32,
}

/// A planned gather: one kernel per table chunk, dispatched in any order within one pass
/// (they write disjoint output rows).
#[derive(Debug)]
pub struct Gather {
    pub route: GatherRoute,
    pub kernels: Vec<Kernel>,
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    n_idx: u32,
    cols: u32,
    start: u32,
    end: u32,
    total_rows: u32,
    zero_oob: u32,
    _pad: [u32; 2],
}

fn failed_guards(route: GatherRoute, table: &RowTable, out: DType) -> Vec<String> {
    let mut failed = Vec::new();
    let (t, cols) = (table.dtype, table.cols);
    match route {
        GatherRoute::Words => {
            if t != out {
                failed.push(format!(
                    "Words: out dtype == table dtype (table {t:?}, out {out:?})"
                ));
            }
            if t == DType::F16 && cols % 2 != 0 {
                failed.push(format!(
                    "Words: an f16 row length is even, so rows start on a word (found {cols})"
                ));
            }
        }
        GatherRoute::F16ToF32 => {
            if (t, out) != (DType::F16, DType::F32) {
                failed.push(format!(
                    "F16ToF32: table f16 and out f32 (table {t:?}, out {out:?})"
                ));
            }
        }
    }
    failed
}

/// Plans `out[i, :] = table[idx[i], :]` for `idx` u32 (any shape, `n` elements, read on the
/// GPU) and `out` `[.., cols]` with `n * cols` elements. Rows with an index `>= table.rows()`
/// come out as zeros.
pub fn gather_rows(
    ctx: &GpuContext,
    table: &RowTable,
    idx: &Tensor,
    out: &Tensor,
) -> Result<Gather> {
    if idx.dtype() != DType::U32 {
        return Err(Error::invalid(
            OP,
            "dtype of idx",
            "u32",
            format!("{:?}", idx.dtype()),
        ));
    }
    let n_idx = idx.numel();
    let cols = table.cols;
    if out.shape().last() != Some(&cols) || out.numel() != n_idx * cols {
        return Err(Error::invalid(
            OP,
            format!("shape of out for {n_idx} indices"),
            format!("[.., {cols}] with {} elements", n_idx * cols),
            format!("{:?}", out.shape()),
        ));
    }
    let shapes = format!(
        "table [{}, {cols}] {:?} -> out {:?} {:?}",
        table.rows,
        table.dtype,
        out.shape(),
        out.dtype()
    );
    let mut failed = Vec::new();
    let mut chosen = None;
    for route in [GatherRoute::Words, GatherRoute::F16ToF32] {
        let f = failed_guards(route, table, out.dtype());
        if f.is_empty() {
            chosen = Some(route);
            break;
        }
        failed.extend(f);
    }
    let route = chosen.ok_or(Error::NoRoute {
        op: OP,
        shapes,
        failed,
    })?;
    let (shader, row_len) = match (route, table.dtype) {
        (GatherRoute::Words, DType::F16) => ("gather_rows_words", cols / 2),
        (GatherRoute::Words, _) => ("gather_rows_words", cols),
        (GatherRoute::F16ToF32, _) => ("gather_rows_f16_f32", cols),
    };
    let threads = n_idx as u64 * row_len as u64;
    if threads >= u32::MAX as u64 {
        return Err(Error::invalid(OP, "output words", "< 2^32", threads));
    }
    let last = table.chunks.len() - 1;
    let kernels = table
        .chunks
        .iter()
        .enumerate()
        .map(|(c, (range, chunk))| {
            KernelBuilder::new(ctx, shader)
                .uniform(&Params {
                    n_idx: n_idx as u32,
                    cols: row_len as u32,
                    start: range.start as u32,
                    end: range.end as u32,
                    total_rows: table.rows as u32,
                    zero_oob: (c == last) as u32,
                    _pad: [0; 2],
                })
                .tensor(chunk)
                .tensor(idx)
                .tensor(out)
                .build_1d(workgroups_for(threads, WORKGROUP))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Gather { route, kernels })
}

#[cfg(test)]
mod tests;
