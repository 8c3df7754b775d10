//! The self-attention block (HF `Gemma4TextAttention` with the layer's input norm and
//! the post-attention norm + residual add): q/k/v projections of the normed residual,
//! q/k/v norms + RoPE in one dispatch (`norm_rope`), the KV append (layers that own their
//! K/V; KV-shared layers read their source layer's cache), attention over the cache and
//! o_proj, whose output is queued on the residual stream under
//! `post_attention_layernorm`. In a queries-only plan (the assistant's,
//! [`KvAccess::QueriesOnly`]) a layer projects q alone and attends to another model's
//! cache through a view.

use super::{block_input, BlockCx, KvAccess, ViewKv};
use crate::error::{Error, Result};
use crate::gpu::Tensor;
use crate::model::config::{KvSource, LayerKind, LayerSpec};
use crate::model::plan_parts::{rope_config, Op};
use crate::model::residual::{project, BlockInput, Pending, Residual};
use crate::ops::attention::{
    Attention, AttentionInputs, FoldQ, KeyFromValue, KvCache, DECODE_MAX_ROWS,
};
use crate::ops::rope::{NormRopeHeads, Rope, VHeads};
use crate::weights::declared::{TensorDecl, WeightLoader};
use crate::weights::linear::LinearWeight;
use crate::weights::source::Scope;

/// The attention block's weights (HF `Gemma4TextAttention` and the norms around it).
pub struct AttentionWeights {
    pub input_layernorm: Tensor,
    pub q_proj: LinearWeight,
    pub q_norm: Tensor,
    /// q_norm on the host: KV-shared layers may fold q_norm + RoPE into decode attention,
    /// which reads it from its own table.
    pub q_norm_host: Vec<f32>,
    /// None on layers that read another layer's cache (and the assistant's).
    pub kv: Option<KvWeights>,
    pub o_proj: LinearWeight,
    pub post_attention_layernorm: Tensor,
}

/// Projections that produce K (and V) for a layer that owns its cache.
pub struct KvWeights {
    pub k_proj: LinearWeight,
    /// None on K = V layers (V is k_proj's output).
    pub v_proj: Option<LinearWeight>,
    pub k_norm: Tensor,
    /// k_norm on the host: K = V attention rebuilds keys from values with it.
    pub k_norm_host: Vec<f32>,
}

// Names in the decoder layer's scope (`layers.{i}`), as HF's module tree has them.
const INPUT_LAYERNORM: &str = "input_layernorm.weight";
const Q_PROJ: &str = "self_attn.q_proj.weight";
const Q_NORM: &str = "self_attn.q_norm.weight";
const K_PROJ: &str = "self_attn.k_proj.weight";
const V_PROJ: &str = "self_attn.v_proj.weight";
const K_NORM: &str = "self_attn.k_norm.weight";
const O_PROJ: &str = "self_attn.o_proj.weight";
const POST_ATTENTION_LAYERNORM: &str = "post_attention_layernorm.weight";

impl AttentionWeights {
    /// The block's tensors in its layer's scope, for `heads` query heads over `hidden`;
    /// k/v projections and k_norm only where the layer projects its own K/V (`owns_kv`).
    pub fn tensors(l: &LayerSpec, hidden: usize, heads: usize, owns_kv: bool) -> Vec<TensorDecl> {
        let d = l.head_dim;
        let mut t = vec![
            TensorDecl::vector(INPUT_LAYERNORM, hidden),
            TensorDecl::linear(Q_PROJ, heads * d, hidden),
            TensorDecl::vector(Q_NORM, d),
        ];
        if owns_kv {
            let kv = l.num_kv_heads * d;
            t.push(TensorDecl::linear(K_PROJ, kv, hidden));
            if !l.k_eq_v {
                t.push(TensorDecl::linear(V_PROJ, kv, hidden));
            }
            t.push(TensorDecl::vector(K_NORM, d));
        }
        t.push(TensorDecl::linear(O_PROJ, hidden, heads * d));
        t.push(TensorDecl::vector(POST_ATTENTION_LAYERNORM, hidden));
        t
    }

