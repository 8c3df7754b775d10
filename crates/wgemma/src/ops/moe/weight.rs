//! Expert weights `[E, N, K]` (HF `gate_up_proj` `[E, 2I, H]`, `down_proj` `[E, H, I]`) on
//! the host and on the GPU, in f32, f16 or the project's Q4 ([`crate::ops::linear::quant`]
//! over the `[E * N, K]` matrix: expert `e`'s rows start at `e * N`; groups never cross a
//! row, so this is the same as quantising each expert alone).
//!
//! On the GPU a weight is split into chunks of whole experts, each in its own buffers and
//! each fitting one storage binding; the gathered-expert linear builds one kernel per chunk
//! and each kernel skips the slots whose expert lies outside its range.

use crate::error::{Error, Result};
use crate::gpu::{plan_row_chunks, GpuContext, Tensor};
use crate::ops::linear::{quantize_q4, Q4Host};
use half::f16;
use std::ops::Range;

const OP: &str = "moe_expert_weight";

/// How expert weights are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ExpertFormat {
    F32,
    F16,
    /// The project's Q4 with this group size (32, 64 or 128 in model artifacts).
    Q4 {
        group: usize,
    },
}

/// The element data of an [`ExpertHost`].
#[derive(Debug, Clone, PartialEq)]
pub enum ExpertData {
    /// Row-major `[E, N, K]`.
    F32(Vec<f32>),
    /// Row-major `[E, N, K]`.
    F16(Vec<f16>),
    /// `[E * N, K]`.
    Q4(Q4Host),
}

/// An expert weight `[E, N, K]` on the host.
#[derive(Debug, Clone, PartialEq)]
pub struct ExpertHost {
    pub experts: usize,
    pub n: usize,
    pub k: usize,
    pub data: ExpertData,
}

fn check_dims(experts: usize, n: usize, k: usize) -> Result<()> {
    if experts == 0 || n == 0 || k == 0 {
        return Err(Error::invalid(
            OP,
            "shape [E, N, K]",
            "every dimension >= 1",
            format!("[{experts}, {n}, {k}]"),
        ));
    }
    let elems = experts
        .checked_mul(n)
        .and_then(|v| v.checked_mul(k))
        .filter(|&v| (v as u64) < 1 << 40);
    if elems.is_none() {
        return Err(Error::invalid(
            OP,
            "elements of [E, N, K]",
            "< 2^40",
            format!("[{experts}, {n}, {k}]"),
        ));
    }
    Ok(())
}

fn check_len(len: usize, experts: usize, n: usize, k: usize) -> Result<()> {
    if len != experts * n * k {
        return Err(Error::invalid(
            OP,
            format!("elements of a [{experts}, {n}, {k}] weight"),
            experts * n * k,
            len,
        ));
    }
    Ok(())
}

impl ExpertHost {
    /// f32 weights, row-major `[E, N, K]`.
    pub fn f32(w: Vec<f32>, experts: usize, n: usize, k: usize) -> Result<ExpertHost> {
        check_dims(experts, n, k)?;
        check_len(w.len(), experts, n, k)?;
        Ok(ExpertHost {
            experts,
            n,
            k,
            data: ExpertData::F32(w),
        })
    }

    /// f16 weights, row-major `[E, N, K]`.
    pub fn f16(w: Vec<f16>, experts: usize, n: usize, k: usize) -> Result<ExpertHost> {
        check_dims(experts, n, k)?;
        check_len(w.len(), experts, n, k)?;
        Ok(ExpertHost {
            experts,
            n,
            k,
            data: ExpertData::F16(w),
        })
    }

    /// A Q4 weight of `experts * N` rows (expert `e`'s rows start at `e * N`).
    pub fn from_q4(q: Q4Host, experts: usize) -> Result<ExpertHost> {
        if experts == 0 || q.n % experts != 0 {
            return Err(Error::invalid(
                OP,
                format!("Q4 rows ({}) as E * N with E = {experts}", q.n),
                "a multiple of E >= 1",
                q.n,
            ));
        }
        let n = q.n / experts;
        check_dims(experts, n, q.k)?;
        Ok(ExpertHost {
            experts,
            n,
            k: q.k,
            data: ExpertData::Q4(q),
        })
    }

