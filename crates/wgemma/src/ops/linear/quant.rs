//! The Q4 group-wise symmetric format on the host: quantisation, dequantisation and the
//! GPU upload (split into row chunks when one binding cannot hold the weight).
//!
//! The format (a project-wide contract, mirrored by the golden-fixture script):
//! - W is `[N, K]`, `K % 8 == 0`, group size `g` divides `K`. Model artifacts and the
//!   fixtures use `g` in {32, 64, 128}; any positive multiple of 8 is accepted here, because
//!   that is all the kernels need (it lets tests reach `K % 32 != 0`).
//! - `scale[n, j] = f16(max_abs(W[n, j*g .. (j+1)*g]) / 7.0)`, computed in f32 and rounded
//!   to nearest-even f16.
//! - `q = clamp(round_ties_even(w / f32(scale)), -8, 7)`, and `q = 0` when `scale == 0`;
//!   the stored nibble is `q + 8`.
//! - `packed`: u32 words, row-major `[N, K/8]`; word `w` of row `n` holds `k = 8w .. 8w+7`,
//!   `k = 8w + i` in bits `4i .. 4i+3` (so even `k` sits in the low nibble of each byte).
//! - `scales`: f16 `[N, K/g]` row-major (flat element `e = n * K/g + j`), two per u32 word,
//!   element `e` in the low 16 bits of word `e / 2` when `e` is even. The last word is
//!   zero-padded when `N * K/g` is odd.
//! - dequantised `w = (nibble - 8) * f32(scale)`.

use crate::error::{Error, Result};
use crate::gpu::{plan_row_chunks, GpuContext, Tensor};
use half::f16;
use std::ops::Range;

const OP: &str = "q4";

/// Chunk boundaries are multiples of this many rows: even (so a chunk's scales start on a
/// whole u32 word) and a multiple of every kernel's row tile.
pub const CHUNK_ROW_MULTIPLE: usize = 64;

/// A Q4 weight on the host, in the packed layout the kernels read.
#[derive(Debug, Clone, PartialEq)]
pub struct Q4Host {
    pub n: usize,
    pub k: usize,
    pub group: usize,
    /// `[N, K/8]` words.
    pub packed: Vec<u32>,
    /// `ceil(N * K/g / 2)` words of f16 pairs.
    pub scales: Vec<u32>,
}

fn check_dims(n: usize, k: usize, group: usize) -> Result<()> {
    if n == 0 {
        return Err(Error::invalid(OP, "rows N", ">= 1", n));
    }
    if k == 0 || k % 8 != 0 {
        return Err(Error::invalid(
            OP,
            "columns K",
            "a positive multiple of 8",
            k,
        ));
    }
    if group == 0 || group % 8 != 0 {
        return Err(Error::invalid(
            OP,
            "group size",
            "a positive multiple of 8 (32, 64 or 128 in model artifacts)",
            group,
        ));
    }
    if k % group != 0 {
        return Err(Error::invalid(
            OP,
            format!("K % group (K = {k})"),
            0,
            k % group,
        ));
    }
    Ok(())
}

impl Q4Host {
    /// Wraps packed words and scale words after checking their lengths.
    pub fn from_parts(
        n: usize,
        k: usize,
        group: usize,
        packed: Vec<u32>,
        scales: Vec<u32>,
    ) -> Result<Q4Host> {
        check_dims(n, k, group)?;
        if packed.len() != n * k / 8 {
            return Err(Error::invalid(
                OP,
                "packed words (N * K/8)",
                n * k / 8,
                packed.len(),
            ));
        }
        let scale_words = (n * (k / group)).div_ceil(2);
        if scales.len() != scale_words {
            return Err(Error::invalid(
                OP,
                "scale words (ceil(N * K/g / 2))",
                scale_words,
                scales.len(),
            ));
        }
        Ok(Q4Host {
            n,
            k,
            group,
            packed,
            scales,
        })
    }

    /// Scale groups per row (`K / g`).
    pub fn groups(&self) -> usize {
        self.k / self.group
    }

    /// `f32(scale[n, j])`.
    pub fn scale(&self, n: usize, j: usize) -> f32 {
        let e = n * self.groups() + j;
        let word = self.scales[e / 2];
        f16::from_bits((word >> (16 * (e % 2))) as u16).to_f32()
    }

    /// The stored nibble (`q + 8`) of `W[n, k]`.
    pub fn nibble(&self, n: usize, k: usize) -> u32 {
        (self.packed[n * self.k / 8 + k / 8] >> (4 * (k % 8))) & 15
    }