    /// Loads the tensors of [`AttentionWeights::tensors`] from the layer's scope `src`.
    pub fn load(
        wl: &mut WeightLoader<'_, '_>,
        src: &Scope<'_>,
        l: &LayerSpec,
        hidden: usize,
        heads: usize,
        owns_kv: bool,
    ) -> Result<AttentionWeights> {
        let mut g = wl.load(src, &Self::tensors(l, hidden, heads, owns_kv))?;
        let (q_norm, q_norm_host) = g.vector_and_host(Q_NORM)?;
        let kv = if owns_kv {
            let (k_norm, k_norm_host) = g.vector_and_host(K_NORM)?;
            let v_proj = if l.k_eq_v {
                None
            } else {
                Some(g.linear(V_PROJ)?)
            };
            Some(KvWeights {
                k_proj: g.linear(K_PROJ)?,
                v_proj,
                k_norm,
                k_norm_host,
            })
        } else {
            None
        };
        let w = AttentionWeights {
            input_layernorm: g.vector(INPUT_LAYERNORM)?,
            q_proj: g.linear(Q_PROJ)?,
            q_norm,
            q_norm_host,
            kv,
            o_proj: g.linear(O_PROJ)?,
            post_attention_layernorm: g.vector(POST_ATTENTION_LAYERNORM)?,
        };
        wl.finish(g)?;
        Ok(w)
    }
}

/// Plans layer `l`'s attention block over its weights `w`.
pub(in crate::model) fn plan<'a>(
    cx: &BlockCx<'a>,
    l: &LayerSpec,
    w: &'a AttentionWeights,
    residual: &mut Residual<'a>,
    ops: &mut Vec<Op>,
) -> Result<()> {
    let BlockCx {
        ctx, spec, a, m, ..
    } = *cx;
    let c = &spec.config;
    let (nh, d) = (c.num_attention_heads, l.head_dim);
    let q = a.q.prefix_view(&[m, nh, d])?;
    let attn = a.attn.prefix_view(&[m, nh, d])?;

    // Self-attention block.
    let input = block_input(residual, Some(&w.input_layernorm), ops)?;
    ops.push(Op::Linear(project(
        ctx,
        &input,
        &w.q_proj,
        &q.reshaped(&[m, nh * d])?,
        true,
    )?));
    if let KvAccess::QueriesOnly(view) = cx.kv {
        residual.commit();
        plan_queries_only(cx, l, (&q, &w.q_norm), view, &attn, ops)?;
        return finish(cx, l, w, &attn, residual, ops);
    }
    // q_norm, k_norm, v_norm and RoPE run as one dispatch (norm_rope) per layer.
    let (cache_layer, key_from_v) = match (&l.kv, &w.kv) {
        (KvSource::Own, Some(kv)) => {
            plan_own_kv(cx, l, kv, &input, (&q, &w.q_norm), residual, ops)?;
            (l.index, kv.v_proj.is_none())
        }
        (KvSource::Shared { from_layer }, _) => {
            residual.commit();
            let source = &spec.layers[*from_layer];
            let folded = folded_attention(cx, l, &w.q_norm_host, *from_layer, (&q, &attn))?;
            if let Some(folded) = folded {
                ops.push(Op::Attention(Box::new(folded), l.kind));
                return finish(cx, l, w, &attn, residual, ops);
            }
            ops.push(Op::Rope(cx.shared.rope(l.kind).norm_rope(
                ctx,
                cx.positions,
                (&q, &w.q_norm),
                None,
                VHeads::None,
                cx.eps,
            )?));
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
    let attention = attention_op(cx, cache_layer, key_from_v, (&q, &attn), None)?;
    ops.push(Op::Attention(Box::new(attention), l.kind));
    finish(cx, l, w, &attn, residual, ops)
}

/// The model's own cache of `layer` ([`KvAccess::Own`]) and that layer's k_norm on the
/// host, if it owns its K/V.
fn own_cache<'c>(cx: &BlockCx<'c>, layer: usize) -> Result<(&'c KvCache, Option<&'c [f32]>)> {
    let missing = |found: &str| {
        Error::invalid(
            "model",
            format!("KV cache of layer {layer}"),
            "allocated for the model's own plan",
            found,
        )
    };
    match cx.kv {
        KvAccess::Own {
            caches,
            k_norm_hosts,
        } => caches
            .get(layer)
            .and_then(Option::as_ref)
            .map(|c| (c, k_norm_hosts.get(layer).copied().flatten()))
            .ok_or_else(|| missing("none")),
        KvAccess::QueriesOnly(_) => Err(missing("a queries-only plan")),
    }
}

/// A queries-only layer ([`KvAccess::QueriesOnly`]): q_norm and RoPE at the plan's
/// positions in one dispatch, then attention over the view of the layer's kind. Its
/// positions buffer holds the END of the visible rows, not the RoPE position, so q_norm +
/// RoPE stay a dispatch of their own (the folded decode partial rotates q at the
/// attention's position). HF's flipped bidirectional window keeps `W + 1` rows.
fn plan_queries_only(
    cx: &BlockCx<'_>,
    l: &LayerSpec,
    (q, q_norm): (&Tensor, &Tensor),
    view: &ViewKv<'_>,
    attn: &Tensor,
    ops: &mut Vec<Op>,
) -> Result<()> {
    let ctx = cx.ctx;
    let kv = view.of(l.kind).ok_or_else(|| {
        Error::invalid(
            "model",
            format!("K/V view of layer {} ({})", l.index, l.kind.hf_name()),
            "a cache of that layer type",
            "none",
        )
    })?;
    ops.push(Op::Rope(cx.shared.rope(l.kind).norm_rope(
        ctx,
        cx.positions,
        (q, q_norm),
        None,
        VHeads::None,
        cx.eps,
    )?));
    let window = match l.kind {
        LayerKind::Sliding => Some(l.window.unwrap_or(usize::MAX - 1) + 1),
        LayerKind::Full => None,
    };
    let inputs = AttentionInputs {
        fold_q: None,
        q,
        positions: kv.end,
        cache: kv.cache,
        out: attn,
        key_from_v: kv.key_from_v,
    };
    let mut attention = Attention::with_window(ctx, inputs, &cx.shared.scratch, window)?;
    if !cx.options.latency_attention {
        attention.disable_latency_decode();
    }
    ops.push(Op::Attention(Box::new(attention), l.kind));
    Ok(())
}

/// o_proj of the attention output, queued on the residual stream under
/// `post_attention_layernorm`.
fn finish<'a>(
    cx: &BlockCx<'a>,
    l: &LayerSpec,
    w: &'a AttentionWeights,
    attn: &Tensor,
    residual: &mut Residual<'a>,
    ops: &mut Vec<Op>,
) -> Result<()> {
    let (m, nh, d) = (cx.m, cx.spec.config.num_attention_heads, l.head_dim);
    ops.push(Op::Linear(w.o_proj.linear(
        cx.ctx,
        &attn.reshaped(&[m, nh * d])?,
        &cx.a.o,
    )?));
    residual.add(Pending {
        branch: &cx.a.o,
        weight: &w.post_attention_layernorm,
        scale: 1.0,
    })
}