    /// Converts row-major f32 `[E, N, K]` weights to `format` (f16: round to nearest;
    /// Q4: [`quantize_q4`] over `[E * N, K]`).
    pub fn from_f32(
        w: &[f32],
        experts: usize,
        n: usize,
        k: usize,
        format: ExpertFormat,
    ) -> Result<ExpertHost> {
        check_dims(experts, n, k)?;
        check_len(w.len(), experts, n, k)?;
        match format {
            ExpertFormat::F32 => ExpertHost::f32(w.to_vec(), experts, n, k),
            ExpertFormat::F16 => {
                ExpertHost::f16(w.iter().map(|&v| f16::from_f32(v)).collect(), experts, n, k)
            }
            ExpertFormat::Q4 { group } => {
                ExpertHost::from_q4(quantize_q4(w, experts * n, k, group)?, experts)
            }
        }
    }

    pub fn format(&self) -> ExpertFormat {
        match &self.data {
            ExpertData::F32(_) => ExpertFormat::F32,
            ExpertData::F16(_) => ExpertFormat::F16,
            ExpertData::Q4(q) => ExpertFormat::Q4 { group: q.group },
        }
    }

    /// Row `row` of expert `e` as the kernels see it (f16 widened, Q4 dequantised).
    pub fn expert_row(&self, e: usize, row: usize, out: &mut [f32]) {
        let r = e * self.n + row;
        let range = r * self.k..(r + 1) * self.k;
        match &self.data {
            ExpertData::F32(w) => out.copy_from_slice(&w[range]),
            ExpertData::F16(w) => out
                .iter_mut()
                .zip(&w[range])
                .for_each(|(o, v)| *o = v.to_f32()),
            ExpertData::Q4(q) => q.dequantize_row(r, out),
        }
    }

    /// Bytes one expert occupies on the GPU (Q4: packed words plus its f16 scales).
    pub fn expert_bytes(&self) -> u64 {
        let elems = (self.n * self.k) as u64;
        match &self.data {
            ExpertData::F32(_) => 4 * elems,
            ExpertData::F16(_) => 2 * elems,
            ExpertData::Q4(q) => elems / 2 + 2 * (self.n * q.groups()) as u64,
        }
    }

    /// The largest buffer one expert needs (what must fit one binding; chunks of `c`
    /// experts fit a binding of `c` times this).
    pub fn expert_binding_bytes(&self) -> u64 {
        match &self.data {
            // Packed bytes per row (K/2) bound the scale bytes per row (2K/g, g >= 8).
            ExpertData::Q4(_) => (self.n * self.k) as u64 / 2 + 4,
            _ => self.expert_bytes() + 4,
        }
    }
}

/// One chunk of whole experts in its own buffers.
#[derive(Debug, Clone)]
pub struct ExpertChunk {
    pub experts: Range<usize>,
    pub data: ChunkData,
}

/// The buffers of a chunk: `rows = (experts.end - experts.start) * N`.
#[derive(Debug, Clone)]
pub enum ChunkData {
    /// `[rows, K]` f32 or f16 (f16 pairs from the chunk's first element).
    Dense(Tensor),
    /// `packed` u32 `[rows, K/8]`; `scales` f16 pairs from the chunk's first scale.
    Q4 { packed: Tensor, scales: Tensor },
}

/// An expert weight on the GPU, uploaded once.
#[derive(Debug, Clone)]
pub struct ExpertWeight {
    experts: usize,
    n: usize,
    k: usize,
    format: ExpertFormat,
    expert_bytes: u64,
    chunks: Vec<ExpertChunk>,
}

impl ExpertWeight {
    /// Uploads with the device's binding limit as the split threshold.
    pub fn upload(ctx: &GpuContext, host: &ExpertHost) -> Result<ExpertWeight> {
        let max = ctx
            .limits
            .max_storage_buffer_binding_size
            .min(ctx.limits.max_buffer_size);
        ExpertWeight::upload_with_max_binding(ctx, host, max)
    }

