//! Embedding gather: `out[t] = table[ids[t]] * scale` with token ids read from a GPU u32
//! buffer `[M]` (the sampled token never leaves the GPU), tables in f32, f16 or the
//! project's Q4, split by rows into chunks when larger than one storage binding.
//!
//! Scale (HF `Gemma4TextScaledWordEmbedding`): `embed_scale.to(weight.dtype)`, i.e. for the
//! bf16 checkpoints `bf16(sqrt(hidden))` (39.25 for E2B's 1536, not 39.19): the caller
//! passes it as an f32, see [`bf16_embed_scale`]. The per-layer table
//! (`embed_tokens_per_layer`, `[vocab_per_layer, layers * ple_dim]`) uses
//! `bf16(sqrt(ple_dim))` = 16 for ple_dim 256 ([`per_layer_embedding`]); HF then reshapes it
//! to `[M, layers, ple_dim]` (the same memory as our `[M, layers * ple_dim]`).
//!
//! Chunked tables: one dispatch per chunk, each covering all M tokens and writing only the
//! tokens whose id falls in its row range. Ids `>= vocab` never read the table: their row is
//! written as zeros (by the first chunk's dispatch), so every output row is written exactly
//! once. [`write_token_ids`] validates host ids before upload and refuses out-of-range ones.

mod reference;
mod table;

pub use reference::{bf16_embed_scale, dequant_q4_row, gather_ref};
pub use table::{EmbeddingTable, TableChunk, TableFormat, TableRows};

use crate::error::{Error, Result};
use crate::gpu::{workgroups_for, DType, GpuContext, Kernel, KernelBuilder, Tensor};
use crate::harness::{Check, Expected, OpCase, Prepared, Rng, Values};
use half::f16;
use rand::Rng as _;

const SHADER: &str = "embedding";
const WORKGROUP: u32 = 256;

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    d: u32,
    m: u32,
    row_start: u32,
    row_end: u32,
    vocab: u32,
    zero_oob: u32,
    units: u32,
    wg_per_token: u32,
    scales_per_row: u32,
    group: u32,
    scale: f32,
    _pad: u32,
}

fn check_ids(ids: &Tensor) -> Result<()> {
    if !matches!(ids.dtype(), DType::U32 | DType::I32) {
        return Err(Error::invalid(
            SHADER,
            "dtype of ids",
            "u32 (or i32)",
            format!("{:?}", ids.dtype()),
        ));
    }
    Ok(())
}

/// `out[t, :] = table[ids[t], :] * scale` for `ids` u32 (or i32) `[M]` and `out` f32
/// `[M, dim]`; one kernel per table chunk, to be dispatched in order in one pass. Ids
/// `>= table.rows()` (negative i32 included) give zero rows.
pub fn embedding(
    ctx: &GpuContext,
    table: &EmbeddingTable,
    ids: &Tensor,
    out: &Tensor,
    scale: f32,
) -> Result<Vec<Kernel>> {
    check_ids(ids)?;
    if out.dtype() != DType::F32 {
        return Err(Error::invalid(
            SHADER,
            "dtype of out",
            "f32",
            format!("{:?}", out.dtype()),
        ));
    }
    let (m, dim) = (ids.numel(), table.dim());
    if out.numel() != m * dim {
        return Err(Error::invalid(
            SHADER,
            format!("element count of out (M = {m} ids x dim {dim})"),
            m * dim,
            format!("{} (shape {:?})", out.numel(), out.shape()),
        ));
    }
    if !scale.is_finite() {
        return Err(Error::invalid(SHADER, "scale", "finite", scale));
    }
    let format = table.format();
    let (entry, units, group) = match format {
        TableFormat::F32 => ("gather_f32", dim, 0),
        TableFormat::F16 => ("gather_f16", dim / 2, 0),
        TableFormat::Q4 { group } => ("gather_q4", dim / 8, group),
    };
    let wg_per_token = workgroups_for(units as u64, WORKGROUP);
    table
        .chunks()
        .iter()
        .enumerate()
        .map(|(i, chunk)| {
            let params = Params {
                d: dim as u32,
                m: m as u32,
                row_start: chunk.rows.start as u32,
                row_end: chunk.rows.end as u32,
                vocab: table.rows() as u32,
                zero_oob: (i == 0) as u32,
                units: units as u32,
                wg_per_token: wg_per_token as u32,
                scales_per_row: format.scales_per_row(dim) as u32,
                group: group as u32,
                scale,
                _pad: 0,
            };
            let builder = KernelBuilder::new(ctx, SHADER)
                .entry(entry)
                .uniform(&params)
                .tensor(ids)
                .tensor(&chunk.data)
                .tensor(out);
            let builder = match &chunk.scales {
                Some(s) => builder.tensor(s),
                None => builder,
            };
            builder.build_1d(m as u64 * wg_per_token)
        })
        .collect()
}