/// A KV-shared layer's attention with q_norm + RoPE folded into the decode partial
/// (`PlanOptions::fold_q_norm_rope`, steps of at most `DECODE_MAX_ROWS` rows), or None
/// where the option is off or the layer cannot take it (no decode route, a chunked
/// cache): the caller then plans norm_rope and plain attention.
fn folded_attention(
    cx: &BlockCx<'_>,
    l: &LayerSpec,
    q_norm_host: &[f32],
    cache_layer: usize,
    q_attn: (&Tensor, &Tensor),
) -> Result<Option<Attention>> {
    if !cx.options.fold_q_norm_rope || cx.m > DECODE_MAX_ROWS {
        return Ok(None);
    }
    let fold = FoldQ {
        norm_weight: q_norm_host,
        rope: rope_config(l),
        eps: cx.eps,
    };
    let key_from_v = cx.spec.layers[cache_layer].k_eq_v;
    match attention_op(cx, cache_layer, key_from_v, q_attn, Some(fold)) {
        Ok(attention) => Ok(Some(attention)),
        Err(Error::NoRoute { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

/// A layer that owns its K/V: k_proj (and v_proj) of the block's input into the layer's
/// K/V rows, then q/k/v norms + RoPE and the append to its cache.
fn plan_own_kv<'a>(
    cx: &BlockCx<'a>,
    l: &LayerSpec,
    kv: &KvWeights,
    input: &BlockInput,
    (q, q_norm): (&Tensor, &Tensor),
    residual: &mut Residual<'a>,
    ops: &mut Vec<Op>,
) -> Result<()> {
    let (ctx, m) = (cx.ctx, cx.m);
    let (d, kvh) = (l.head_dim, l.num_kv_heads);
    let rope = cx.shared.rope(l.kind);
    let (cache, _) = own_cache(cx, l.index)?;
    let (k, v) = cx.a.kv[l.index].as_ref().ok_or_else(|| {
        Error::invalid(
            "model",
            format!("K/V rows of layer {}", l.index),
            "allocated",
            "none",
        )
    })?;
    let k = k.reshaped(&[m, kvh, d])?;
    let v = v.reshaped(&[m, kvh, d])?;
    ops.push(Op::Linear(project(
        ctx,
        input,
        &kv.k_proj,
        &k.reshaped(&[m, kvh * d])?,
        false,
    )?));
    match &kv.v_proj {
        Some(v_proj) => {
            ops.push(Op::Linear(project(
                ctx,
                input,
                v_proj,
                &v.reshaped(&[m, kvh * d])?,
                false,
            )?));
            residual.commit();
            let heads = NormRopeHeads {
                q: (q, q_norm),
                k: Some((&k, &kv.k_norm)),
                v: VHeads::InPlace(&v),
            };
            norm_rope_and_append(cx, rope, heads, cache, Some(&k), &v, ops)
        }
        None => {
            residual.commit();
            // K = V: V is the weightless norm of k_proj's output; keys are rebuilt
            // from V by the attention kernel (k_norm weight, then rope).
            let heads = NormRopeHeads {
                q: (q, q_norm),
                k: None,
                v: VHeads::FromK { k_raw: &k, v: &v },
            };
            norm_rope_and_append(cx, rope, heads, cache, None, &v, ops)
        }
    }
}

/// Attention of q over the cache of layer `cache_layer` into `attn` (keys rebuilt from
/// values when `key_from_v`, with that layer's k_norm and RoPE; q normed and rotated by
/// the kernel with `fold_q`).
fn attention_op(
    cx: &BlockCx<'_>,
    cache_layer: usize,
    key_from_v: bool,
    (q, attn): (&Tensor, &Tensor),
    fold_q: Option<FoldQ<'_>>,
) -> Result<Attention> {
    let spec = cx.spec;
    let (cache, k_norm_host) = own_cache(cx, cache_layer)?;
    let key_from_v = match (key_from_v, k_norm_host) {
        (true, Some(k_norm_weight)) => Some(KeyFromValue {
            k_norm_weight,
            rope: rope_config(&spec.layers[cache_layer]),
        }),
        _ => None,
    };
    let mut attention = Attention::new(
        cx.ctx,
        AttentionInputs {
            fold_q,
            q,
            positions: cx.positions,
            cache,
            out: attn,
            key_from_v,
        },
        &cx.shared.scratch,
    )?;
    if !cx.options.latency_attention {
        attention.disable_latency_decode();
    }
    Ok(attention)
}

/// q/k/v norms + RoPE, and the append of the new k and v rows to `cache`: in the same
/// dispatch where the cache is one buffer and the device allows (`norm_rope_append`, one
/// dependent dispatch less per layer), else norm_rope then the `kv_append` kernel. Plans
/// built with `fold_kv_append` off keep the two dispatches (tests compare the ways).
fn norm_rope_and_append(
    cx: &BlockCx<'_>,
    rope: &Rope,
    heads: NormRopeHeads<'_>,
    cache: &KvCache,
    k: Option<&Tensor>,
    v: &Tensor,
    ops: &mut Vec<Op>,
) -> Result<()> {
    let (ctx, positions, eps) = (cx.ctx, cx.positions, cx.eps);
    if cx.options.fold_kv_append {
        if let Some(rows) = cache.single_chunk_rows() {
            match rope.norm_rope_with(ctx, positions, heads, eps, Some(rows)) {
                Ok(kernel) => {
                    ops.push(Op::Rope(kernel));
                    return Ok(());
                }
                Err(Error::NoRoute { .. }) => {}
                Err(e) => return Err(e),
            }
        }
    }
    ops.push(Op::Rope(
        rope.norm_rope_with(ctx, positions, heads, eps, None)?,
    ));
    ops.push(Op::Append(cache.append_kernel(ctx, k, v, positions)?));
    Ok(())
}
