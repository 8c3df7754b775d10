//! The target model's weights on the GPU, uploaded once, in the dtype the user chose:
//! f32 (parity), f16, or Q4 (default). Names follow the HF checkpoint.

use super::checkpoint::{embed_scale, WeightSource};
use super::config::{KvSource, ModelSpec};
use super::prepared::{Matrix, MatrixData, MatrixLayout};
use super::upload::Uploader;
use crate::artifact::plan::MatrixUse;
use crate::error::{Error, Result};
use crate::gpu::{GpuContext, Tensor};
use crate::ops::embedding::{EmbeddingTable, TableFormat, TableRows};
use crate::ops::linear::{dense_linear, q4_linear, Linear, Q4Weight, Q4Words};
use crate::ops::moe::{ExpertFormat, ExpertWeight};

/// How weights are stored on the GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WeightFormat {
    F32,
    F16,
    /// The project's Q4 with this group size (32, 64 or 128).
    Q4 {
        group: usize,
    },
}

impl WeightFormat {
    /// Parses `f32`, `f16`, `q4` (group 32), `q4g64`, `q4g128`.
    pub fn parse(s: &str) -> Result<WeightFormat> {
        match s {
            "f32" => Ok(WeightFormat::F32),
            "f16" => Ok(WeightFormat::F16),
            "q4" | "q4g32" => Ok(WeightFormat::Q4 { group: 32 }),
            "q4g64" => Ok(WeightFormat::Q4 { group: 64 }),
            "q4g128" => Ok(WeightFormat::Q4 { group: 128 }),
            other => Err(Error::invalid(
                "weights",
                "--dtype",
                "f32, f16, q4, q4g64 or q4g128",
                other,
            )),
        }
    }

    pub fn expert_format(self) -> ExpertFormat {
        match self {
            WeightFormat::F32 => ExpertFormat::F32,
            WeightFormat::F16 => ExpertFormat::F16,
            WeightFormat::Q4 { group } => ExpertFormat::Q4 { group },
        }
    }
}

/// A linear layer's weight `[N, K]` in one of the formats.
#[derive(Debug, Clone)]
pub enum LinearWeight {
    Q4(Q4Weight),
    Dense(Tensor),
}

impl LinearWeight {
    /// Uploads `w` (`[n, k]` row-major f32) in `format` ([`MatrixLayout::of`]: Q4 needs K
    /// to be a multiple of the group, else f16).
    pub fn upload(
        ctx: &GpuContext,
        name: &str,
        w: &[f32],
        n: usize,
        k: usize,
        format: WeightFormat,
    ) -> Result<Self> {
        let matrix = Matrix::prepare(w.to_vec(), n, k, MatrixLayout::of(format, k))?;
        LinearWeight::from_matrix(ctx, name, &matrix)
    }

    /// Uploads a prepared matrix as it is (no conversion).
    pub fn from_matrix(ctx: &GpuContext, name: &str, m: &Matrix<'_>) -> Result<Self> {
        m.validate(name)?;
        let (n, k) = (m.n, m.k);
        Ok(match &m.data {
            MatrixData::Q4 {
                group,
                packed,
                scales,
            } => LinearWeight::Q4(Q4Weight::upload_words(
                ctx,
                Q4Words {
                    n,
                    k,
                    group: *group,
                    packed,
                    scales,
                },
            )?),
            MatrixData::F32(w) => LinearWeight::Dense(Tensor::from_f32(ctx, name, &[n, k], w)?),
            MatrixData::F16(w) => LinearWeight::Dense(Tensor::from_f16(ctx, name, &[n, k], w)?),
        })
    }

    /// Builds `y = x W^T`.
    pub fn linear(&self, ctx: &GpuContext, x: &Tensor, y: &Tensor) -> Result<Linear> {
        match self {
            LinearWeight::Q4(w) => q4_linear(ctx, x, w, y),
            LinearWeight::Dense(w) => dense_linear(ctx, x, w, y),
        }
    }

    pub fn bytes(&self) -> u64 {
        match self {
            LinearWeight::Q4(w) => w.bytes(),
            LinearWeight::Dense(t) => t.byte_size(),
        }
    }
}

/// Uploads a prepared `[rows, dim]` matrix as an embedding table in its own layout.
pub fn table_from_matrix(ctx: &GpuContext, label: &str, m: &Matrix<'_>) -> Result<EmbeddingTable> {
    m.validate(label)?;
    let (format, rows) = table_rows(m);
    EmbeddingTable::from_rows(ctx, label, m.k, format, rows, None)
}

