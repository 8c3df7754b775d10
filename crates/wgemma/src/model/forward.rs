//! The Gemma 4 text decoder forward on the GPU (HF `Gemma4TextModel` + tied lm_head).
//!
//! A [`ForwardPlan`] is built once per row count M (decode M = 1, verify M = k + 1, prefill
//! chunks): its activation buffers and every kernel of every layer, recorded in order into
//! ONE compute pass per forward. Per step the host only writes the token ids and positions
//! (queue writes, no wait), records the pass (attention grids follow the context length),
//! submits once and reads back what it needs (the argmax ids, or logits).

use super::config::{KvSource, LayerKind, ModelSpec};
use super::geglu_stage::GegluStage;
use super::residual::{
    project, project_geglu, project_gelu_mul, prologue_weight, BlockInput, Pending, Residual,
};
use super::weights::{LinearWeight, MoeWeights, Weights};
use crate::error::{Error, Result};
use crate::gpu::{DType, GpuContext, Kernel, Pass, Readback, Tensor};
use crate::ops::argmax::argmax;
use crate::ops::attention::{
    Attention, AttentionInputs, AttentionScratch, KeyFromValue, KvAppend, KvCache,
};
use crate::ops::embedding::embedding;
use crate::ops::gather::{gather_rows, RowTable};
use crate::ops::linear::{Epilogue, Linear};
use crate::ops::moe::{
    moe_expert_linear_combine, moe_expert_linear_with, moe_route, MoeEpilogue, MoeLinearOptions,
};
use crate::ops::rmsnorm::{rmsnorm, rmsnorm_add, rmsnorm_with, RmsNormOptions};
use crate::ops::rope::{Rope, RopeConfig, RopeKernel, RopeType, VHeads};
use crate::ops::softcap::softcap;

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

/// One recorded operation of a forward.
enum Op {
    Kernel(Kernel),
    Kernels(Vec<Kernel>),
    Linear(Linear),
    Rope(RopeKernel),
    Append(KvAppend),
    Attention(Attention),
    Geglu(GegluStage),
}

impl Op {
    fn record(&self, pass: &mut Pass<'_>, m: usize, kv_len: usize) -> Result<()> {
        match self {
            Op::Kernel(k) => pass.dispatch(k),
            Op::Kernels(ks) => ks.iter().for_each(|k| pass.dispatch(k)),
            Op::Linear(l) => l.record(pass),
            Op::Rope(r) => r.record(pass, m)?,
            Op::Append(a) => a.record(pass, m)?,
            Op::Attention(a) => {
                a.record(pass, m, kv_len)?;
            }
            Op::Geglu(g) => g.record(pass),
        }
        Ok(())
    }
}

/// Activations of one plan, allocated once.
struct Activations {
    h: Tensor,
    /// The second residual buffer of norm prologues (they write h' while reading h).
    h_spare: Tensor,
    x: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    attn: Tensor,
    o: Tensor,
    gate_up: Tensor,
    act: Tensor,
    ple: Option<PleActivations>,
    moe: Option<MoeActivations>,
}

struct MoeActivations {
    router_x: Tensor,
    scores: Tensor,
    ids: Tensor,
    weights: Tensor,
    x2: Tensor,
    act: Tensor,
    out: Tensor,
}

struct PleActivations {
    /// Token part, then the combined per-layer inputs `[M, layers * P]`.
    tokens: Tensor,
    projection: Tensor,
    inputs: Tensor,
    gate: Tensor,
    gated: Tensor,
}

/// What a [`ForwardPlan`] is built for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PlanShape {
    /// Rows of the forward.
    pub m: usize,
    pub logit_rows: LogitRows,
    /// Fold the RMSNorms into matvec prologues where every linear can take one.
    pub norm_prologues: bool,
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

fn zeros(ctx: &GpuContext, label: &str, shape: &[usize]) -> Result<Tensor> {
    Tensor::zeros(ctx, label, shape, DType::F32)
}

