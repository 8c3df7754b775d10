//! Harness cases for gather rows.

use super::{gather_rows, gather_rows_ref, RowTable};
use crate::error::{Error, Result};
use crate::gpu::{DType, GpuContext, Tensor};
use crate::harness::{Check, Expected, OpCase, Prepared, Rng, Values};
use half::f16;
use rand::Rng as _;

/// Gather `n_idx` rows of a `[rows, cols]` table of `table` dtype into `out` dtype.
pub struct GatherCase {
    pub rows: usize,
    pub cols: usize,
    pub n_idx: usize,
    pub table: DType,
    pub out: DType,
    /// Chunk limit for the table upload (`None`: the device's binding limit).
    pub max_chunk_bytes: Option<u64>,
    /// Mix in indices >= rows (their output rows must be zeros).
    pub out_of_range: bool,
    /// Distinct random index sets gathered in turn per run (all into the same output), so
    /// that a benchmark does not re-read rows that sit in L2; the check is against the last.
    pub index_sets: usize,
}

impl GatherCase {
    pub fn new(rows: usize, cols: usize, n_idx: usize, table: DType, out: DType) -> Self {
        GatherCase {
            rows,
            cols,
            n_idx,
            table,
            out,
            max_chunk_bytes: None,
            out_of_range: false,
            index_sets: 1,
        }
    }
}

enum HostTable {
    F16(Vec<f16>),
    F32(Vec<f32>),
    Words(Vec<u32>),
}