/// A prepared matrix's rows as an embedding table takes them, and that table's format.
pub fn table_rows<'m>(m: &'m Matrix<'_>) -> (TableFormat, TableRows<'m>) {
    match &m.data {
        MatrixData::F32(w) => (TableFormat::F32, TableRows::F32(w)),
        MatrixData::F16(h) => (TableFormat::F16, TableRows::F16(h)),
        MatrixData::Q4 {
            group,
            packed,
            scales,
        } => {
            // f16 scales two per word; the last word's high half is padding when odd.
            let scales: &[half::f16] = bytemuck::cast_slice(scales);
            let rows = TableRows::Q4 {
                words: packed,
                scales: &scales[..m.n * m.k / group],
            };
            (TableFormat::Q4 { group: *group }, rows)
        }
    }
}

fn table_bytes(t: &EmbeddingTable) -> u64 {
    t.chunks()
        .iter()
        .map(|c| c.data.byte_size() + c.scales.as_ref().map_or(0, |s| s.byte_size()))
        .sum()
}

/// An f32 vector (norm weights).
fn vector(ctx: &GpuContext, ck: &dyn WeightSource, name: &str, len: usize) -> Result<Tensor> {
    Tensor::from_f32(ctx, name, &[len], &ck.f32(name, &[len])?)
}

fn linear(
    up: &mut Uploader<'_>,
    ck: &dyn WeightSource,
    name: &str,
    n: usize,
    k: usize,
    format: WeightFormat,
) -> Result<LinearWeight> {
    stacked_linear(up, ck, name, &[name], n, k, format)
}