    /// One dequantised row, `(nibble - 8) * scale`.
    pub fn dequantize_row(&self, n: usize, out: &mut [f32]) {
        for (k, o) in out.iter_mut().enumerate().take(self.k) {
            *o = (self.nibble(n, k) as f32 - 8.0) * self.scale(n, k / self.group);
        }
    }

    pub fn packed_bytes(&self) -> u64 {
        self.packed.len() as u64 * 4
    }

    pub fn scale_bytes(&self) -> u64 {
        self.scales.len() as u64 * 4
    }
}

/// Quantises a row-major `[n, k]` f32 weight to Q4 with groups of `group` columns.
/// Non-finite weights and scales beyond f16 range are refused.
pub fn quantize_q4(w: &[f32], n: usize, k: usize, group: usize) -> Result<Q4Host> {
    check_dims(n, k, group)?;
    if w.len() != n * k {
        return Err(Error::invalid(
            OP,
            "weight elements (N * K)",
            n * k,
            w.len(),
        ));
    }
    if let Some(i) = w.iter().position(|v| !v.is_finite()) {
        return Err(Error::invalid(
            OP,
            format!("weight [{}, {}]", i / k, i % k),
            "a finite value",
            w[i],
        ));
    }
    let groups = k / group;
    let mut packed = vec![0u32; n * k / 8];
    let mut scale_bits = vec![0u16; n * groups];
    // Rows are independent: large weights (lm_head, per-layer embeddings) are quantised on
    // all cores natively; wasm32 has no threads to spare.
    let threads = if cfg!(target_arch = "wasm32") || n * k < (1 << 22) {
        1
    } else {
        std::thread::available_parallelism()
            .map_or(1, |t| t.get())
            .min(32)
    };
    let rows_per_task = n.div_ceil(threads);
    let tasks = packed
        .chunks_mut(rows_per_task * k / 8)
        .zip(scale_bits.chunks_mut(rows_per_task * groups))
        .enumerate();
    let quantize = |(t, (packed, scale_bits)): (usize, (&mut [u32], &mut [u16]))| {
        quantize_rows(
            &w[t * rows_per_task * k..],
            t * rows_per_task,
            k,
            group,
            packed,
            scale_bits,
        )
    };
    if threads == 1 {
        tasks.map(quantize).collect::<Result<Vec<()>>>()?;
    } else {
        std::thread::scope(|scope| {
            let handles: Vec<_> = tasks
                .map(|task| scope.spawn(move || quantize(task)))
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("quantisation thread panicked"))
                .collect::<Result<Vec<()>>>()
        })?;
    }
    Q4Host::from_parts(n, k, group, packed, pack_scale_halves(&scale_bits))
}

/// The Q4 format's scale words: f16 bit patterns two per u32, the first in the low half, an
/// odd last one padded with zero.
pub fn pack_scale_halves(halves: &[u16]) -> Vec<u32> {
    halves
        .chunks(2)
        .map(|p| p[0] as u32 | (p.get(1).copied().unwrap_or(0) as u32) << 16)
        .collect()
}

/// Quantises the rows held by `packed` (`[rows, k/8]`) and `scale_bits` (`[rows, k/group]`),
/// whose first row is `first_row` of the weight (for error messages); `w` starts at it.
fn quantize_rows(
    w: &[f32],
    first_row: usize,
    k: usize,
    group: usize,
    packed: &mut [u32],
    scale_bits: &mut [u16],
) -> Result<()> {
    let groups = k / group;
    for r in 0..scale_bits.len() / groups {
        for j in 0..groups {
            let cols = j * group..(j + 1) * group;
            let block = &w[r * k + cols.start..r * k + cols.end];
            let max_abs = block.iter().fold(0.0f32, |m, v| m.max(v.abs()));
            let scale = f16::from_f32(max_abs / 7.0);
            if scale.is_infinite() {
                return Err(Error::invalid(
                    OP,
                    format!(
                        "max |w| of row {} group {j} (its scale must fit f16)",
                        first_row + r
                    ),
                    "<= 7 * 65504",
                    max_abs,
                ));
            }
            scale_bits[r * groups + j] = scale.to_bits();
            let s = scale.to_f32();
            for (c, &v) in cols.zip(block) {
                let q = if s == 0.0 {
                    0
                } else {
                    (v / s).round_ties_even().clamp(-8.0, 7.0) as i32
                };
                let nibble = (q + 8) as u32;
                packed[r * k / 8 + c / 8] |= nibble << (4 * (c % 8));
            }
        }
    }
    Ok(())
}