/// Gemma 4's per-layer-embedding lookup (HF `get_per_layer_inputs`): the gather over
/// `embed_tokens_per_layer` (`dim = layers * ple_dim`) scaled by `bf16(sqrt(ple_dim))`,
/// into `out` `[M, layers * ple_dim]` (row-major, i.e. HF's `[M, layers, ple_dim]`).
pub fn per_layer_embedding(
    ctx: &GpuContext,
    table: &EmbeddingTable,
    ids: &Tensor,
    out: &Tensor,
    layers: usize,
    ple_dim: usize,
) -> Result<Vec<Kernel>> {
    if layers == 0 || ple_dim == 0 || table.dim() != layers * ple_dim {
        return Err(Error::invalid(
            SHADER,
            "per-layer table dim",
            format!("layers x ple_dim = {layers} x {ple_dim}"),
            table.dim(),
        ));
    }
    embedding(ctx, table, ids, out, bf16_embed_scale(ple_dim))
}

/// Validates host token ids against `vocab` and writes them into `ids` (u32 or i32, exactly
/// `tokens.len()` elements) through the queue.
pub fn write_token_ids(ctx: &GpuContext, ids: &Tensor, tokens: &[u32], vocab: usize) -> Result<()> {
    check_ids(ids)?;
    if ids.numel() != tokens.len() {
        return Err(Error::invalid(
            SHADER,
            "token count",
            ids.numel(),
            tokens.len(),
        ));
    }
    let limit = vocab.min(if ids.dtype() == DType::I32 {
        i32::MAX as usize
    } else {
        usize::MAX
    });
    if let Some((pos, &tok)) = tokens
        .iter()
        .enumerate()
        .find(|(_, &t)| t as usize >= limit)
    {
        return Err(Error::invalid(
            SHADER,
            format!("token id at position {pos}"),
            format!("< vocab {vocab}"),
            tok,
        ));
    }
    ids.write_bytes(ctx, bytemuck::cast_slice(tokens));
    Ok(())
}

/// Harness case: a `[vocab, dim]` table in `format`, `m` ids (including the first, last
/// and chunk-boundary rows; with `out_of_range`, ids `vocab` and `u32::MAX` too).
pub struct EmbeddingCase {
    pub vocab: usize,
    pub dim: usize,
    pub m: usize,
    pub format: TableFormat,
    pub max_chunk_bytes: Option<u64>,
    pub out_of_range: bool,
    pub scale: f32,
}

impl EmbeddingCase {
    pub fn new(vocab: usize, dim: usize, m: usize, format: TableFormat) -> Self {
        EmbeddingCase {
            vocab,
            dim,
            m,
            format,
            max_chunk_bytes: None,
            out_of_range: false,
            scale: bf16_embed_scale(dim),
        }
    }
}

/// Host rows of one table block, in `format`, and their dequantised values.
fn random_block(
    rng: &mut Rng,
    rows: usize,
    dim: usize,
    format: TableFormat,
) -> (Block, Vec<Vec<f32>>) {
    match format {
        TableFormat::F32 => {
            let v: Vec<f32> = (0..rows * dim)
                .map(|_| rng.random_range(-1.0..1.0))
                .collect();
            let deq = v.chunks(dim).map(|r| r.to_vec()).collect();
            (Block::F32(v), deq)
        }
        TableFormat::F16 => {
            let v: Vec<f16> = (0..rows * dim)
                .map(|_| f16::from_f32(rng.random_range(-1.0..1.0)))
                .collect();
            let deq = v
                .chunks(dim)
                .map(|r| r.iter().map(|h| h.to_f32()).collect())
                .collect();
            (Block::F16(v), deq)
        }
        TableFormat::Q4 { group } => {
            let words: Vec<u32> = (0..rows * dim / 8).map(|_| rng.random()).collect();
            let scales: Vec<f16> = (0..rows * dim / group)
                .map(|_| f16::from_f32(rng.random_range(0.001..0.1)))
                .collect();
            let deq = words
                .chunks(dim / 8)
                .zip(scales.chunks(dim / group))
                .map(|(w, s)| dequant_q4_row(w, s, group))
                .collect();
            (Block::Q4(words, scales), deq)
        }
    }
}

enum Block {
    F32(Vec<f32>),
    F16(Vec<f16>),
    Q4(Vec<u32>, Vec<f16>),
}

impl Block {
    fn rows(&self, dim: usize, format: TableFormat, n: usize) -> TableRows<'_> {
        match self {
            Block::F32(v) => TableRows::F32(&v[..n * dim]),
            Block::F16(v) => TableRows::F16(&v[..n * dim]),
            Block::Q4(w, s) => TableRows::Q4 {
                words: &w[..n * dim / 8],
                scales: &s[..n * format.scales_per_row(dim)],
            },
        }
    }
}

