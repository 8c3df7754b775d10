//! The only uploader: puts a model's matrices on the GPU from the stored tensors a source
//! hands over ([`upload_matrix`]), deciding by their stored dtype alone, into buffers
//! allocated once at their final size, a block of rows at a time, so a load never holds a
//! second copy of a whole tensor on the host.
//!
//! Stored bf16/f16/f32 rows reach the GPU in one of two ways ([`Quantiser`]):
//! - **GPU** (Q4 layouts on a hardware adapter): the stored bytes are copied as they are
//!   into a staging buffer and [`crate::ops::quantize::q4_quantize`] writes the final Q4 words into the weight's
//!   own buffers. The host only scans the bytes once (finite, scales in range).
//! - **CPU** (the reference, f16/f32 layouts, and software adapters such as lavapipe, where
//!   "the GPU" is the same cores): each block is converted to f32 and prepared by
//!   [`Matrix::prepare`] (the multi-threaded CPU quantiser), then written.
//!
//! Other stored kinds (ggml blocks, computed synthetic values) are prepared on the host a
//! block of rows at a time ([`RawTensor::prepared_rows`]); a matrix stored in its GPU
//! layout already (an artifact) is uploaded as stored. Either way the submissions in
//! flight are bounded ([`MAX_IN_FLIGHT`] blocks), which bounds wgpu's staging copies, and
//! the source's pages are released after each block.
//!
//! The float paths are in `float`, ggml blocks uploaded as stored in `native`.

use crate::error::{Error, Result};
use crate::gpu::{DType, GpuContext, Tensor};
use crate::ops::embedding::{EmbeddingTable, TableFormat};
use crate::ops::linear::Q4Weight;
use crate::weights::layout::MatrixUse;
use crate::weights::layout::{Matrix, MatrixData, MatrixLayout, MatrixSpec};
use crate::weights::linear::{table_from_matrix, table_over, table_rows, LinearWeight};
use crate::weights::raw::{RawData, RawDtype, RawTensor};
use std::collections::VecDeque;
use std::ops::Range;

mod float;
mod native;

/// Bytes of source rows per block (and the size of the GPU path's staging buffer): large
/// enough that per-block costs (a submit, a few dispatches) vanish against the copy, small
/// enough to fit any binding (lavapipe's is 128 MiB) and to keep a load's host memory low.
pub const BLOCK_BYTES: usize = 32 << 20;

/// Blocks whose GPU work may be queued before the loader waits for the oldest: enough to
/// keep the GPU busy while the next block is read, few enough to bound staging memory.
pub const MAX_IN_FLIGHT: usize = 3;

/// Where a checkpoint's Q4 quantisation runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Quantiser {
    /// The GPU on a hardware adapter, the CPU on a software one (the default).
    Auto,
    Gpu,
    Cpu,
}

/// How a checkpoint streams its matrices.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamOptions {
    pub quantiser: Quantiser,
    /// Source bytes per block (at least 64 rows a block; capped by the staging buffer).
    pub block_bytes: usize,
    /// Upload ggml blocks of the types [`crate::ops::ggml_linear`] runs as stored (a GGUF
    /// file loaded with no `--dtype`), instead of converting them to the load's layout.
    pub native_ggml: bool,
}

impl Default for StreamOptions {
    fn default() -> Self {
        StreamOptions {
            quantiser: Quantiser::Auto,
            block_bytes: BLOCK_BYTES,
            native_ggml: false,
        }
    }
}

impl Quantiser {
    /// Whether Q4 blocks are quantised on `ctx`'s GPU.
    pub fn on_gpu(self, ctx: &GpuContext) -> bool {
        match self {
            Quantiser::Gpu => true,
            Quantiser::Cpu => false,
            Quantiser::Auto => ctx.info.device_type != wgpu::DeviceType::Cpu,
        }
    }
}

/// The loader's upload state: the context, the staging buffer of the GPU path, the
/// submissions in flight.
pub struct Uploader<'c> {
    pub ctx: &'c GpuContext,
    staging: Option<Tensor>,
    in_flight: VecDeque<wgpu::SubmissionIndex>,
    /// Bytes per buffer of the matrices made (`None`: the device's binding limit).
    max_chunk_bytes: Option<u64>,
}

impl<'c> Uploader<'c> {
    pub fn new(ctx: &'c GpuContext) -> Self {
        Uploader {
            ctx,
            staging: None,
            in_flight: VecDeque::new(),
            max_chunk_bytes: None,
        }
    }

