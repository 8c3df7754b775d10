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

use super::config::{LayerKind, ModelSpec};
use super::plan_options::PlanOptions;
use super::plan_parts::{Activations, Op, Shared};
use super::residual::{BlockInput, Residual};
use crate::error::Result;
use crate::gpu::{GpuContext, Tensor};
use crate::ops::attention::{KeyFromValue, KvCache};

/// What every block's plan reads besides its own weights: the model, one plan's
/// activations and its row count.
pub(super) struct BlockCx<'a> {
    pub ctx: &'a GpuContext,
    pub spec: &'a ModelSpec,
    /// The K/V the attention blocks write and read.
    pub kv: KvAccess<'a>,
    pub shared: &'a Shared,
    pub a: &'a Activations,
    /// Each row's position (RoPE, the K/V append), then (several sequences) its KV slot.
    pub positions: &'a Tensor,
    pub m: usize,
    pub eps: f32,
    /// The fusions this plan may use.
    pub options: PlanOptions,
}

/// Where a plan's attention blocks find their keys and values.
pub(super) enum KvAccess<'a> {
    /// The model's own caches, one per layer that owns its K/V (the target's forward):
    /// such a layer projects and appends its rows, a KV-shared layer reads its source's.
    /// `k_norm_hosts`: each owning layer's k_norm on the host (attention over a K = V
    /// cache rebuilds the keys with its store layer's).
    Own {
        caches: &'a [Option<KvCache>],
        k_norm_hosts: &'a [Option<&'a [f32]>],
    },
    /// Another model's caches, read only (the assistant over the target's): every layer
    /// projects queries alone and attends to the view of its kind.
    QueriesOnly(&'a ViewKv<'a>),
}

/// The K/V a queries-only plan reads, per layer kind (absent where it has no such layer).
pub(in crate::model) struct ViewKv<'a> {
    pub sliding: Option<KindView<'a>>,
    pub full: Option<KindView<'a>>,
}

/// The cache a queries-only layer of one kind attends to, and the rows it sees.
pub(in crate::model) struct KindView<'a> {
    pub cache: &'a KvCache,
    /// How to rebuild keys from values on a K = V cache.
    pub key_from_v: Option<KeyFromValue<'a>>,
    /// `[end, KV slot]` u32: the last row the layer sees (the attention's "position"; the
    /// layer's window counts back from it).
    pub end: &'a Tensor,
}

impl<'a> ViewKv<'a> {
    pub(in crate::model) fn of(&self, kind: LayerKind) -> Option<&KindView<'a>> {
        match kind {
            LayerKind::Sliding => self.sliding.as_ref(),
            LayerKind::Full => self.full.as_ref(),
        }
    }
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