impl OpCase for EmbeddingCase {
    fn name(&self) -> String {
        format!(
            "embedding {:?} vocab={} dim={} m={} chunk_bytes={:?} oob={}",
            self.format, self.vocab, self.dim, self.m, self.max_chunk_bytes, self.out_of_range
        )
    }

    fn prepare(&self, ctx: &GpuContext, rng: &mut Rng) -> Result<Prepared> {
        let (vocab, dim, m, format) = (self.vocab, self.dim, self.m, self.format);
        let table = EmbeddingTable::new(ctx, "table", vocab, dim, format, self.max_chunk_bytes)?;
        // Big (benchmark) tables repeat a random block of rows: cheap to build on the host.
        let block_rows = if vocab * dim <= 1 << 22 { vocab } else { 1024 };
        let (block, deq) = random_block(rng, block_rows, dim, format);
        for start in (0..vocab).step_by(block_rows) {
            let n = block_rows.min(vocab - start);
            table.write_rows(ctx, start, block.rows(dim, format, n))?;
        }
        let mut ids: Vec<u32> = (0..m).map(|_| rng.random_range(0..vocab as u32)).collect();
        let mut special = vec![0, vocab - 1];
        for c in &table.chunks()[1..] {
            special.extend([c.rows.start - 1, c.rows.start]);
        }
        if self.out_of_range {
            special.extend([vocab, u32::MAX as usize]);
        }
        for (slot, id) in ids.iter_mut().rev().zip(special.into_iter().rev()) {
            *slot = id as u32;
        }
        let t_ids = Tensor::from_u32(ctx, "ids", &[m], &ids)?;
        // NaN-filled, so a row no dispatch writes fails the comparison.
        let out = Tensor::from_f32(ctx, "out", &[m, dim], &vec![f32::NAN; m * dim])?;
        let kernels = embedding(ctx, &table, &t_ids, &out, self.scale)?;
        let reference = gather_ref(vocab, dim, &ids, self.scale, |r| {
            deq[r % block_rows].clone()
        });
        let row_bytes = format.row_bytes(dim) + 2 * format.scales_per_row(dim) as u64;
        Ok(Prepared {
            kernels,
            outputs: vec![Expected {
                name: "out",
                tensor: out,
                reference: Values::F32(reference),
                check: Check::Close {
                    max_abs: 1e-6 * self.scale.abs().max(1.0),
                    nmse: 1e-12,
                },
            }],
            bytes_moved: m as u64 * (4 + row_bytes + 4 * dim as u64),
        })
    }
}

/// All three formats over random small tables, split into several chunks by a small
/// chunk limit, with ids at the chunk boundaries and (for one case) out of range.
pub fn random_cases(rng: &mut Rng) -> Vec<Box<dyn OpCase>> {
    let group = [8, 16, 32][rng.random_range(0..3)];
    let formats = [
        (TableFormat::F32, rng.random_range(1..300)),
        (TableFormat::F16, 2 * rng.random_range(1..150)),
        (TableFormat::Q4 { group }, group * rng.random_range(1..12)),
    ];
    let oob = rng.random_range(0..3);
    formats
        .into_iter()
        .enumerate()
        .map(|(i, (format, dim))| {
            let vocab = rng.random_range(2..200);
            let mut case = EmbeddingCase::new(vocab, dim, rng.random_range(1..9), format);
            let row_bytes = format
                .row_bytes(dim)
                .max(2 * format.scales_per_row(dim) as u64);
            // 1 to ~6 chunks (at least 2 rows each, for Q4 tables with odd scales per row).
            let rows_per_chunk = (vocab / rng.random_range(1..6)).max(2);
            case.max_chunk_bytes = Some(row_bytes * rows_per_chunk as u64);
            case.out_of_range = i == oob;
            case.scale = rng.random_range(0.5..50.0);
            Box::new(case) as Box<dyn OpCase>
        })
        .collect()
}

/// E2B: the 262144 x 1536 table in f16 and Q4 (group 32) for decode (M = 1) and a 512-token
/// prefill, and the 262144 x (35 x 256) per-layer table in Q4. The table is far larger than
/// L2, but a gather reads only M rows: these measure dispatch cost, not bandwidth.
pub fn bench_cases() -> Vec<Box<dyn OpCase>> {
    let mut cases: Vec<Box<dyn OpCase>> = Vec::new();
    for format in [TableFormat::F16, TableFormat::Q4 { group: 32 }] {
        for m in [1, 512] {
            cases.push(Box::new(EmbeddingCase::new(262_144, 1536, m, format)));
        }
    }
    let mut ple = EmbeddingCase::new(262_144, 35 * 256, 1, TableFormat::Q4 { group: 32 });
    ple.scale = bf16_embed_scale(256);
    cases.push(Box::new(ple));
    cases
}

#[cfg(test)]
mod tests;
