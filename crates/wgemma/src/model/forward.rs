//! The Gemma 4 text decoder forward on the GPU (HF `Gemma4TextModel` + tied lm_head).
//!
//! A [`ForwardPlan`] is built once per row count M (decode M = 1, verify M = k + 1, prefill
//! chunks): its activation buffers and every kernel of every layer, recorded in order into
//! ONE compute pass per forward. Per step the host only writes the token ids and positions
//! (queue writes, no wait), records the pass (attention grids follow the context length),
//! submits once and reads back what it needs (the argmax ids, or logits).
//!
//! [`decoder_layer`] is the layer of both planners: the target's forwards here, and the
//! assistant's draft step (`assistant/step.rs`), whose layers attend to the target's K/V.

use super::blocks::{self, BlockCx, KvAccess};
use super::config::{LayerSpec, ModelSpec};
use super::plan_options::PlanOptions;
use super::plan_parts::{zeros, Activations, KeyLens, Op};
pub use super::plan_parts::{Head, LogitRows, Shared};
use super::residual::{prologue_weight, Residual};
use super::weights::{LayerWeights, Weights};
use crate::error::{Error, Result};
use crate::gpu::{DType, GpuContext, Pass, Tensor};
use crate::ops::attention::{positions_len, KvCache};
use crate::ops::embedding::embedding;
use crate::ops::linear::Epilogue;
use crate::ops::rmsnorm::{rmsnorm_with, RmsNormOptions};
use crate::weights::linear::LinearWeight;

/// What a [`ForwardPlan`] is built for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PlanShape {
    /// Rows of the forward.
    pub m: usize,
    pub logit_rows: LogitRows,
    /// The fusions the plan may use.
    pub options: PlanOptions,
}

/// Everything one forward of M rows needs, built once.
pub struct ForwardPlan {
    pub m: usize,
    /// The RMSNorms run as matvec prologues (see `residual`), not as kernels.
    pub norm_prologues: bool,
    pub logit_rows: LogitRows,
    /// Token ids `[M]` u32, written per step.
    pub ids: Tensor,
    /// Positions `[M]` u32, written per step.
    pub positions: Tensor,
    /// The output head (absent for [`LogitRows::None`]).
    pub head: Option<Head>,
    ops: Vec<Op>,
    /// The planner that built it (0: none): only its state records it.
    pub(super) planner: u64,
}

impl ForwardPlan {
    /// Builds the plan for `m` rows over `weights` and `caches` (one per layer that owns its
    /// K/V; shared layers read their source's).
    pub fn new(
        ctx: &GpuContext,
        spec: &ModelSpec,
        weights: &Weights,
        caches: &[Option<KvCache>],
        shared: &Shared,
        shape: PlanShape,
    ) -> Result<ForwardPlan> {
        let PlanShape {
            m,
            logit_rows,
            options,
        } = shape;
        let c = &spec.config;
        let hsz = c.hidden_size;
        let eps = c.rms_norm_eps as f32;
        let a = Activations::new(ctx, spec, m, true)?;
        let ids = Tensor::zeros(ctx, "ids", &[m], DType::U32)?;
        // Each row's position, then (several sequences) each row's KV slot.
        let sequences = caches
            .iter()
            .flatten()
            .map(|c| c.config().sequences)
            .max()
            .unwrap_or(1);
        let positions =
            Tensor::zeros(ctx, "positions", &[positions_len(m, sequences)], DType::U32)?;
        let k_norm_hosts: Vec<Option<&[f32]>> = weights
            .layers
            .iter()
            .map(|w| w.attn.kv.as_ref().map(|kv| kv.k_norm_host.as_slice()))
            .collect();
        let cx = BlockCx {
            ctx,
            spec,
            kv: KvAccess::Own {
                caches,
                k_norm_hosts: &k_norm_hosts,
            },
            shared,
            a: &a,
            positions: &positions,
            m,
            eps,
            options,
        };
        let mut ops = Vec::new();
        Self::plan_embeddings(&cx, weights, &ids, &mut ops)?;

        // The final norm's output (the assistant reads it too).
        let hidden = match logit_rows {
            LogitRows::None => None,
            LogitRows::Last | LogitRows::All => Some(zeros(ctx, "hidden", &[m, hsz])?),
        };
        if spec.layers.is_empty() {
            return Err(Error::invalid("model", "decoder layers", ">= 1", 0));
        }
        let prologues = options.norm_prologues(m) && prologues_fit(ctx, spec, &weights.layers, m);
        let mut residual = if prologues {
            Residual::prologues(ctx, &a.h, &a.h_spare, &a.x, eps)
        } else {
            Residual::kernels(ctx, &a.h, &a.x, eps)
        };
        for l in &spec.layers {
            decoder_layer(&cx, l, &weights.layers[l.index], &mut residual, &mut ops)?;
        }
        let norm_prologues = residual.uses_prologues();
        let final_norm = hidden.as_ref().map(|hd| (&weights.norm, hd));
        if let Some(k) = residual.finish(final_norm)? {
            ops.push(Op::Kernel(k));
        }

        let head = match hidden {
            None => None,
            Some(hidden) => Some(blocks::head::plan(
                ctx, spec, weights, hidden, m, logit_rows, &mut ops,
            )?),
        };
        Ok(ForwardPlan {
            m,
            norm_prologues,
            logit_rows,
            ids,
            positions,
            head,
            ops,
            planner: 0,
        })
    }