fn rope_config(layer: &super::config::LayerSpec) -> RopeConfig {
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

    fn rope(&self, kind: LayerKind) -> &Rope {
        match kind {
            LayerKind::Sliding => self.sliding_rope.as_ref(),
            LayerKind::Full => self.full_rope.as_ref(),
        }
        .expect("a rope exists for every layer kind present")
    }
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
            norm_prologues,
        } = shape;
        let c = &spec.config;
        let (hsz, nh) = (c.hidden_size, c.num_attention_heads);
        let eps = c.rms_norm_eps as f32;
        let max_d = spec.layers.iter().map(|l| l.head_dim).max().unwrap_or(1);
        let max_kv = spec
            .layers
            .iter()
            .map(|l| l.num_kv_heads * l.head_dim)
            .max()
            .unwrap_or(1);
        let max_i = spec
            .layers
            .iter()
            .map(|l| l.intermediate_size)
            .max()
            .unwrap_or(1);
        let layers = spec.layers.len();
        let p = spec.ple_dim;
        let a = Activations {
            h: zeros(ctx, "h", &[m, hsz])?,
            h_spare: zeros(ctx, "h.spare", &[m, hsz])?,
            x: zeros(ctx, "x", &[m, hsz])?,
            q: zeros(ctx, "q", &[m * nh * max_d])?,
            k: zeros(ctx, "k", &[m * max_kv])?,
            v: zeros(ctx, "v", &[m * max_kv])?,
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
        };
        let ids = Tensor::zeros(ctx, "ids", &[m], DType::U32)?;
        let positions = Tensor::zeros(ctx, "positions", &[m], DType::U32)?;
        let mut ops = Vec::new();

        // Embedding (scaled by sqrt(hidden) in the weight dtype) and per-layer inputs.
        ops.push(Op::Kernels(embedding(
            ctx,
            &weights.embed_tokens,
            &ids,
            &a.h,
            weights.embed_scale,
        )?));
        if let (Some(pw), Some(pa)) = (&weights.ple, &a.ple) {
            ops.push(Op::Kernels(embedding(
                ctx,
                &pw.embed_tokens_per_layer,
                &ids,
                &pa.tokens,
                weights.ple_embed_scale,
            )?));
            ops.push(Op::Linear(pw.per_layer_model_projection.linear(
                ctx,
                &a.h,
                &pa.projection,
            )?));
            // inputs = (tokens + rmsnorm(projection * H^-0.5) * w) * 2^-0.5, per layer slice.
            let rows = m * layers;
            ops.push(Op::Kernel(rmsnorm_with(
                ctx,
                &pa.projection.reshaped(&[rows, p])?,
                Some(&pw.per_layer_projection_norm),
                Some(&pa.tokens.reshaped(&[rows, p])?),
                &pa.inputs.reshaped(&[rows, p])?,
                RmsNormOptions {
                    eps,
                    input_scale: (hsz as f32).powf(-0.5),
                    output_scale: std::f32::consts::FRAC_1_SQRT_2,
                },
            )?));
        }

        // The final norm's output (the assistant reads it too).
        let hidden = match logit_rows {
            LogitRows::None => None,
            LogitRows::Last | LogitRows::All => Some(zeros(ctx, "hidden", &[m, hsz])?),
        };
        if spec.layers.is_empty() {
            return Err(Error::invalid("model", "decoder layers", ">= 1", 0));
        }
        let mut residual = if norm_prologues && Self::prologues_fit(ctx, spec, weights, m) {
            Residual::prologues(ctx, &a.h, &a.h_spare, &a.x, eps)
        } else {
            Residual::kernels(ctx, &a.h, &a.x, eps)
        };
        for l in &spec.layers {
            Self::layer(
                ctx,
                spec,
                l,
                weights,
                caches,
                shared,
                &a,
                &positions,
                m,
                &mut residual,
                &mut ops,
            )?;
        }
        let norm_prologues = residual.uses_prologues();
        let final_norm = hidden.as_ref().map(|hd| (&weights.norm, hd));
        if let Some(k) = residual.finish(final_norm)? {
            ops.push(Op::Kernel(k));
        }

        let head = match hidden {
            None => None,
            Some(hidden) => Some(Self::head(
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

    /// Tied lm_head over the final-norm output `hidden` (on the last row only when only its
    /// logits are wanted), softcap and greedy argmax.
    fn head(
        ctx: &GpuContext,
        spec: &ModelSpec,
        weights: &Weights,
        hidden: Tensor,
        m: usize,
        logit_rows: LogitRows,
        ops: &mut Vec<Op>,
    ) -> Result<Head> {
        let c = &spec.config;
        let (hsz, vocab) = (c.hidden_size, c.vocab_size);
        let logit_m = if logit_rows == LogitRows::All { m } else { 1 };
        let head_in = if logit_m == m {
            hidden.clone()
        } else {
            let last = Tensor::from_u32(ctx, "last_row", &[1], &[(m - 1) as u32])?;
            let out = zeros(ctx, "hidden.last", &[1, hsz])?;
            let table = RowTable::from_tensor(hidden.clone())?;
            ops.push(Op::Kernels(gather_rows(ctx, &table, &last, &out)?.kernels));
            out
        };
        let logits = zeros(ctx, "logits", &[logit_m, vocab])?;
        ops.push(Op::Linear(weights.lm_head.linear(ctx, &head_in, &logits)?));
        if let Some(cap) = c.final_logit_softcapping {
            ops.push(Op::Kernel(softcap(ctx, &logits, &logits, cap as f32)?));
        }
        let next = Tensor::zeros(ctx, "next", &[logit_m], DType::U32)?;
        ops.push(Op::Kernels(argmax(ctx, &logits, &next)?));
        Ok(Head {
            next_readback: Readback::new(ctx, "next", next.byte_size()),
            logits_readback: Readback::new(ctx, "logits", logits.byte_size()),
            hidden_readback: Readback::new(ctx, "hidden", hidden.byte_size()),
            hidden,
            logits,
            next,
        })
    }

    /// Whether every linear of the decoder layers can take its input norm as a matvec
    /// prologue at `m` rows (Q4 weights, matvec routes, device limits; no MoE block).
    fn prologues_fit(ctx: &GpuContext, spec: &ModelSpec, weights: &Weights, m: usize) -> bool {
        let fits = |w: &LinearWeight, e: Epilogue| prologue_weight(ctx, m, w, e).is_some();
        spec.moe.is_none()
            && weights.layers.iter().all(|w| {
                let kv_fits = w.kv.as_ref().is_none_or(|kv| {
                    fits(&kv.k_proj, Epilogue::None)
                        && kv.v_proj.as_ref().is_none_or(|v| fits(v, Epilogue::None))
                });
                let ple_fits = w.ple.as_ref().is_none_or(|p| {
                    // The scratch tensor only sizes the check: any f32 buffer does.
                    fits(
                        &p.per_layer_input_gate,
                        Epilogue::GeluMul {
                            other: &w.input_layernorm,
                            stride: 0,
                            offset: 0,
                        },
                    )
                });
                fits(&w.q_proj, Epilogue::None)
                    && kv_fits
                    && fits(&w.gate_up_proj, Epilogue::GegluPairs)
                    && ple_fits
            })
    }

    /// One decoder layer, as HF's `Gemma4TextDecoderLayer.forward` reads: each block's
    /// input norm and residual add go through `residual` (kernels or matvec prologues).
    #[allow(clippy::too_many_arguments)]
    fn layer<'a>(
        ctx: &GpuContext,
        spec: &ModelSpec,
        l: &super::config::LayerSpec,
        weights: &'a Weights,
        caches: &[Option<KvCache>],
        shared: &Shared,
        a: &'a Activations,
        positions: &Tensor,
        m: usize,
        residual: &mut Residual<'a>,
        ops: &mut Vec<Op>,
    ) -> Result<()> {
        let c = &spec.config;
        let eps = c.rms_norm_eps as f32;
        let w = &weights.layers[l.index];
        let (nh, d, kvh) = (c.num_attention_heads, l.head_dim, l.num_kv_heads);
        let rope = shared.rope(l.kind);
        let q = a.q.prefix_view(&[m, nh, d])?;
        let attn = a.attn.prefix_view(&[m, nh, d])?;

        // Self-attention block.
        let input = Self::block_input(residual, Some(&w.input_layernorm), ops)?;
        ops.push(Op::Linear(project(
            ctx,
            &input,
            &w.q_proj,
            &q.reshaped(&[m, nh * d])?,
            true,
        )?));
        // q_norm, k_norm, v_norm and RoPE run as one dispatch (norm_rope) per layer.
        let (cache_layer, key_from_v) = match (&l.kv, &w.kv) {
            (KvSource::Own, Some(kv)) => {
                let cache = caches[l.index].as_ref().ok_or_else(|| {
                    Error::invalid(
                        "model",
                        format!("KV cache of layer {}", l.index),
                        "allocated",
                        "none",
                    )
                })?;
                let k = a.k.prefix_view(&[m, kvh, d])?;
                let v = a.v.prefix_view(&[m, kvh, d])?;
                ops.push(Op::Linear(project(
                    ctx,
                    &input,
                    &kv.k_proj,
                    &k.reshaped(&[m, kvh * d])?,
                    false,
                )?));
                match &kv.v_proj {
                    Some(v_proj) => {
                        ops.push(Op::Linear(project(
                            ctx,
                            &input,
                            v_proj,
                            &v.reshaped(&[m, kvh * d])?,
                            false,
                        )?));
                        residual.commit();
                        ops.push(Op::Rope(rope.norm_rope(
                            ctx,
                            positions,
                            (&q, &w.q_norm),
                            Some((&k, &kv.k_norm)),
                            VHeads::InPlace(&v),
                            eps,
                        )?));
                        ops.push(Op::Append(cache.append_kernel(
                            ctx,
                            Some(&k),
                            &v,
                            positions,
                        )?));
                    }
                    None => {
                        residual.commit();
                        // K = V: V is the weightless norm of k_proj's output; keys are rebuilt
                        // from V by the attention kernel (k_norm weight, then rope).
                        ops.push(Op::Rope(rope.norm_rope(
                            ctx,
                            positions,
                            (&q, &w.q_norm),
                            None,
                            VHeads::FromK { k_raw: &k, v: &v },
                            eps,
                        )?));
                        ops.push(Op::Append(cache.append_kernel(ctx, None, &v, positions)?));
                    }
                }
                (l.index, kv.v_proj.is_none())
            }
            (KvSource::Shared { from_layer }, _) => {
                residual.commit();
                ops.push(Op::Rope(rope.norm_rope(
                    ctx,
                    positions,
                    (&q, &w.q_norm),
                    None,
                    VHeads::None,
                    eps,
                )?));
                let source = &spec.layers[*from_layer];
                (*from_layer, source.k_eq_v)
            }
            (KvSource::Own, None) => {
                return Err(Error::invalid(
                    "model",
                    format!("K/V weights of layer {}", l.index),
                    "present",
                    "none",
                ))
            }
        };
        let cache = caches[cache_layer].as_ref().ok_or_else(|| {
            Error::invalid(
                "model",
                format!("KV cache of layer {cache_layer}"),
                "allocated",
                "none",
            )
        })?;
        let key_from_v = match (key_from_v, &weights.layers[cache_layer].kv) {
            (true, Some(source)) => Some(KeyFromValue {
                k_norm_weight: &source.k_norm_host,
                rope: rope_config(&spec.layers[cache_layer]),
            }),
            _ => None,
        };
        ops.push(Op::Attention(Attention::new(
            ctx,
            AttentionInputs {
                q: &q,
                positions,
                cache,
                out: &attn,
                key_from_v,
            },
            &shared.scratch,
        )?));
        ops.push(Op::Linear(w.o_proj.linear(
            ctx,
            &attn.reshaped(&[m, nh * d])?,
            &a.o,
        )?));
        residual.add(Pending {
            branch: &a.o,
            weight: &w.post_attention_layernorm,
            scale: 1.0,
        })?;

        // MLP block.
        let i = l.intermediate_size;
        let gate_up = a.gate_up.prefix_view(&[m, 2 * i])?;
        let act = a.act.prefix_view(&[m, i])?;
        let input = Self::block_input(residual, Some(&w.pre_feedforward_layernorm), ops)?;
        ops.push(Op::Geglu(project_geglu(
            ctx,
            &input,
            &w.gate_up_proj,
            &act,
            &gate_up,
        )?));
        residual.commit();
        ops.push(Op::Linear(w.down_proj.linear(ctx, &act, &a.o)?));
        // With a MoE block, the FFN output is norm_1(mlp) + norm_2(experts(norm(residual))).
        let ffn_out = match (&w.moe, &a.moe) {
            (Some(mw), Some(ma)) => {
                Self::moe_block(ctx, spec, mw, ma, residual.h(), &a.o, eps, ops)?;
                &ma.out
            }
            _ => &a.o,
        };
        // layer_scalar multiplies the whole layer output: it scales the layer's last add.
        let Some(pw) = &w.ple else {
            residual.add(Pending {
                branch: ffn_out,
                weight: &w.post_feedforward_layernorm,
                scale: w.layer_scalar,
            })?;
            return Ok(());
        };
        residual.add(Pending {
            branch: ffn_out,
            weight: &w.post_feedforward_layernorm,
            scale: 1.0,
        })?;

        // Per-layer input block (E2B/E4B): the gate reads the residual itself.
        let Some(pa) = &a.ple else {
            return Err(Error::invalid(
                "model",
                "per-layer-input activations",
                "allocated with the PLE weights",
                "none",
            ));
        };
        let p = spec.ple_dim;
        let input = Self::block_input(residual, None, ops)?;
        ops.push(Op::Geglu(project_gelu_mul(
            ctx,
            &input,
            &pw.per_layer_input_gate,
            &pa.inputs,
            spec.layers.len() * p,
            l.index * p,
            &pa.gated,
            &pa.gate,
        )?));
        residual.commit();
        ops.push(Op::Linear(
            pw.per_layer_projection.linear(ctx, &pa.gated, &a.o)?,
        ));
        residual.add(Pending {
            branch: &a.o,
            weight: &pw.post_per_layer_input_norm,
            scale: w.layer_scalar,
        })
    }

    /// The next block's input from the residual stream (a norm kernel pushed to `ops` in
    /// kernel mode).
    fn block_input<'a>(
        residual: &mut Residual<'a>,
        w_in: Option<&'a Tensor>,
        ops: &mut Vec<Op>,
    ) -> Result<BlockInput<'a>> {
        let mut kernels = Vec::new();
        let input = residual.input(w_in, &mut kernels)?;
        ops.extend(kernels.into_iter().map(Op::Kernel));
        Ok(input)
    }

    /// The MoE half of the FFN (HF `Gemma4TextDecoderLayer.forward` with
    /// `enable_moe_block`): router on the residual `h`, top-k experts on
    /// `pre_feedforward_layernorm_2(h)`, then `out = norm_1(mlp) + norm_2(experts)`.
    #[allow(clippy::too_many_arguments)]
    fn moe_block(
        ctx: &GpuContext,
        spec: &ModelSpec,
        w: &MoeWeights,
        a: &MoeActivations,
        h: &Tensor,
        mlp: &Tensor,
        eps: f32,
        ops: &mut Vec<Op>,
    ) -> Result<()> {
        let hsz = spec.config.hidden_size;
        // Router: rmsnorm without weight, times router.scale and H^-0.5, then proj.
        ops.push(Op::Kernel(rmsnorm_with(
            ctx,
            h,
            Some(&w.router_scale),
            None,
            &a.router_x,
            RmsNormOptions {
                eps,
                input_scale: 1.0,
                output_scale: (hsz as f32).powf(-0.5),
            },
        )?));
        ops.push(Op::Linear(w.router_proj.linear(
            ctx,
            &a.router_x,
            &a.scores,
        )?));
        ops.push(Op::Kernel(moe_route(
            ctx,
            &a.scores,
            &w.per_expert_scale,
            &a.ids,
            &a.weights,
        )?));
        ops.push(Op::Kernel(rmsnorm(
            ctx,
            h,
            Some(&w.pre_feedforward_layernorm_2),
            &a.x2,
            eps,
        )?));
        let geglu = MoeLinearOptions {
            epilogue: MoeEpilogue::Geglu,
            ..Default::default()
        };
        ops.push(Op::Kernels(
            moe_expert_linear_with(ctx, &a.x2, &a.ids, &w.gate_up_proj, &a.act, &geglu)?
                .into_kernels(),
        ));
        ops.push(Op::Kernels(
            moe_expert_linear_combine(ctx, &a.act, &a.ids, &a.weights, &w.down_proj, &a.out, None)?
                .into_kernels(),
        ));
        ops.push(Op::Kernel(rmsnorm(
            ctx,
            &a.out,
            Some(&w.post_feedforward_layernorm_2),
            &a.out,
            eps,
        )?));
        ops.push(Op::Kernel(rmsnorm_add(
            ctx,
            mlp,
            Some(&w.post_feedforward_layernorm_1),
            &a.out,
            &a.out,
            1.0,
            eps,
        )?));
        Ok(())
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
