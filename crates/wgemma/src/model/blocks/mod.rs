//! The decoder's blocks, one file each, as HF's `Gemma4TextDecoderLayer.forward` composes
//! them: [`attention`] (input norm, q/k/v, norms + RoPE, KV append, attention, o_proj),
//! [`mlp`] (pre-FFN norm, gate_up + GeGLU, down, and the MoE half where the layer has one),
//! [`per_layer_input`] (E2B/E4B's per-layer input gate and projection) and [`head`] (the
//! tied lm_head, softcap, greedy argmax). Each owns its weights (a struct that declares
//! its tensors once, `tensors`, and loads them, `load`: the artifact plan and the byte
//! count read the same declarations) and plans its kernels into a forward's op list;
//! the residual adds and norms between them go through [`Residual`] (kernels or matvec
//! prologues), so a block reads as its HF module does.

pub(super) mod attention;
pub(super) mod head;
pub(super) mod mlp;
pub(super) mod moe;
pub(super) mod per_layer_input;

use super::config::ModelSpec;
use super::plan_options::PlanOptions;
use super::plan_parts::{Activations, Op, Shared};
use super::residual::{BlockInput, Residual};
use crate::error::Result;
use crate::gpu::{GpuContext, Tensor};
use crate::ops::attention::KvCache;

/// What every block's plan reads besides its own weights: the model, one plan's
/// activations and its row count.
pub(super) struct BlockCx<'a> {
    pub ctx: &'a GpuContext,
    pub spec: &'a ModelSpec,
    /// Each layer's k_norm on the host where the layer owns its K/V: attention over a K = V
    /// cache rebuilds the keys with its store layer's.
    pub k_norm_hosts: &'a [Option<&'a [f32]>],
    pub caches: &'a [Option<KvCache>],
    pub shared: &'a Shared,
    pub a: &'a Activations,
    pub positions: &'a Tensor,
    pub m: usize,
    pub eps: f32,
    /// The fusions this plan may use.
    pub options: PlanOptions,
}

/// The next block's input from the residual stream (a norm kernel pushed to `ops` when
/// the stream runs its norms as kernels).
pub(super) fn block_input<'a>(
    residual: &mut Residual<'a>,
    w_in: Option<&'a Tensor>,
    ops: &mut Vec<Op>,
) -> Result<BlockInput<'a>> {
    let mut kernels = Vec::new();
    let input = residual.input(w_in, &mut kernels)?;
    ops.extend(kernels.into_iter().map(Op::Kernel));
    Ok(input)
}