/// The dequantised row-major `[n, k]` weight.
pub fn dequantize_q4(q: &Q4Host) -> Vec<f32> {
    let mut out = vec![0.0f32; q.n * q.k];
    for (n, row) in out.chunks_mut(q.k).enumerate() {
        q.dequantize_row(n, row);
    }
    out
}

/// The words of a Q4 weight, borrowed: what [`Q4Weight::upload_words`] uploads.
#[derive(Debug, Clone, Copy)]
pub struct Q4Words<'a> {
    pub n: usize,
    pub k: usize,
    pub group: usize,
    /// `[N, K/8]` words.
    pub packed: &'a [u32],
    /// `ceil(N * K/g / 2)` words of f16 pairs.
    pub scales: &'a [u32],
}

impl Q4Words<'_> {
    /// The dimension and length checks of [`Q4Host::from_parts`].
    fn check(&self) -> Result<()> {
        let (n, k, group) = (self.n, self.k, self.group);
        check_dims(n, k, group)?;
        if self.packed.len() != n * k / 8 {
            return Err(Error::invalid(
                OP,
                "packed words (N * K/8)",
                n * k / 8,
                self.packed.len(),
            ));
        }
        let scale_words = (n * (k / group)).div_ceil(2);
        if self.scales.len() != scale_words {
            return Err(Error::invalid(
                OP,
                "scale words (ceil(N * K/g / 2))",
                scale_words,
                self.scales.len(),
            ));
        }
        Ok(())
    }
}

/// One row range of a [`Q4Weight`], in its own buffers.
#[derive(Debug, Clone)]
pub struct Q4Chunk {
    pub rows: Range<usize>,
    /// `[rows, K/8]` u32.
    pub packed: Tensor,
    /// The chunk's scale words (its first scale is in the low half of word 0).
    pub scales: Tensor,
}

/// A Q4 weight uploaded once, split into row chunks that each fit one storage binding.
#[derive(Debug, Clone)]
pub struct Q4Weight {
    n: usize,
    k: usize,
    group: usize,
    chunks: Vec<Q4Chunk>,
}

impl Q4Weight {
    /// Uploads with the device's binding limit as the split threshold.
    pub fn upload(ctx: &GpuContext, host: &Q4Host) -> Result<Q4Weight> {
        let max = ctx
            .limits
            .max_storage_buffer_binding_size
            .min(ctx.limits.max_buffer_size);
        Q4Weight::upload_with_max_binding(ctx, host, max)
    }

    /// Uploads with chunks of at most `max_binding` bytes each (packed and scales alike);
    /// tests pass a small value to force a split. Chunk starts are multiples of
    /// [`CHUNK_ROW_MULTIPLE`] rows.
    pub fn upload_with_max_binding(
        ctx: &GpuContext,
        host: &Q4Host,
        max_binding: u64,
    ) -> Result<Q4Weight> {
        let words = Q4Words {
            n: host.n,
            k: host.k,
            group: host.group,
            packed: &host.packed,
            scales: &host.scales,
        };
        Q4Weight::upload_words_with_max_binding(ctx, words, max_binding)
    }

    /// Uploads borrowed packed and scale words (a model artifact's memory map) without
    /// copying them into a [`Q4Host`] first.
    pub fn upload_words(ctx: &GpuContext, words: Q4Words<'_>) -> Result<Q4Weight> {
        let max = ctx
            .limits
            .max_storage_buffer_binding_size
            .min(ctx.limits.max_buffer_size);
        Q4Weight::upload_words_with_max_binding(ctx, words, max)
    }

    fn upload_words_with_max_binding(
        ctx: &GpuContext,
        host: Q4Words<'_>,
        max_binding: u64,
    ) -> Result<Q4Weight> {
        host.check()?;
        // Packed bytes per row (K/2) bound the scale bytes per row (2K/g) since g >= 8.
        let row_bytes = host.k as u64 / 2;
        let ranges = plan_row_chunks(host.n, row_bytes, max_binding, CHUNK_ROW_MULTIPLE)?;
        let words_per_row = host.k / 8;
        let groups = host.k / host.group;
        let mut chunks = Vec::with_capacity(ranges.len());
        for (c, rows) in ranges.into_iter().enumerate() {
            let packed = &host.packed[rows.start * words_per_row..rows.end * words_per_row];
            // rows.start is even, so its first scale starts a word.
            let first = rows.start * groups / 2;
            let last = (rows.end * groups).div_ceil(2);
            let scales = &host.scales[first..last];
            chunks.push(Q4Chunk {
                packed: Tensor::from_u32(
                    ctx,
                    &format!("q4 packed chunk {c}"),
                    &[rows.len(), words_per_row],
                    packed,
                )?,
                scales: Tensor::from_u32(
                    ctx,
                    &format!("q4 scales chunk {c}"),
                    &[scales.len()],
                    scales,
                )?,
                rows,
            });
        }
        Ok(Q4Weight {
            n: host.n,
            k: host.k,
            group: host.group,
            chunks,
        })
    }