    /// The output head, or an error naming `what` needs it (a plan of
    /// [`LogitRows::None`] has none).
    pub fn head_for(&self, what: &str) -> Result<&Head> {
        self.head.as_ref().ok_or_else(|| {
            Error::invalid(
                "model",
                format!("output head of the {}-row plan", self.m),
                format!("logits for {what}"),
                "a plan without logits",
            )
        })
    }

    /// Embedding (scaled by sqrt(hidden) in the weight dtype) and per-layer inputs.
    fn plan_embeddings(
        cx: &BlockCx,
        weights: &Weights,
        ids: &Tensor,
        ops: &mut Vec<Op>,
    ) -> Result<()> {
        let (ctx, a, m) = (cx.ctx, cx.a, cx.m);
        ops.push(Op::Kernels(embedding(
            ctx,
            &weights.embed_tokens,
            ids,
            &a.h,
            weights.embed_scale,
        )?));
        if let (Some(pw), Some(pa)) = (&weights.ple, &a.ple) {
            ops.push(Op::Kernels(embedding(
                ctx,
                &pw.embed_tokens_per_layer,
                ids,
                &pa.tokens,
                weights.ple_embed_scale,
            )?));
            ops.push(Op::Linear(pw.per_layer_model_projection.linear(
                ctx,
                &a.h,
                &pa.projection,
            )?));
            // inputs = (tokens + rmsnorm(projection * H^-0.5) * w) * 2^-0.5, per layer slice.
            let (p, hsz) = (cx.spec.ple_dim, cx.spec.config.hidden_size);
            let rows = m * cx.spec.layers.len();
            ops.push(Op::Kernel(rmsnorm_with(
                ctx,
                &pa.projection.reshaped(&[rows, p])?,
                Some(&pw.per_layer_projection_norm),
                Some(&pa.tokens.reshaped(&[rows, p])?),
                &pa.inputs.reshaped(&[rows, p])?,
                RmsNormOptions {
                    eps: cx.eps,
                    input_scale: (hsz as f32).powf(-0.5),
                    output_scale: std::f32::consts::FRAC_1_SQRT_2,
                },
            )?));
        }
        Ok(())
    }

    /// Dispatches this plan's ops into `pass` for a step whose caches hold `kv_len`
    /// positions after the append.
    pub fn record(&self, pass: &mut Pass<'_>, kv_len: usize) -> Result<()> {
        let keys = KeyLens::all(kv_len);
        self.ops
            .iter()
            .try_for_each(|op| op.record(pass, self.m, keys))
    }

    /// Dispatches recorded per forward (for benchmarks).
    pub fn dispatch_count(&self) -> usize {
        self.ops.len()
    }
}

/// One decoder layer, as HF's `Gemma4TextDecoderLayer.forward` reads: attention, the MLP
/// (with its MoE half), the per-layer input. `layer_scalar` multiplies the whole layer
/// output: it scales the layer's last add, the per-layer input block's where the layer
/// has one.
pub(in crate::model) fn decoder_layer<'a>(
    cx: &BlockCx<'a>,
    l: &LayerSpec,
    w: &'a LayerWeights,
    residual: &mut Residual<'a>,
    ops: &mut Vec<Op>,
) -> Result<()> {
    blocks::attention::plan(cx, l, &w.attn, residual, ops)?;
    let mlp_scale = if w.ple.is_some() { 1.0 } else { w.layer_scalar };
    let moe = w.moe.as_ref();
    blocks::mlp::plan(cx, l, &w.mlp, moe, mlp_scale, residual, ops)?;
    if let Some(pw) = &w.ple {
        blocks::per_layer_input::plan(cx, l, pw, w.layer_scalar, residual, ops)?;
    }
    Ok(())
}

/// Whether every linear of `layers` can take its input norm as a matvec prologue at `m`
/// rows (Q4 weights, matvec routes, device limits; no MoE block).
pub(in crate::model) fn prologues_fit(
    ctx: &GpuContext,
    spec: &ModelSpec,
    layers: &[LayerWeights],
    m: usize,
) -> bool {
    let fits = |w: &LinearWeight, e: Epilogue| prologue_weight(ctx, m, w, e).is_some();
    spec.moe.is_none()
        && layers.iter().all(|w| {
            let kv_fits = w.attn.kv.as_ref().is_none_or(|kv| {
                fits(&kv.k_proj, Epilogue::None)
                    && kv.v_proj.as_ref().is_none_or(|v| fits(v, Epilogue::None))
            });
            let ple_fits = w.ple.as_ref().is_none_or(|p| {
                // The other factor only sizes the check: any f32 buffer does.
                fits(
                    &p.per_layer_input_gate,
                    Epilogue::GeluMul {
                        other: &w.attn.input_layernorm,
                        stride: 0,
                        offset: 0,
                    },
                )
            });
            fits(&w.attn.q_proj, Epilogue::None)
                && kv_fits
                && fits(&w.mlp.gate_up_proj, Epilogue::GegluPairs)
                && ple_fits
        })
}
