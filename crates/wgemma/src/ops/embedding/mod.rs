//! Embedding gather: `out[t] = table[ids[t]] * scale` with token ids read from a GPU u32
//! buffer `[M]` (the sampled token never leaves the GPU), tables in f32, f16, the
//! project's Q4 or a GGUF file's ggml blocks ([`crate::ops::ggml_linear::ggml_gather`]), split by rows into chunks when larger than one storage binding.
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

#[cfg(any(test, feature = "harness"))]
mod cases;
#[cfg(any(test, feature = "harness"))]
pub use cases::{bench_cases, random_cases, EmbeddingCase};

use crate::error::{Error, Result};
use crate::gpu::{workgroups_for, DType, GpuContext, Kernel, KernelBuilder, Tensor};
use crate::ops::ggml_linear::ggml_gather;

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
        TableFormat::Ggml(ty) => {
            let chunks: Vec<_> = table
                .chunks()
                .iter()
                .map(|c| (c.rows.clone(), &c.data))
                .collect();
            return ggml_gather(ctx, ty, dim, table.rows(), &chunks, ids, out, scale);
        }
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

#[cfg(test)]
mod tests;