    /// Splits every matrix made into buffers of at most `bytes` (tests reach the chunk
    /// boundaries of E2B-sized tables with tiny ones).
    pub fn with_max_chunk_bytes(mut self, bytes: u64) -> Self {
        self.max_chunk_bytes = Some(bytes);
        self
    }

    /// Records a submitted block, waiting for the oldest once too many are in flight (on
    /// the web the poll returns at once and the browser paces the queue).
    fn submitted(&mut self, index: wgpu::SubmissionIndex) {
        self.in_flight.push_back(index);
        while self.in_flight.len() > MAX_IN_FLIGHT {
            let Some(oldest) = self.in_flight.pop_front() else {
                break;
            };
            // A lost device surfaces at the model's first forward with its own error; here
            // the wait only paces the upload.
            let _ = self.ctx.device.poll(wgpu::PollType::Wait {
                submission_index: Some(oldest),
                timeout: None,
            });
        }
    }

    /// Submits the writes queued so far as one block.
    pub fn flush(&mut self) {
        let index = self.ctx.queue.submit([]);
        self.submitted(index);
    }

    /// The staging buffer of the GPU path, made on first use.
    fn staging(&mut self) -> Result<Tensor> {
        if let Some(t) = &self.staging {
            return Ok(t.clone());
        }
        let words = self.staging_bytes() / 4;
        let t = Tensor::zeros(self.ctx, "q4 staging", &[words], DType::U32)?;
        self.staging = Some(t.clone());
        Ok(t)
    }

    /// Staging capacity in bytes: [`BLOCK_BYTES`], or less where one binding holds less.
    fn staging_bytes(&self) -> usize {
        let max = self
            .ctx
            .limits
            .max_storage_buffer_binding_size
            .min(self.ctx.limits.max_buffer_size) as usize;
        BLOCK_BYTES.min(max) / 4 * 4
    }
}

/// What the loader builds from one matrix: a linear weight, an embedding table, or both
/// (the tied embedding and lm_head).
pub struct Uploaded {
    pub linear: Option<LinearWeight>,
    pub table: Option<EmbeddingTable>,
}

impl Uploaded {
    /// Uploads a whole prepared matrix (an artifact's borrowed words, a synthetic model).
    pub fn from_matrix(
        ctx: &GpuContext,
        name: &str,
        m: &Matrix<'_>,
        use_: MatrixUse,
    ) -> Result<Self> {
        let (linear, table) = wants(use_);
        let linear = linear
            .then(|| LinearWeight::from_matrix(ctx, name, m))
            .transpose()?;
        let table = match (table, linear.as_ref().and_then(table_over)) {
            (true, Some(shared)) => Some(shared),
            (true, None) => Some(table_from_matrix(ctx, name, m)?),
            (false, _) => None,
        };
        Ok(Uploaded { linear, table })
    }

    /// Whether the table reads the linear weight's buffers (one copy; written once).
    pub fn table_shares_linear(&self) -> bool {
        let first_table = self.table.as_ref().and_then(|t| t.chunks().first());
        let first_linear = match &self.linear {
            Some(LinearWeight::Q4(w)) => w.chunks().first().map(|c| &c.packed),
            Some(LinearWeight::Ggml(w)) => w.chunks().first().map(|c| &c.blocks),
            _ => None,
        };
        match (first_table, first_linear) {
            (Some(t), Some(l)) => t.data.buffer() == l.buffer(),
            _ => false,
        }
    }

    /// Zeroed destinations for an `[n, k]` matrix in `layout`.
    fn zeros(
        up: &Uploader<'_>,
        name: &str,
        n: usize,
        k: usize,
        layout: MatrixLayout,
        use_: MatrixUse,
    ) -> Result<Self> {
        let (ctx, max_chunk) = (up.ctx, up.max_chunk_bytes);
        let (linear, table) = wants(use_);
        let linear = linear
            .then(|| -> Result<LinearWeight> {
                Ok(match layout {
                    MatrixLayout::Q4 { group } => LinearWeight::Q4(match max_chunk {
                        Some(max) => Q4Weight::zeros_with_max_binding(ctx, n, k, group, max)?,
                        None => Q4Weight::zeros(ctx, n, k, group)?,
                    }),
                    MatrixLayout::F16 => {
                        LinearWeight::Dense(Tensor::zeros(ctx, name, &[n, k], DType::F16)?)
                    }
                    MatrixLayout::F32 => {
                        LinearWeight::Dense(Tensor::zeros(ctx, name, &[n, k], DType::F32)?)
                    }
                })
            })
            .transpose()?;
        let format = match layout {
            MatrixLayout::Q4 { group } => TableFormat::Q4 { group },
            MatrixLayout::F16 => TableFormat::F16,
            MatrixLayout::F32 => TableFormat::F32,
        };
        let table = match (table, linear.as_ref().and_then(table_over)) {
            (true, Some(shared)) => Some(shared),
            (true, None) => Some(EmbeddingTable::new(ctx, name, n, k, format, max_chunk)?),
            (false, _) => None,
        };
        Ok(Uploaded { linear, table })
    }

