//! The target model's weights on the GPU, uploaded once, in the dtype the user chose:
//! f32 (parity), f16, or Q4 (default). Names follow the HF checkpoint.

use super::config::{KvSource, LayerSpec, ModelSpec, MoeSpec};
use crate::error::{Error, Result};
use crate::gpu::{GpuContext, Tensor};
use crate::ops::embedding::EmbeddingTable;
use crate::ops::moe::ExpertWeight;
use crate::weights::layout::MatrixSpec;
use crate::weights::layout::MatrixUse;
pub use crate::weights::layout::WeightFormat;
pub use crate::weights::linear::{table_from_matrix, table_rows, LinearWeight};
use crate::weights::source::{embed_scale, Scope, WeightSource};
use crate::weights::upload::Uploader;

fn table_bytes(t: &EmbeddingTable) -> u64 {
    t.chunks()
        .iter()
        .map(|c| c.data.byte_size() + c.scales.as_ref().map_or(0, |s| s.byte_size()))
        .sum()
}

/// An f32 vector (norm weights).
fn vector(ctx: &GpuContext, src: &Scope<'_>, name: &str, len: usize) -> Result<Tensor> {
    Tensor::from_f32(ctx, &src.name(name), &[len], &src.f32(name, &[len])?)
}

fn linear(
    up: &mut Uploader<'_>,
    src: &Scope<'_>,
    name: &str,
    n: usize,
    k: usize,
    format: WeightFormat,
) -> Result<LinearWeight> {
    stacked_linear(up, src, name, &[name], n, k, format)
}

/// A linear weight stacked from the row blocks `parts` (one part: the tensor itself).
fn stacked_linear(
    up: &mut Uploader<'_>,
    src: &Scope<'_>,
    name: &str,
    parts: &[&str],
    n: usize,
    k: usize,
    format: WeightFormat,
) -> Result<LinearWeight> {
    let spec = MatrixSpec::of(format, n, k, MatrixUse::Linear);
    src.upload_matrix(up, name, parts, spec)?
        .linear
        .ok_or_else(|| missing(&src.name(name), "linear weight"))
}

