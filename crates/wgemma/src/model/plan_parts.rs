//! What a [`super::forward::ForwardPlan`] is made of and its blocks plan into: the recorded
//! ops, the activations, the output head and the per-model state every plan shares. Its own
//! file below `forward.rs` and `blocks/`, so that the blocks need not import the forward
//! that composes them.

use super::config::{KvSource, LayerKind, LayerSpec, ModelSpec};
use super::geglu_stage::GegluStage;
use crate::error::Result;
use crate::gpu::{DType, GpuContext, Kernel, Pass, Readback, Tensor};
use crate::ops::attention::{Attention, AttentionScratch, KvAppend};
use crate::ops::linear::Linear;
use crate::ops::rope::{Rope, RopeConfig, RopeKernel, RopeType};

/// Which logits a plan computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LogitRows {
    /// None (prefill chunks before the last: no final norm, no lm_head).
    None,
    /// Only the last row's (prefill: the next token).
    Last,
    /// Every row's (verify, `logits --all-positions`).
    All,
}

/// One recorded operation of a forward (the target's) or a draft step (the assistant's).
pub(super) enum Op {
    Kernel(Kernel),
    Kernels(Vec<Kernel>),
    Linear(Linear),
    Rope(RopeKernel),
    Append(KvAppend),
    /// Attention of a layer of this kind; its grid follows the keys the kind sees
    /// ([`KeyLens`]). Boxed: an attention layer holds several kernels (the enum stays small).
    Attention(Box<Attention>, LayerKind),
    Geglu(GegluStage),
}

/// How many keys the attention of each layer kind reads in a recorded step: a forward's
/// layers all read the cache up to the step's last row; a draft step's read the view the
/// round gives each kind.
#[derive(Debug, Clone, Copy)]
pub(super) struct KeyLens {
    pub(super) sliding: usize,
    pub(super) full: usize,
}

impl KeyLens {
    /// Every layer reads `kv_len` positions.
    pub(super) fn all(kv_len: usize) -> KeyLens {
        KeyLens {
            sliding: kv_len,
            full: kv_len,
        }
    }
}

impl Op {
    pub(super) fn record(&self, pass: &mut Pass<'_>, m: usize, keys: KeyLens) -> Result<()> {
        match self {
            Op::Kernel(k) => pass.dispatch(k),
            Op::Kernels(ks) => ks.iter().for_each(|k| pass.dispatch(k)),
            Op::Linear(l) => l.record(pass),
            Op::Rope(r) => r.record(pass, m)?,
            Op::Append(a) => a.record(pass, m)?,
            Op::Attention(a, kind) => {
                let kv_len = match kind {
                    LayerKind::Sliding => keys.sliding,
                    LayerKind::Full => keys.full,
                };
                a.record(pass, m, kv_len)?;
            }
            Op::Geglu(g) => g.record(pass),
        }
        Ok(())
    }

    /// Kernels it dispatches (an attention and a K/V append count one).
    pub(super) fn dispatches(&self) -> usize {
        match self {
            Op::Kernels(ks) => ks.len(),
            Op::Linear(l) => l.kernels().len(),
            Op::Geglu(GegluStage::Split(l, _)) => l.kernels().len() + 1,
            Op::Geglu(GegluStage::Fused(l)) => l.kernels().len(),
            _ => 1,
        }
    }
}

/// Activations of one plan, allocated once.
pub(super) struct Activations {
    pub(super) h: Tensor,
    /// The second residual buffer of norm prologues (they write h' while reading h).
    pub(super) h_spare: Tensor,
    pub(super) x: Tensor,
    pub(super) q: Tensor,
    /// K and V rows of each layer that owns its K/V (None for KV-shared layers and
    /// queries-only plans), each in
    /// its own buffer: a buffer reused by the next layer would make wgpu put a barrier
    /// before that layer's k and v projections (its last use was the previous layer's
    /// append), serialising them behind q_proj instead of running beside it.
    pub(super) kv: Vec<Option<(Tensor, Tensor)>>,
    pub(super) attn: Tensor,
    pub(super) o: Tensor,
    pub(super) gate_up: Tensor,
    pub(super) act: Tensor,
    pub(super) ple: Option<PleActivations>,
    pub(super) moe: Option<MoeActivations>,
}