    /// Writes prepared rows `first_row..` (a block of the matrix) into every destination.
    fn write_rows(&self, ctx: &GpuContext, first_row: usize, block: &Matrix<'_>) -> Result<()> {
        let k = block.k;
        match (&self.linear, &block.data) {
            (Some(LinearWeight::Q4(w)), MatrixData::Q4 { packed, scales, .. }) => {
                w.write_rows(ctx, first_row, packed, scales)?
            }
            (Some(LinearWeight::Dense(t)), MatrixData::F16(v)) => {
                write_padded(ctx, t, first_row * k * 2, bytemuck::cast_slice(v))
            }
            (Some(LinearWeight::Dense(t)), MatrixData::F32(v)) => {
                write_padded(ctx, t, first_row * k * 4, bytemuck::cast_slice(v))
            }
            (None, _) => {}
            (Some(_), data) => return Err(layout_mismatch(data)),
        }
        match &self.table {
            Some(table) if !self.table_shares_linear() => {
                let (_, rows) = table_rows(block);
                table.write_rows(ctx, first_row, rows)?;
            }
            _ => {}
        }
        Ok(())
    }

    /// Every Q4 row chunk of every destination: (rows, packed words, scale words).
    fn q4_chunks(&self) -> Vec<(Range<usize>, &Tensor, &Tensor)> {
        let mut out = Vec::new();
        if let Some(LinearWeight::Q4(w)) = &self.linear {
            out.extend(
                w.chunks()
                    .iter()
                    .map(|c| (c.rows.clone(), &c.packed, &c.scales)),
            );
        }
        if let (Some(t), false) = (&self.table, self.table_shares_linear()) {
            out.extend(
                t.chunks()
                    .iter()
                    .filter_map(|c| c.scales.as_ref().map(|s| (c.rows.clone(), &c.data, s))),
            );
        }
        out
    }
}

fn wants(use_: MatrixUse) -> (bool, bool) {
    match use_ {
        MatrixUse::Table => (false, true),
        MatrixUse::TableAndLinear => (true, true),
        _ => (true, false),
    }
}

fn layout_mismatch(data: &MatrixData<'_>) -> Error {
    Error::invalid(
        "upload",
        "block layout",
        "the destination's layout",
        match data {
            MatrixData::F32(_) => "f32",
            MatrixData::F16(_) => "f16",
            MatrixData::Q4 { .. } => "q4",
        },
    )
}

/// Queue write at a byte offset (a multiple of 4 here: blocks start at even rows); a
/// ragged tail, only at a matrix's end, is padded into the word-padded buffer.
fn write_padded(ctx: &GpuContext, t: &Tensor, offset: usize, bytes: &[u8]) {
    if bytes.len() % 4 == 0 {
        ctx.queue.write_buffer(t.buffer(), offset as u64, bytes);
    } else {
        let mut padded = bytes.to_vec();
        padded.resize(bytes.len().div_ceil(4) * 4, 0);
        ctx.queue.write_buffer(t.buffer(), offset as u64, &padded);
    }
}