fn missing(name: &str, what: &str) -> Error {
    Error::invalid("weights", format!("upload of `{name}`"), what, "nothing")
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

/// Per-layer-embedding weights of one layer.
pub struct PleLayerWeights {
    pub per_layer_input_gate: LinearWeight,
    pub per_layer_projection: LinearWeight,
    pub post_per_layer_input_norm: Tensor,
}

/// The MoE block of a layer (HF `Gemma4TextRouter` + `Gemma4TextExperts`, 26B-A4B).
pub struct MoeWeights {
    pub router_proj: LinearWeight,
    pub router_scale: Tensor,
    pub per_expert_scale: Tensor,
    /// `[E, 2I, H]`, gate rows first in each expert.
    pub gate_up_proj: ExpertWeight,
    /// `[E, H, I]`.
    pub down_proj: ExpertWeight,
    pub pre_feedforward_layernorm_2: Tensor,
    pub post_feedforward_layernorm_1: Tensor,
    pub post_feedforward_layernorm_2: Tensor,
}

/// One decoder layer (HF `Gemma4TextDecoderLayer`).
pub struct LayerWeights {
    pub input_layernorm: Tensor,
    pub q_proj: LinearWeight,
    pub q_norm: Tensor,
    /// q_norm on the host: KV-shared layers may fold q_norm + RoPE into decode attention,
    /// which reads it from its own table.
    pub q_norm_host: Vec<f32>,
    pub kv: Option<KvWeights>,
    pub o_proj: LinearWeight,
    pub post_attention_layernorm: Tensor,
    pub pre_feedforward_layernorm: Tensor,
    /// gate_proj and up_proj stacked into one `[2I, H]` weight (one dispatch, then GeGLU
    /// over the `[M, 2I]` output).
    pub gate_up_proj: LinearWeight,
    pub down_proj: LinearWeight,
    pub post_feedforward_layernorm: Tensor,
    pub ple: Option<PleLayerWeights>,
    pub moe: Option<MoeWeights>,
    pub layer_scalar: f32,
}

/// Model-level per-layer-embedding weights.
pub struct PleWeights {
    pub embed_tokens_per_layer: EmbeddingTable,
    pub per_layer_model_projection: LinearWeight,
    pub per_layer_projection_norm: Tensor,
}

/// All target weights.
pub struct Weights {
    pub embed_tokens: EmbeddingTable,
    /// `sqrt(hidden)` rounded to the checkpoint's embedding dtype (HF does the same).
    pub embed_scale: f32,
    pub ple_embed_scale: f32,
    pub ple: Option<PleWeights>,
    pub layers: Vec<LayerWeights>,
    pub norm: Tensor,
    /// The tied lm_head (embed_tokens as a linear weight).
    pub lm_head: LinearWeight,
}

impl Weights {
    /// Bytes of the embedding tables, of which a forward reads only the rows of its tokens.
    pub fn table_bytes(&self) -> u64 {
        table_bytes(&self.embed_tokens)
            + self
                .ple
                .as_ref()
                .map_or(0, |p| table_bytes(&p.embed_tokens_per_layer))
    }

    /// Bytes of every weight on the GPU.
    pub fn bytes(&self) -> u64 {
        let table = table_bytes;
        let mut total = table(&self.embed_tokens) + self.lm_head.bytes() + self.norm.byte_size();
        if let Some(p) = &self.ple {
            total += table(&p.embed_tokens_per_layer)
                + p.per_layer_model_projection.bytes()
                + p.per_layer_projection_norm.byte_size();
        }
        for l in &self.layers {
            total += [&l.q_proj, &l.o_proj, &l.gate_up_proj, &l.down_proj]
                .iter()
                .map(|w| w.bytes())
                .sum::<u64>();
            total += [
                &l.input_layernorm,
                &l.q_norm,
                &l.post_attention_layernorm,
                &l.pre_feedforward_layernorm,
                &l.post_feedforward_layernorm,
            ]
            .iter()
            .map(|t| t.byte_size())
            .sum::<u64>();
            if let Some(kv) = &l.kv {
                total += kv.k_proj.bytes()
                    + kv.v_proj.as_ref().map_or(0, |v| v.bytes())
                    + kv.k_norm.byte_size();
            }
            if let Some(m) = &l.moe {
                total += m.router_proj.bytes()
                    + m.gate_up_proj.bytes()
                    + m.down_proj.bytes()
                    + [
                        &m.router_scale,
                        &m.per_expert_scale,
                        &m.pre_feedforward_layernorm_2,
                        &m.post_feedforward_layernorm_1,
                        &m.post_feedforward_layernorm_2,
                    ]
                    .iter()
                    .map(|t| t.byte_size())
                    .sum::<u64>();
            }
            if let Some(p) = &l.ple {
                total += p.per_layer_input_gate.bytes()
                    + p.per_layer_projection.bytes()
                    + p.post_per_layer_input_norm.byte_size();
            }
        }
        total
    }

    /// Reads every tensor the spec needs from `ck` and uploads it. `progress` is called
    /// with (tensors done, tensors total) for progress bars.
    pub fn load(
        ctx: &GpuContext,
        ck: &dyn WeightSource,
        spec: &ModelSpec,
        format: WeightFormat,
        progress: &mut dyn FnMut(usize, usize),
    ) -> Result<Weights> {
        let h = spec.config.hidden_size;
        let total = spec.layers.len() + 2;
        let up = &mut Uploader::new(ctx);
        let root = Scope::root(ck);
        let (embed_tokens, lm_head) = load_tied_embedding(up, &root, spec, format)?;
        up.flush();
        // HF multiplies by `embed_scale.to(weight.dtype)`. wgemma computes in f32, as HF does
        // with the model loaded in float32 (the golden fixtures' reference), so the scale is
        // sqrt(hidden) in f32; HF running a bf16 checkpoint in bf16 would use bf16(sqrt(H))
        // (39.25 instead of 39.19 at E2B).
        let dtype = safetensors::Dtype::F32;
        let ple = load_ple(ctx, up, &root, spec, format)?;
        progress(1, total);
        let mut layers = Vec::with_capacity(spec.layers.len());
        for l in &spec.layers {
            // Names as HF's module tree has them: `layers.{i}.self_attn.k_proj.weight`.
            let src = root.pp("layers").pp(l.index);
            layers.push(load_layer(ctx, up, &src, spec, l, format)?);
            // Hand each layer's queued writes to the GPU, so their staging memory is freed
            // as the load goes instead of holding every weight twice until the first submit.
            up.flush();
            progress(layers.len() + 1, total);
        }
        let norm = vector(ctx, &root, "norm.weight", h)?;
        progress(total, total);
        Ok(Weights {
            embed_tokens,
            embed_scale: embed_scale(h, dtype),
            ple_embed_scale: embed_scale(spec.ple_dim.max(1), dtype),
            ple,
            layers,
            norm,
            lm_head,
        })
    }
}

/// The embedding table and the tied lm_head: one prepared matrix, both uses.
fn load_tied_embedding(
    up: &mut Uploader<'_>,
    root: &Scope<'_>,
    spec: &ModelSpec,
    format: WeightFormat,
) -> Result<(EmbeddingTable, LinearWeight)> {
    let c = &spec.config;
    let name = "embed_tokens.weight";
    let embed_spec = MatrixSpec::of(
        format,
        c.vocab_size,
        c.hidden_size,
        MatrixUse::TableAndLinear,
    );
    let embed = root.upload_matrix(up, name, &[name], embed_spec)?;
    let embed_tokens = embed
        .table
        .ok_or_else(|| missing(name, "embedding table"))?;
    let lm_head = embed.linear.ok_or_else(|| missing(name, "lm_head"))?;
    Ok((embed_tokens, lm_head))
}

/// The model-level per-layer-embedding weights, when the model has PLE.
fn load_ple(
    ctx: &GpuContext,
    up: &mut Uploader<'_>,
    root: &Scope<'_>,
    spec: &ModelSpec,
    format: WeightFormat,
) -> Result<Option<PleWeights>> {
    if spec.ple_dim == 0 {
        return Ok(None);
    }
    let (v, h) = (spec.config.vocab_size, spec.config.hidden_size);
    let width = spec.layers.len() * spec.ple_dim;
    let name = "embed_tokens_per_layer.weight";
    let table_spec = MatrixSpec::of(format, v, width, MatrixUse::Table);
    let table = root.upload_matrix(up, name, &[name], table_spec)?;
    Ok(Some(PleWeights {
        embed_tokens_per_layer: table.table.ok_or_else(|| missing(name, "table"))?,
        per_layer_model_projection: linear(
            up,
            root,
            "per_layer_model_projection.weight",
            width,
            h,
            format,
        )?,
        per_layer_projection_norm: vector(
            ctx,
            root,
            "per_layer_projection_norm.weight",
            spec.ple_dim,
        )?,
    }))
}

/// One decoder layer's weights from its scope `src` (`layers.{i}`), read in the order the
/// load has always read them.
fn load_layer(
    ctx: &GpuContext,
    up: &mut Uploader<'_>,
    src: &Scope<'_>,
    spec: &ModelSpec,
    l: &LayerSpec,
    format: WeightFormat,
) -> Result<LayerWeights> {
    let (h, nh) = (spec.config.hidden_size, spec.config.num_attention_heads);
    let attn = src.pp("self_attn");
    let d = l.head_dim;
    let kv = load_kv(ctx, up, &attn, l, h, format)?;
    let i = l.intermediate_size;
    let gate_up_proj = stacked_linear(
        up,
        src,
        "mlp.gate_up_proj",
        &["mlp.gate_proj.weight", "mlp.up_proj.weight"],
        2 * i,
        h,
        format,
    )?;
    let ple = if spec.ple_dim > 0 {
        Some(load_layer_ple(ctx, up, src, spec.ple_dim, h, format)?)
    } else {
        None
    };
    let moe = match spec.moe {
        Some(m) => Some(load_moe(ctx, up, src, m, h, format)?),
        None => None,
    };
    let layer_scalar = if src.has("layer_scalar") {
        src.f32("layer_scalar", &[1])?[0]
    } else {
        1.0
    };
    let q_norm_host = attn.f32("q_norm.weight", &[d])?;
    Ok(LayerWeights {
        input_layernorm: vector(ctx, src, "input_layernorm.weight", h)?,
        q_proj: linear(up, &attn, "q_proj.weight", nh * d, h, format)?,
        q_norm: Tensor::from_f32(ctx, &attn.name("q_norm.weight"), &[d], &q_norm_host)?,
        q_norm_host,
        kv,
        o_proj: linear(up, &attn, "o_proj.weight", h, nh * d, format)?,
        post_attention_layernorm: vector(ctx, src, "post_attention_layernorm.weight", h)?,
        pre_feedforward_layernorm: vector(ctx, src, "pre_feedforward_layernorm.weight", h)?,
        gate_up_proj,
        down_proj: linear(up, src, "mlp.down_proj.weight", h, i, format)?,
        post_feedforward_layernorm: vector(ctx, src, "post_feedforward_layernorm.weight", h)?,
        ple,
        moe,
        layer_scalar,
    })
}

/// K (and V) projections and k_norm of a layer that owns its KV cache (`attn` is its
/// `self_attn` scope); none for a KV-shared layer.
fn load_kv(
    ctx: &GpuContext,
    up: &mut Uploader<'_>,
    attn: &Scope<'_>,
    l: &LayerSpec,
    h: usize,
    format: WeightFormat,
) -> Result<Option<KvWeights>> {
    if let KvSource::Shared { .. } = l.kv {
        return Ok(None);
    }
    let d = l.head_dim;
    let k_norm_host = attn.f32("k_norm.weight", &[d])?;
    Ok(Some(KvWeights {
        k_proj: linear(up, attn, "k_proj.weight", l.num_kv_heads * d, h, format)?,
        v_proj: if l.k_eq_v {
            None
        } else {
            Some(linear(
                up,
                attn,
                "v_proj.weight",
                l.num_kv_heads * d,
                h,
                format,
            )?)
        },
        k_norm: Tensor::from_f32(ctx, "k_norm", &[d], &k_norm_host)?,
        k_norm_host,
    }))
}

/// A layer's per-layer-input gate, projection and norm.
fn load_layer_ple(
    ctx: &GpuContext,
    up: &mut Uploader<'_>,
    src: &Scope<'_>,
    ple_dim: usize,
    h: usize,
    format: WeightFormat,
) -> Result<PleLayerWeights> {
    Ok(PleLayerWeights {
        per_layer_input_gate: linear(up, src, "per_layer_input_gate.weight", ple_dim, h, format)?,
        per_layer_projection: linear(up, src, "per_layer_projection.weight", h, ple_dim, format)?,
        post_per_layer_input_norm: vector(ctx, src, "post_per_layer_input_norm.weight", h)?,
    })
}

/// A layer's MoE block: the router, the experts (in the format's expert form) and the
/// block's extra norms.
fn load_moe(
    ctx: &GpuContext,
    up: &mut Uploader<'_>,
    src: &Scope<'_>,
    m: MoeSpec,
    h: usize,
    format: WeightFormat,
) -> Result<MoeWeights> {
    let experts = |name: &str, n: usize, k: usize| -> Result<ExpertWeight> {
        let host = src.experts(name, m.num_experts, n, k, format.expert_format())?;
        ExpertWeight::upload(ctx, &host)
    };
    Ok(MoeWeights {
        router_proj: linear(up, src, "router.proj.weight", m.num_experts, h, format)?,
        router_scale: vector(ctx, src, "router.scale", h)?,
        per_expert_scale: vector(ctx, src, "router.per_expert_scale", m.num_experts)?,
        gate_up_proj: experts("experts.gate_up_proj", 2 * m.intermediate_size, h)?,
        down_proj: experts("experts.down_proj", h, m.intermediate_size)?,
        pre_feedforward_layernorm_2: vector(ctx, src, "pre_feedforward_layernorm_2.weight", h)?,
        post_feedforward_layernorm_1: vector(ctx, src, "post_feedforward_layernorm_1.weight", h)?,
        post_feedforward_layernorm_2: vector(ctx, src, "post_feedforward_layernorm_2.weight", h)?,
    })
}