impl Activations {
    /// The activation buffers of `m` rows, sized for the widest layer; K/V rows for the
    /// layers that own their K/V when the plan appends to its own caches (`own_kv`).
    pub(super) fn new(
        ctx: &GpuContext,
        spec: &ModelSpec,
        m: usize,
        own_kv: bool,
    ) -> Result<Activations> {
        let c = &spec.config;
        let (hsz, nh) = (c.hidden_size, c.num_attention_heads);
        let max_d = spec.layers.iter().map(|l| l.head_dim).max().unwrap_or(1);
        let max_i = spec
            .layers
            .iter()
            .map(|l| l.intermediate_size)
            .max()
            .unwrap_or(1);
        let layers = spec.layers.len();
        let p = spec.ple_dim;
        Ok(Activations {
            h: zeros(ctx, "h", &[m, hsz])?,
            h_spare: zeros(ctx, "h.spare", &[m, hsz])?,
            x: zeros(ctx, "x", &[m, hsz])?,
            q: zeros(ctx, "q", &[m * nh * max_d])?,
            kv: spec
                .layers
                .iter()
                .map(|l| match l.kv {
                    KvSource::Own if own_kv => {
                        let n = m * l.num_kv_heads * l.head_dim;
                        Ok(Some((
                            zeros(ctx, &format!("k.{}", l.index), &[n])?,
                            zeros(ctx, &format!("v.{}", l.index), &[n])?,
                        )))
                    }
                    _ => Ok(None),
                })
                .collect::<Result<Vec<_>>>()?,
            attn: zeros(ctx, "attn", &[m * nh * max_d])?,
            o: zeros(ctx, "o", &[m, hsz])?,
            gate_up: zeros(ctx, "gate_up", &[m * 2 * max_i])?,
            act: zeros(ctx, "act", &[m * max_i])?,
            ple: if p > 0 {
                Some(PleActivations {
                    tokens: zeros(ctx, "ple.tokens", &[m, layers * p])?,
                    projection: zeros(ctx, "ple.projection", &[m, layers * p])?,
                    inputs: zeros(ctx, "ple.inputs", &[m, layers * p])?,
                    gate: zeros(ctx, "ple.gate", &[m, p])?,
                    gated: zeros(ctx, "ple.gated", &[m, p])?,
                })
            } else {
                None
            },
            moe: match spec.moe {
                Some(moe) => Some(MoeActivations {
                    router_x: zeros(ctx, "moe.router_x", &[m, hsz])?,
                    scores: zeros(ctx, "moe.scores", &[m, moe.num_experts])?,
                    ids: Tensor::zeros(ctx, "moe.ids", &[m, moe.top_k], DType::U32)?,
                    weights: zeros(ctx, "moe.weights", &[m, moe.top_k])?,
                    x2: zeros(ctx, "moe.x2", &[m, hsz])?,
                    act: zeros(ctx, "moe.act", &[m * moe.top_k, moe.intermediate_size])?,
                    out: zeros(ctx, "moe.out", &[m, hsz])?,
                }),
                None => None,
            },
        })
    }
}

pub(super) struct MoeActivations {
    pub(super) router_x: Tensor,
    pub(super) scores: Tensor,
    pub(super) ids: Tensor,
    pub(super) weights: Tensor,
    pub(super) x2: Tensor,
    pub(super) act: Tensor,
    pub(super) out: Tensor,
}

pub(super) struct PleActivations {
    /// Token part, then the combined per-layer inputs `[M, layers * P]`.
    pub(super) tokens: Tensor,
    pub(super) projection: Tensor,
    pub(super) inputs: Tensor,
    pub(super) gate: Tensor,
    pub(super) gated: Tensor,
}

/// What a plan's output head produces, and the staging buffers to read it.
pub struct Head {
    /// Final hidden state after the norm, `[M, hidden]` (the assistant's input).
    pub hidden: Tensor,
    /// Logits `[M or 1, vocab]`, softcapped.
    pub logits: Tensor,
    /// Greedy next token per logits row `[M or 1]` u32 (stays on the GPU).
    pub next: Tensor,
    pub next_readback: Readback,
    pub logits_readback: Readback,
    pub hidden_readback: Readback,
}

pub(super) fn zeros(ctx: &GpuContext, label: &str, shape: &[usize]) -> Result<Tensor> {
    Tensor::zeros(ctx, label, shape, DType::F32)
}

/// HF's RoPE parameters of a layer as the rope op takes them.
pub(super) fn rope_config(layer: &LayerSpec) -> RopeConfig {
    RopeConfig {
        head_dim: layer.head_dim,
        theta: layer.rope.theta,
        rope_type: if layer.rope.rotary_pairs == layer.head_dim / 2 {
            RopeType::Default
        } else {
            RopeType::Proportional
        },
        partial_rotary_factor: (2 * layer.rope.rotary_pairs) as f64 / layer.head_dim as f64,
    }
}

/// Per-model state shared by every plan: ropes per layer kind and the attention scratch.
pub struct Shared {
    pub sliding_rope: Option<Rope>,
    pub full_rope: Option<Rope>,
    pub scratch: AttentionScratch,
}

impl Shared {
    pub fn new(ctx: &GpuContext, spec: &ModelSpec) -> Result<Shared> {
        let rope_of = |kind: LayerKind| -> Result<Option<Rope>> {
            spec.layers
                .iter()
                .find(|l| l.kind == kind)
                .map(|l| Rope::new(ctx, rope_config(l)))
                .transpose()
        };
        let max_d = spec.layers.iter().map(|l| l.head_dim).max().unwrap_or(4);
        Ok(Shared {
            sliding_rope: rope_of(LayerKind::Sliding)?,
            full_rope: rope_of(LayerKind::Full)?,
            scratch: AttentionScratch::for_head_dim(ctx, max_d)?,
        })
    }

    pub(super) fn rope(&self, kind: LayerKind) -> &Rope {
        match kind {
            LayerKind::Sliding => self.sliding_rope.as_ref(),
            LayerKind::Full => self.full_rope.as_ref(),
        }
        .expect("a rope exists for every layer kind present")
    }
}