/// Uploads the `[n, k]` matrix `name` as `spec` says from the stored tensors a source
/// handed over: its row blocks `parts` (each `[n / parts.len(), k]`, stacked), or the one
/// stacked matrix a source stores prepared. How each is placed depends on its stored dtype
/// only, never on the format it came from:
/// - prepared in `spec.layout` already (an artifact): uploaded as stored, borrowed;
/// - bf16 / f16 / f32 bytes: streamed a block of rows at a time, Q4 quantised on the GPU
///   or the CPU ([`Quantiser`]);
/// - anything else (ggml blocks, computed values): a block of rows at a time prepared on
///   the host ([`RawTensor::prepared_rows`]: Q4_0 into Q4 group 32 moved bit for bit).
pub fn upload_matrix(
    up: &mut Uploader<'_>,
    options: StreamOptions,
    name: &str,
    parts: &[RawTensor<'_>],
    spec: MatrixSpec,
) -> Result<Uploaded> {
    let MatrixSpec { n, k, layout, use_ } = spec;
    if parts.is_empty() || n % parts.len() != 0 || k == 0 {
        return Err(Error::invalid(
            "upload",
            format!("row blocks of a [{n}, {k}] matrix `{name}`"),
            "at least one, dividing the rows evenly",
            parts.len(),
        ));
    }
    if let [part] = parts {
        if let RawDtype::Prepared(_) = part.dtype {
            let m = part.as_prepared(n, k, layout)?;
            return Uploaded::from_matrix(up.ctx, name, &m, use_);
        }
    }
    if let Some(ty) = native::native_type(parts, use_).filter(|_| options.native_ggml) {
        return native::upload_native(up, name, parts, spec, ty);
    }
    let float_bytes = |p: &RawTensor<'_>| {
        matches!(p.dtype, RawDtype::F32 | RawDtype::F16 | RawDtype::BF16)
            && matches!(p.data, RawData::Bytes(_))
    };
    if parts.iter().all(float_bytes) {
        return float::upload_float_parts(up, options, name, parts, spec);
    }
    let part_rows = n / parts.len();
    let part_elems = match layout {
        MatrixLayout::Q4 { group } => part_rows * (k / group.max(1)),
        _ => part_rows * k,
    };
    if parts.len() > 1 && part_elems % 2 == 1 {
        // Parts meeting mid word (tiny test shapes only): prepared whole.
        let mut values = Vec::with_capacity(n * k);
        for part in parts {
            values.extend(part.to_f32()?);
        }
        return Uploaded::from_matrix(up.ctx, name, &Matrix::prepare(values, n, k, layout)?, use_);
    }
    upload_blocks(up, name, spec, parts.len(), &mut |p, rows| {
        parts[p].prepared_rows(rows, layout)
    })
}

/// Uploads an `[n, k]` matrix stacked from `parts` equal row blocks, a block of at most
/// [`BLOCK_BYTES`] of f32 rows (whole multiples of 64 rows) at a time, each block prepared
/// on the host by `produce(part, rows of that part)` in `layout`. A part's rows must start
/// on a whole scale word (`parts == 1`, or `n / parts * groups` even).
fn upload_blocks(
    up: &mut Uploader<'_>,
    name: &str,
    spec: MatrixSpec,
    parts: usize,
    produce: &mut dyn FnMut(usize, Range<usize>) -> Result<Matrix<'static>>,
) -> Result<Uploaded> {
    let MatrixSpec { n, k, layout, use_ } = spec;
    let part_elems = match layout {
        MatrixLayout::Q4 { group } => n / parts.max(1) * (k / group.max(1)),
        _ => n / parts.max(1) * k,
    };
    if parts == 0 || n % parts != 0 || k == 0 || (parts > 1 && part_elems % 2 == 1) {
        return Err(Error::invalid(
            "upload",
            format!("row blocks of a [{n}, {k}] matrix `{name}`"),
            "at least one, dividing the rows evenly, each starting on a whole word",
            parts,
        ));
    }
    let dest = Uploaded::zeros(up, name, n, k, layout, use_)?;
    let part_rows = n / parts;
    let block_rows = (BLOCK_BYTES / (4 * k) / 64 * 64).max(64);
    for p in 0..parts {
        let mut r0 = 0;
        while r0 < part_rows {
            let r1 = (r0 + block_rows).min(part_rows);
            let block = produce(p, r0..r1)?;
            if block.n != r1 - r0 || block.k != k || block.layout() != layout {
                return Err(Error::invalid(
                    "upload",
                    format!("block of rows {r0}..{r1} of part {p} of `{name}`"),
                    format!("[{}, {k}] in {layout:?}", r1 - r0),
                    format!("[{}, {}] in {:?}", block.n, block.k, block.layout()),
                ));
            }
            block.validate(name)?;
            dest.write_rows(up.ctx, p * part_rows + r0, &block)?;
            up.flush();
            r0 = r1;
        }
    }
    Ok(dest)
}

#[cfg(test)]
mod tests;
