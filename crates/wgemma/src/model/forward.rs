//! The Gemma 4 text decoder forward on the GPU (HF `Gemma4TextModel` + tied lm_head).
//!
//! A [`ForwardPlan`] is built once per row count M (decode M = 1, verify M = k + 1, prefill
//! chunks): its activation buffers and every kernel of every layer, recorded in order into
//! ONE compute pass per forward. Per step the host only writes the token ids and positions
//! (queue writes, no wait), records the pass (attention grids follow the context length),
//! submits once and reads back what it needs (the argmax ids, or logits).

use super::blocks::{self, BlockCx};
use super::config::{KvSource, ModelSpec};
use super::plan_options::PlanOptions;
use super::plan_parts::{zeros, Activations, MoeActivations, Op, PleActivations};
pub use super::plan_parts::{Head, LogitRows, Shared};
use super::residual::{prologue_weight, Residual};
use super::weights::{LinearWeight, Weights};
use crate::error::{Error, Result};
use crate::gpu::{DType, GpuContext, Pass, Tensor};
use crate::ops::attention::{positions_len, KvCache};
use crate::ops::embedding::embedding;
use crate::ops::linear::Epilogue;
use crate::ops::rmsnorm::{rmsnorm_with, RmsNormOptions};

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
        let a = Self::activations(ctx, spec, m)?;
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
            k_norm_hosts: &k_norm_hosts,
            caches,
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
        let mut residual =
            if options.norm_prologues(m) && Self::prologues_fit(ctx, spec, weights, m) {
                Residual::prologues(ctx, &a.h, &a.h_spare, &a.x, eps)
            } else {
                Residual::kernels(ctx, &a.h, &a.x, eps)
            };
        // One decoder layer, as HF's `Gemma4TextDecoderLayer.forward` reads.
        for l in &spec.layers {
            let w = &weights.layers[l.index];
            blocks::attention::plan(&cx, l, &w.attn, &mut residual, &mut ops)?;
            // layer_scalar multiplies the whole layer output: it scales the layer's last
            // add, the per-layer input block's where the layer has one.
            let mlp_scale = if w.ple.is_some() { 1.0 } else { w.layer_scalar };
            let moe = w.moe.as_ref();
            blocks::mlp::plan(&cx, l, &w.mlp, moe, mlp_scale, &mut residual, &mut ops)?;
            if let Some(pw) = &w.ple {
                let scale = w.layer_scalar;
                blocks::per_layer_input::plan(&cx, l, pw, scale, &mut residual, &mut ops)?;
            }
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
        })
    }

    /// The activation buffers of `m` rows, sized for the widest layer.
    fn activations(ctx: &GpuContext, spec: &ModelSpec, m: usize) -> Result<Activations> {
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
                    KvSource::Own => {
                        let n = m * l.num_kv_heads * l.head_dim;
                        Ok(Some((
                            zeros(ctx, &format!("k.{}", l.index), &[n])?,
                            zeros(ctx, &format!("v.{}", l.index), &[n])?,
                        )))
                    }
                    KvSource::Shared { .. } => Ok(None),
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

    /// Whether every linear of the decoder layers can take its input norm as a matvec
    /// prologue at `m` rows (Q4 weights, matvec routes, device limits; no MoE block).
    fn prologues_fit(ctx: &GpuContext, spec: &ModelSpec, weights: &Weights, m: usize) -> bool {
        let fits = |w: &LinearWeight, e: Epilogue| prologue_weight(ctx, m, w, e).is_some();
        spec.moe.is_none()
            && weights.layers.iter().all(|w| {
                let kv_fits = w.attn.kv.as_ref().is_none_or(|kv| {
                    fits(&kv.k_proj, Epilogue::None)
                        && kv.v_proj.as_ref().is_none_or(|v| fits(v, Epilogue::None))
                });
                let ple_fits = w.ple.as_ref().is_none_or(|p| {
                    // The scratch tensor only sizes the check: any f32 buffer does.
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

    /// Dispatches this plan's ops into `pass` for a step whose caches hold `kv_len`
    /// positions after the append.
    pub fn record(&self, pass: &mut Pass<'_>, kv_len: usize) -> Result<()> {
        self.ops
            .iter()
            .try_for_each(|op| op.record(pass, self.m, kv_len))
    }

    /// Dispatches recorded per forward (for benchmarks).
    pub fn dispatch_count(&self) -> usize {
        self.ops.len()
    }
}