/// A linear weight stacked from the row blocks `parts` (one part: the tensor itself).
fn stacked_linear(
    up: &mut Uploader<'_>,
    ck: &dyn WeightSource,
    name: &str,
    parts: &[&str],
    n: usize,
    k: usize,
    format: WeightFormat,
) -> Result<LinearWeight> {
    let layout = MatrixLayout::of(format, k);
    ck.upload_matrix(up, name, parts, n, k, layout, MatrixUse::Linear)?
        .linear
        .ok_or_else(|| missing(name, "linear weight"))
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
        let c = &spec.config;
        let (h, v, nh) = (c.hidden_size, c.vocab_size, c.num_attention_heads);
        let total = spec.layers.len() + 2;
        let up = &mut Uploader::new(ctx);
        // The tied lm_head and the embedding table are the same prepared matrix.
        let name = "embed_tokens.weight";
        let layout = MatrixLayout::of(format, h);
        let embed = ck.upload_matrix(up, name, &[name], v, h, layout, MatrixUse::TableAndLinear)?;
        let embed_tokens = embed
            .table
            .ok_or_else(|| missing(name, "embedding table"))?;
        let lm_head = embed.linear.ok_or_else(|| missing(name, "lm_head"))?;
        up.flush();
        // HF multiplies by `embed_scale.to(weight.dtype)`. wgemma computes in f32, as HF does
        // with the model loaded in float32 (the golden fixtures' reference), so the scale is
        // sqrt(hidden) in f32; HF running a bf16 checkpoint in bf16 would use bf16(sqrt(H))
        // (39.25 instead of 39.19 at E2B).
        let dtype = safetensors::Dtype::F32;
        let ple = if spec.ple_dim > 0 {
            let width = spec.layers.len() * spec.ple_dim;
            let name = "embed_tokens_per_layer.weight";
            let layout = MatrixLayout::of(format, width);
            let table = ck.upload_matrix(up, name, &[name], v, width, layout, MatrixUse::Table)?;
            Some(PleWeights {
                embed_tokens_per_layer: table.table.ok_or_else(|| missing(name, "table"))?,
                per_layer_model_projection: linear(
                    up,
                    ck,
                    "per_layer_model_projection.weight",
                    width,
                    h,
                    format,
                )?,
                per_layer_projection_norm: vector(
                    ctx,
                    ck,
                    "per_layer_projection_norm.weight",
                    spec.ple_dim,
                )?,
            })
        } else {
            None
        };
        progress(1, total);
        let mut layers = Vec::with_capacity(spec.layers.len());
        for l in &spec.layers {
            let p = |name: &str| format!("layers.{}.{name}", l.index);
            let d = l.head_dim;
            let kv = match l.kv {
                KvSource::Own => Some({
                    let k_norm_host = ck.f32(&p("self_attn.k_norm.weight"), &[d])?;
                    KvWeights {
                        k_proj: linear(
                            up,
                            ck,
                            &p("self_attn.k_proj.weight"),
                            l.num_kv_heads * d,
                            h,
                            format,
                        )?,
                        v_proj: if l.k_eq_v {
                            None
                        } else {
                            Some(linear(
                                up,
                                ck,
                                &p("self_attn.v_proj.weight"),
                                l.num_kv_heads * d,
                                h,
                                format,
                            )?)
                        },
                        k_norm: Tensor::from_f32(ctx, "k_norm", &[d], &k_norm_host)?,
                        k_norm_host,
                    }
                }),
                KvSource::Shared { .. } => None,
            };
            let i = l.intermediate_size;
            let gate_up_proj = stacked_linear(
                up,
                ck,
                &p("mlp.gate_up_proj"),
                &[&p("mlp.gate_proj.weight"), &p("mlp.up_proj.weight")],
                2 * i,
                h,
                format,
            )?;
            let ple = if spec.ple_dim > 0 {
                Some(PleLayerWeights {
                    per_layer_input_gate: linear(
                        up,
                        ck,
                        &p("per_layer_input_gate.weight"),
                        spec.ple_dim,
                        h,
                        format,
                    )?,
                    per_layer_projection: linear(
                        up,
                        ck,
                        &p("per_layer_projection.weight"),
                        h,
                        spec.ple_dim,
                        format,
                    )?,
                    post_per_layer_input_norm: vector(
                        ctx,
                        ck,
                        &p("post_per_layer_input_norm.weight"),
                        h,
                    )?,
                })
            } else {
                None
            };
            let moe = match spec.moe {
                Some(m) => {
                    let experts = |name: &str, n: usize, k: usize| -> Result<ExpertWeight> {
                        let host =
                            ck.experts(&p(name), m.num_experts, n, k, format.expert_format())?;
                        ExpertWeight::upload(ctx, &host)
                    };
                    Some(MoeWeights {
                        router_proj: linear(
                            up,
                            ck,
                            &p("router.proj.weight"),
                            m.num_experts,
                            h,
                            format,
                        )?,
                        router_scale: vector(ctx, ck, &p("router.scale"), h)?,
                        per_expert_scale: vector(
                            ctx,
                            ck,
                            &p("router.per_expert_scale"),
                            m.num_experts,
                        )?,
                        gate_up_proj: experts("experts.gate_up_proj", 2 * m.intermediate_size, h)?,
                        down_proj: experts("experts.down_proj", h, m.intermediate_size)?,
                        pre_feedforward_layernorm_2: vector(
                            ctx,
                            ck,
                            &p("pre_feedforward_layernorm_2.weight"),
                            h,
                        )?,
                        post_feedforward_layernorm_1: vector(
                            ctx,
                            ck,
                            &p("post_feedforward_layernorm_1.weight"),
                            h,
                        )?,
                        post_feedforward_layernorm_2: vector(
                            ctx,
                            ck,
                            &p("post_feedforward_layernorm_2.weight"),
                            h,
                        )?,
                    })
                }
                None => None,
            };
            let layer_scalar = if ck.has(&p("layer_scalar")) {
                ck.f32(&p("layer_scalar"), &[1])?[0]
            } else {
                1.0
            };
            layers.push(LayerWeights {
                input_layernorm: vector(ctx, ck, &p("input_layernorm.weight"), h)?,
                q_proj: linear(up, ck, &p("self_attn.q_proj.weight"), nh * d, h, format)?,
                q_norm: vector(ctx, ck, &p("self_attn.q_norm.weight"), d)?,
                kv,
                o_proj: linear(up, ck, &p("self_attn.o_proj.weight"), h, nh * d, format)?,
                post_attention_layernorm: vector(
                    ctx,
                    ck,
                    &p("post_attention_layernorm.weight"),
                    h,
                )?,
                pre_feedforward_layernorm: vector(
                    ctx,
                    ck,
                    &p("pre_feedforward_layernorm.weight"),
                    h,
                )?,
                gate_up_proj,
                down_proj: linear(up, ck, &p("mlp.down_proj.weight"), h, i, format)?,
                post_feedforward_layernorm: vector(
                    ctx,
                    ck,
                    &p("post_feedforward_layernorm.weight"),
                    h,
                )?,
                ple,
                moe,
                layer_scalar,
            });
            // Hand each layer's queued writes to the GPU, so their staging memory is freed
            // as the load goes instead of holding every weight twice until the first submit.
            up.flush();
            progress(layers.len() + 1, total);
        }
        let norm = vector(ctx, ck, "norm.weight", h)?;
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
