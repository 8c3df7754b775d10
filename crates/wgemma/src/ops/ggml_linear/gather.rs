//! The embedding gather over ggml blocks: a GGUF file's token tables (the tied
//! `token_embd`, `per_layer_token_embd`) read as stored, so the tied table and the lm_head
//! share one copy of the blocks ([`crate::ops::embedding`] dispatches here for
//! [`crate::ops::embedding::TableFormat::Ggml`] tables).

use super::blocks::GgmlType;
use super::weight::is_native;
use crate::error::{Error, Result};
use crate::gpu::{workgroups_for, GpuContext, Kernel, KernelBuilder, Tensor};
use std::ops::Range;

const OP: &str = "ggml_gather";

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct GatherParams {
    dim: u32,
    m: u32,
    row_start: u32,
    row_end: u32,
    vocab: u32,
    zero_oob: u32,
    row_bytes: u32,
    scale: f32,
}

fn shader(ty: GgmlType) -> Option<&'static str> {
    Some(match ty {
        GgmlType::Q8_0 => "ggml_gather_q8_0",
        GgmlType::Q4_1 => "ggml_gather_q4_1",
        GgmlType::Q5_0 => "ggml_gather_q5_0",
        GgmlType::Q5_1 => "ggml_gather_q5_1",
        GgmlType::Q4_K => "ggml_gather_q4_k",
        GgmlType::Q5_K => "ggml_gather_q5_k",
        GgmlType::Q6_K => "ggml_gather_q6_k",
        _ => return None,
    })
}

/// `out[t, :] = table[ids[t], :] * scale` over a `[vocab, dim]` table of `ty` held in
/// `chunks` (row range, its blocks as stored); ids u32 (or i32) `[M]`, out f32 `[M, dim]`
/// (checked by the caller). One kernel per chunk, dispatched in order.
#[allow(clippy::too_many_arguments)]
pub fn ggml_gather(
    ctx: &GpuContext,
    ty: GgmlType,
    dim: usize,
    vocab: usize,
    chunks: &[(Range<usize>, &Tensor)],
    ids: &Tensor,
    out: &Tensor,
    scale: f32,
) -> Result<Vec<Kernel>> {
    let name = shader(ty).filter(|_| is_native(ty) && dim % ty.block_elements() == 0);
    let Some(name) = name else {
        return Err(Error::invalid(
            OP,
            format!("a [{vocab}, {dim}] table in {ty:?}"),
            "a ggml type with a gather kernel, dim a multiple of its block",
            format!("{ty:?}"),
        ));
    };
    let m = ids.numel();
    let quads = (m * dim / 4) as u64;
    chunks
        .iter()
        .enumerate()
        .map(|(i, (rows, blocks))| {
            let params = GatherParams {
                dim: dim as u32,
                m: m as u32,
                row_start: rows.start as u32,
                row_end: rows.end as u32,
                vocab: vocab as u32,
                zero_oob: u32::from(i == 0),
                row_bytes: ty.bytes_of(dim) as u32,
                scale,
            };
            KernelBuilder::new(ctx, name)
                .uniform(&params)
                .tensor(ids)
                .tensor(blocks)
                .tensor(out)
                .build_1d(workgroups_for(quads, 256))
        })
        .collect()
}