    /// A zeroed `[n, k]` weight in the row chunks [`Q4Weight::upload_words`] would use, for a
    /// loader that writes it a block of rows at a time ([`Q4Weight::write_rows`], or the GPU
    /// quantiser straight into [`Q4Weight::chunks`]).
    pub fn zeros(ctx: &GpuContext, n: usize, k: usize, group: usize) -> Result<Q4Weight> {
        let max = ctx
            .limits
            .max_storage_buffer_binding_size
            .min(ctx.limits.max_buffer_size);
        Q4Weight::zeros_with_max_binding(ctx, n, k, group, max)
    }

    /// [`Q4Weight::zeros`] with chunks of at most `max_binding` bytes (tests force splits).
    pub fn zeros_with_max_binding(
        ctx: &GpuContext,
        n: usize,
        k: usize,
        group: usize,
        max: u64,
    ) -> Result<Q4Weight> {
        check_dims(n, k, group)?;
        let ranges = plan_row_chunks(n, k as u64 / 2, max, CHUNK_ROW_MULTIPLE)?;
        let groups = k / group;
        let chunks = ranges
            .into_iter()
            .enumerate()
            .map(|(c, rows)| {
                let scale_words = (rows.end * groups).div_ceil(2) - rows.start * groups / 2;
                Ok(Q4Chunk {
                    packed: Tensor::zeros(
                        ctx,
                        &format!("q4 packed chunk {c}"),
                        &[rows.len(), k / 8],
                        crate::gpu::DType::U32,
                    )?,
                    scales: Tensor::zeros(
                        ctx,
                        &format!("q4 scales chunk {c}"),
                        &[scale_words],
                        crate::gpu::DType::U32,
                    )?,
                    rows,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Q4Weight {
            n,
            k,
            group,
            chunks,
        })
    }

    /// Writes the Q4 words of rows `first_row..` (`packed` `[rows, K/8]`, `scales` the
    /// rows' scale words) through the queue. The rows' first scale must start a word
    /// (`first_row * K/g` even), and their scale count must be even unless they end the
    /// weight (two rows can share a word).
    pub fn write_rows(
        &self,
        ctx: &GpuContext,
        first_row: usize,
        packed: &[u32],
        scales: &[u32],
    ) -> Result<()> {
        let (wpr, groups) = (self.k / 8, self.k / self.group);
        let rows = packed.len() / wpr;
        let end = first_row + rows;
        let whole = packed.len() % wpr == 0 && end <= self.n;
        let aligned = (first_row * groups) % 2 == 0 && ((rows * groups) % 2 == 0 || end == self.n);
        if !whole || !aligned || scales.len() != (rows * groups).div_ceil(2) {
            return Err(Error::invalid(
                OP,
                format!("rows written to a [{}, {}] weight", self.n, self.k),
                "whole rows inside it, starting and ending on whole scale words",
                format!(
                    "rows {first_row}..{end} with {} packed and {} scale words",
                    packed.len(),
                    scales.len()
                ),
            ));
        }
        for c in &self.chunks {
            let (lo, hi) = (first_row.max(c.rows.start), end.min(c.rows.end));
            if lo >= hi {
                continue;
            }
            let src = (lo - first_row) * wpr..(hi - first_row) * wpr;
            let dst = ((lo - c.rows.start) * wpr * 4) as u64;
            ctx.queue
                .write_buffer(c.packed.buffer(), dst, bytemuck::cast_slice(&packed[src]));
            let s = (lo - first_row) * groups / 2..((hi - first_row) * groups).div_ceil(2);
            let dst = ((lo - c.rows.start) * groups / 2 * 4) as u64;
            ctx.queue
                .write_buffer(c.scales.buffer(), dst, bytemuck::cast_slice(&scales[s]));
        }
        Ok(())
    }

    pub fn n(&self) -> usize {
        self.n
    }
    pub fn k(&self) -> usize {
        self.k
    }
    pub fn group(&self) -> usize {
        self.group
    }
    pub fn chunks(&self) -> &[Q4Chunk] {
        &self.chunks
    }
    /// Bytes a full read moves: packed words plus scale words of every chunk.
    pub fn bytes(&self) -> u64 {
        self.chunks
            .iter()
            .map(|c| c.packed.byte_size() + c.scales.byte_size())
            .sum()
    }
}
