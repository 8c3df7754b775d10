//! Argmax over the last dim of an f32 tensor (a logits row of up to 262144 and beyond),
//! writing one u32 index per row to a GPU buffer, so the sampled token stays on the GPU.
//!
//! Two stages: `argmax_partials` (many workgroups per row, each reducing a block of
//! 256 * ITEMS elements to a (key, index) pair) and `argmax_finish` (one workgroup per row).
//! Rules (the CPU reference [`argmax_ref`] states them too): NaN is the maximum (torch
//! treats NaN as greater than everything), -0 == +0, and among equal values the lowest
//! index wins (torch.argmax returns the first occurrence).

mod reference;

pub use reference::{argmax_ref, order_key};

#[cfg(any(test, feature = "harness"))]
mod cases;
#[cfg(any(test, feature = "harness"))]
pub use cases::{bench_cases, random_cases, ArgmaxCase};

use crate::error::{Error, Result};
use crate::gpu::{DType, GpuContext, Kernel, KernelBuilder, Tensor};

const OP: &str = "argmax";
const WORKGROUP: u32 = 256;
/// Elements per thread in stage 1: a block is 256 * 8 = 2048 elements, so a 262144 row is
/// 128 workgroups in stage 1 and 128 pairs for stage 2.
const ITEMS_PER_THREAD: u32 = 8;

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct PartialParams {
    n: u32,
    rows: u32,
    blocks: u32,
    _pad: u32,
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct FinishParams {
    rows: u32,
    blocks: u32,
    _pad: [u32; 2],
}

/// Plans argmax of `input` (f32 [..., n], rows = product of the leading dims) into `out`
/// (u32, one element per row). Returns the two kernels, to be dispatched in order in one
/// pass; the stage-1 scratch is allocated here, once, and kept alive by their bind groups.
pub fn argmax(ctx: &GpuContext, input: &Tensor, out: &Tensor) -> Result<Vec<Kernel>> {
    argmax_blocked(ctx, input, out, ITEMS_PER_THREAD)
}

fn argmax_blocked(
    ctx: &GpuContext,
    input: &Tensor,
    out: &Tensor,
    items_per_thread: u32,
) -> Result<Vec<Kernel>> {
    if input.dtype() != DType::F32 {
        return Err(Error::invalid(
            OP,
            "dtype of input",
            "f32",
            format!("{:?}", input.dtype()),
        ));
    }
    if out.dtype() != DType::U32 {
        return Err(Error::invalid(
            OP,
            "dtype of out",
            "u32",
            format!("{:?}", out.dtype()),
        ));
    }
    let n = input.shape().last().copied().unwrap_or(0);
    if n == 0 || input.numel() == 0 {
        return Err(Error::invalid(
            OP,
            "input shape",
            "a non-empty tensor with a last dim >= 1",
            format!("{:?}", input.shape()),
        ));
    }
    let rows = input.numel() / n;
    if out.numel() != rows {
        return Err(Error::invalid(
            OP,
            format!("element count of out for input {:?}", input.shape()),
            rows,
            out.numel(),
        ));
    }
    let block = (WORKGROUP * items_per_thread) as usize;
    let blocks = n.div_ceil(block);
    let too_big = |what: &str, v: usize| Error::invalid(OP, what.to_string(), "< 2^32", v);
    if u32::try_from(input.numel()).is_err() {
        return Err(too_big("input elements", input.numel()));
    }
    let pairs = rows
        .checked_mul(blocks)
        .filter(|&p| p < (u32::MAX / 2) as usize)
        .ok_or_else(|| too_big("rows * blocks", rows.saturating_mul(blocks)))?;
    let scratch = Tensor::zeros(ctx, "argmax partials", &[pairs, 2], DType::U32)?;
    let stage1 = KernelBuilder::new(ctx, "argmax_partials")
        .constant("ITEMS", items_per_thread as u64)
        .uniform(&PartialParams {
            n: n as u32,
            rows: rows as u32,
            blocks: blocks as u32,
            _pad: 0,
        })
        .tensor(input)
        .tensor(&scratch)
        .build_1d(pairs as u64)?;
    let stage2 = KernelBuilder::new(ctx, "argmax_finish")
        .uniform(&FinishParams {
            rows: rows as u32,
            blocks: blocks as u32,
            _pad: [0; 2],
        })
        .tensor(&scratch)
        .tensor(out)
        .build_1d(rows as u64)?;
    Ok(vec![stage1, stage2])
}

#[cfg(test)]
mod tests;
