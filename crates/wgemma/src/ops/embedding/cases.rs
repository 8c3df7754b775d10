//! Harness cases of the embedding gather: every table format, chunked tables and out-of-range
//! ids vs [`gather_ref`].

use super::{
    bf16_embed_scale, dequant_q4_row, embedding, gather_ref, EmbeddingTable, TableFormat, TableRows,
};
use crate::error::Result;
use crate::gpu::{GpuContext, Tensor};
use crate::harness::{Check, Expected, OpCase, Prepared, Rng, Values};
use crate::ops::ggml_linear::blocks::{dequantize_to_vec, GgmlType};
use crate::ops::ggml_linear::{random_blocks, GgmlWeight};
use half::f16;
use rand::Rng as _;

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
) -> Result<(Block, Vec<Vec<f32>>)> {
    Ok(match format {
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
        TableFormat::Ggml(_) => {
            return Err(crate::Error::invalid(
                "embedding case",
                "table format of a random block",
                "f32, f16 or q4 (ggml tables are uploaded as blocks)",
                format!("{format:?}"),
            ))
        }
    })
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
        let (table, deq, block_rows) = self.table(ctx, rng)?;
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
        // ggml rows reach ~40: the tolerance scales with the values.
        let magnitude = deq.iter().flatten().fold(1.0f32, |m, v| m.max(v.abs()));
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
                    max_abs: 1e-6 * self.scale.abs().max(1.0) * magnitude,
                    nmse: 1e-12,
                },
            }],
            bytes_moved: m as u64 * (4 + row_bytes + 4 * dim as u64),
        })
    }
}

impl EmbeddingCase {
    /// The case's table with random rows, their dequantised values, and the rows those
    /// values repeat after (big benchmark tables repeat a random block: cheap to build).
    fn table(
        &self,
        ctx: &GpuContext,
        rng: &mut Rng,
    ) -> Result<(EmbeddingTable, Vec<Vec<f32>>, usize)> {
        let (vocab, dim, format) = (self.vocab, self.dim, self.format);
        if let TableFormat::Ggml(ty) = format {
            let blocks = random_blocks(rng, ty, vocab, dim);
            let w = GgmlWeight::upload(ctx, ty, vocab, dim, &blocks, self.max_chunk_bytes)?;
            let deq = dequantize_to_vec(ty, &blocks)?;
            let rows = deq.chunks(dim).map(|r| r.to_vec()).collect();
            return Ok((EmbeddingTable::from_ggml(&w), rows, vocab));
        }
        let table = EmbeddingTable::new(ctx, "table", vocab, dim, format, self.max_chunk_bytes)?;
        let block_rows = if vocab * dim <= 1 << 22 { vocab } else { 1024 };
        let (block, deq) = random_block(rng, block_rows, dim, format)?;
        for start in (0..vocab).step_by(block_rows) {
            let n = block_rows.min(vocab - start);
            table.write_rows(ctx, start, block.rows(dim, format, n))?;
        }
        Ok((table, deq, block_rows))
    }
}

/// Every format (two ggml types) over random small tables, split into several chunks by a small
/// chunk limit, with ids at the chunk boundaries and (for one case) out of range.
pub fn random_cases(rng: &mut Rng) -> Vec<Box<dyn OpCase>> {
    let group = [8, 16, 32][rng.random_range(0..3)];
    let formats = [
        (TableFormat::F32, rng.random_range(1..300)),
        (TableFormat::F16, 2 * rng.random_range(1..150)),
        (TableFormat::Q4 { group }, group * rng.random_range(1..12)),
        (
            TableFormat::Ggml(GgmlType::Q8_0),
            32 * rng.random_range(1..6),
        ),
        (
            TableFormat::Ggml(GgmlType::Q6_K),
            256 * rng.random_range(1..3),
        ),
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
            // 1 to ~6 chunks (at least 2 rows each, for Q4 tables with odd scales per row;
            // ggml tables split at multiples of 64 rows).
            let rows_per_chunk = match format {
                TableFormat::Ggml(_) => 64 * rng.random_range(1..3),
                _ => (vocab / rng.random_range(1..6)).max(2),
            };
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