/// Cheap deterministic table words (a 768 MiB bench table is too slow to draw from the
/// seeded RNG): a hash of the element index and the seed.
fn hash(i: u64, seed: u64) -> u64 {
    let mut z = i.wrapping_add(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A finite, normal (or zero) f16 in (-2, 2): drivers may flush subnormals on unpack.
fn f16_from_hash(h: u64) -> f16 {
    let bits = (h as u16) & 0xbfff; // exponent <= 15 -> |x| < 2
    if bits & 0x7c00 == 0 {
        f16::from_bits(bits & 0x8000)
    } else {
        f16::from_bits(bits)
    }
}

impl OpCase for GatherCase {
    fn name(&self) -> String {
        format!(
            "gather_rows {:?}->{:?} table={}x{} idx={}{}{}{}",
            self.table,
            self.out,
            self.rows,
            self.cols,
            self.n_idx,
            match self.max_chunk_bytes {
                Some(b) => format!(" chunk<={b}B"),
                None => String::new(),
            },
            if self.out_of_range { " +oob" } else { "" },
            if self.index_sets > 1 {
                format!(" ({} index sets per run)", self.index_sets)
            } else {
                String::new()
            }
        )
    }

    fn prepare(&self, ctx: &GpuContext, rng: &mut Rng) -> Result<Prepared> {
        let numel = self.rows * self.cols;
        let seed: u64 = rng.random();
        let host = match self.table {
            DType::F16 => HostTable::F16(
                (0..numel as u64)
                    .map(|i| f16_from_hash(hash(i, seed)))
                    .collect(),
            ),
            DType::F32 => HostTable::F32(
                (0..numel as u64)
                    .map(|i| (hash(i, seed) % 20_001) as f32 * 1e-3 - 10.0)
                    .collect(),
            ),
            DType::U32 | DType::I32 => {
                HostTable::Words((0..numel as u64).map(|i| hash(i, seed) as u32).collect())
            }
        };
        let bytes: &[u8] = match &host {
            HostTable::F16(t) => bytemuck::cast_slice(t),
            HostTable::F32(t) => bytemuck::cast_slice(t),
            HostTable::Words(t) => bytemuck::cast_slice(t),
        };
        let table = RowTable::upload(
            ctx,
            "gather table",
            [self.rows, self.cols],
            self.table,
            bytes,
            self.max_chunk_bytes,
        )?;
        let out = Tensor::zeros(ctx, "gathered", &[self.n_idx, self.cols], self.out)?;
        let mut kernels = Vec::new();
        let mut last_idx = Vec::new();
        for set in 0..self.index_sets.max(1) {
            let idx: Vec<u32> = (0..self.n_idx)
                .map(|_| {
                    if self.out_of_range && rng.random_range(0..4) == 0 {
                        [self.rows as u32, self.rows as u32 + 7, u32::MAX][rng.random_range(0..3)]
                    } else {
                        rng.random_range(0..self.rows as u32)
                    }
                })
                .collect();
            let t = Tensor::from_u32(ctx, &format!("idx{set}"), &[self.n_idx], &idx)?;
            kernels.extend(gather_rows(ctx, &table, &t, &out)?.kernels);
            last_idx = idx;
        }
        let cols = self.cols;
        let (tensor, reference) = match (&host, self.out) {
            (HostTable::F32(t), DType::F32) => {
                (out, Values::F32(gather_rows_ref(t, cols, &last_idx)))
            }
            (HostTable::F16(t), DType::F32) => {
                let g = gather_rows_ref(t, cols, &last_idx);
                (out, Values::F32(g.iter().map(|h| h.to_f32()).collect()))
            }
            (HostTable::F16(t), DType::F16) => {
                // Even cols: compare the packed words bit for bit.
                let words: &[u32] = bytemuck::cast_slice(t);
                let g = gather_rows_ref(words, cols / 2, &last_idx);
                (
                    out.bitcast(&[self.n_idx * cols / 2], DType::U32)?,
                    Values::U32(g),
                )
            }
            (HostTable::Words(t), DType::U32) => {
                (out, Values::U32(gather_rows_ref(t, cols, &last_idx)))
            }
            (HostTable::Words(t), DType::I32) => (
                out,
                Values::I32(
                    gather_rows_ref(t, cols, &last_idx)
                        .into_iter()
                        .map(|w| w as i32)
                        .collect(),
                ),
            ),
            _ => {
                return Err(Error::invalid(
                    "gather_rows case",
                    "dtypes",
                    "a supported table/out pair",
                    format!("{:?} -> {:?}", self.table, self.out),
                ))
            }
        };
        let elem = |d: DType| if d == DType::F16 { 2 } else { 4 };
        let per_set =
            (self.n_idx * self.cols * (elem(self.table) + elem(self.out)) + 4 * self.n_idx) as u64;
        Ok(Prepared {
            kernels,
            outputs: vec![Expected {
                name: "out",
                tensor,
                reference,
                check: Check::Exact,
            }],
            bytes_moved: per_set * self.index_sets.max(1) as u64,
        })
    }
}

/// Random small tables of every dtype pair, chunked and not, with out-of-range indices.
pub fn random_cases(rng: &mut Rng) -> Vec<Box<dyn OpCase>> {
    let pairs = [
        (DType::F32, DType::F32),
        (DType::F16, DType::F16),
        (DType::F16, DType::F32),
        (DType::U32, DType::U32),
        (DType::I32, DType::I32),
    ];
    pairs
        .into_iter()
        .map(|(table, out)| {
            let rows = rng.random_range(1..300);
            let mut cols = rng.random_range(1..200);
            if (table, out) == (DType::F16, DType::F16) {
                cols += cols % 2;
            }
            let elem = if table == DType::F16 { 2 } else { 4 };
            let chunked = rng.random_range(0..2) == 0;
            Box::new(GatherCase {
                max_chunk_bytes: chunked.then(|| (rng.random_range(1..=rows) * cols * elem) as u64),
                out_of_range: rng.random_range(0..2) == 0,
                ..GatherCase::new(rows, cols, rng.random_range(1..200), table, out)
            }) as Box<dyn OpCase>
        })
        .collect()
}

/// E2B's centroid head: 4096 rows of the [262144, 1536] f16 lm_head (to f16 and to f32),
/// 8 index sets per run (8 x 12 MiB of rows: more than a 50 MB L2), and the
/// token_ordering gather (32 rows of [2048, 128] u32).
pub fn bench_cases() -> Vec<Box<dyn OpCase>> {
    vec![
        Box::new(GatherCase {
            index_sets: 8,
            ..GatherCase::new(262_144, 1536, 4096, DType::F16, DType::F16)
        }),
        Box::new(GatherCase {
            index_sets: 8,
            ..GatherCase::new(262_144, 1536, 4096, DType::F16, DType::F32)
        }),
        Box::new(GatherCase::new(2048, 128, 32, DType::U32, DType::U32)),
    ]
}