    /// Uploads in chunks of whole experts, each buffer at most `max_binding` bytes (tests
    /// pass a small value to force a split). One expert larger than that is an error.
    pub fn upload_with_max_binding(
        ctx: &GpuContext,
        host: &ExpertHost,
        max_binding: u64,
    ) -> Result<ExpertWeight> {
        let (n, k) = (host.n, host.k);
        let one = host.expert_binding_bytes();
        if one > max_binding {
            return Err(Error::invalid(
                OP,
                format!(
                    "bytes of one expert [{n}, {k}] {:?} (chunks hold whole experts)",
                    host.format()
                ),
                format!("<= {max_binding} (one storage binding)"),
                one,
            ));
        }
        let ranges = plan_row_chunks(host.experts, one, max_binding, 1)?;
        let mut chunks = Vec::with_capacity(ranges.len());
        for (c, experts) in ranges.into_iter().enumerate() {
            let rows = experts.start * n..experts.end * n;
            let label = |what: &str| format!("moe expert {what} chunk {c}");
            let data = match &host.data {
                ExpertData::F32(w) => ChunkData::Dense(Tensor::from_f32(
                    ctx,
                    &label("f32"),
                    &[rows.len(), k],
                    &w[rows.start * k..rows.end * k],
                )?),
                ExpertData::F16(w) => ChunkData::Dense(Tensor::from_f16(
                    ctx,
                    &label("f16"),
                    &[rows.len(), k],
                    &w[rows.start * k..rows.end * k],
                )?),
                ExpertData::Q4(q) => {
                    let words = k / 8;
                    let packed = &q.packed[rows.start * words..rows.end * words];
                    // Re-pair the chunk's scales from its first one (it may sit in the high
                    // half of a word when N * K/g is odd).
                    let scales = repack_scales(q, rows.start * q.groups()..rows.end * q.groups());
                    ChunkData::Q4 {
                        packed: Tensor::from_u32(
                            ctx,
                            &label("q4 packed"),
                            &[rows.len(), words],
                            packed,
                        )?,
                        scales: Tensor::from_u32(
                            ctx,
                            &label("q4 scales"),
                            &[scales.len()],
                            &scales,
                        )?,
                    }
                }
            };
            chunks.push(ExpertChunk { experts, data });
        }
        Ok(ExpertWeight {
            experts: host.experts,
            n,
            k,
            format: host.format(),
            expert_bytes: host.expert_bytes(),
            chunks,
        })
    }

    pub fn experts(&self) -> usize {
        self.experts
    }
    /// Output rows per expert.
    pub fn n(&self) -> usize {
        self.n
    }
    /// Input columns.
    pub fn k(&self) -> usize {
        self.k
    }
    pub fn format(&self) -> ExpertFormat {
        self.format
    }
    pub fn chunks(&self) -> &[ExpertChunk] {
        &self.chunks
    }
    /// Bytes a kernel reads for one selected expert (for GB/s).
    pub fn expert_bytes(&self) -> u64 {
        self.expert_bytes
    }
    /// Bytes of the whole weight on the GPU.
    pub fn bytes(&self) -> u64 {
        self.chunks
            .iter()
            .map(|c| match &c.data {
                ChunkData::Dense(t) => t.byte_size(),
                ChunkData::Q4 { packed, scales } => packed.byte_size() + scales.byte_size(),
            })
            .sum()
    }
}

/// The f16 scales `range` (flat scale elements) of `q`, packed two per word from the start.
fn repack_scales(q: &Q4Host, range: Range<usize>) -> Vec<u32> {
    let scale = |e: usize| (q.scales[e / 2] >> (16 * (e % 2))) & 0xffff;
    let mut out = vec![0u32; range.len().div_ceil(2)];
    for (i, e) in range.enumerate() {
        out[i / 2] |= scale(e) << (16 * (i % 2));
    }
    out
}
