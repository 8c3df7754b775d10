//! The target model's weights on the GPU, uploaded once, in the dtype the user chose:
//! f32 (parity), f16, or Q4 (default). Names follow the HF checkpoint. Each block declares
//! its own tensors ([`super::blocks`]); the model adds the embedding, the final norm and the
//! layer scalar, and [`Weights::tensors`] is the whole list (the artifact plan reads it).

use super::blocks::attention::AttentionWeights;
use super::blocks::mlp::MlpWeights;
use super::blocks::moe::MoeWeights;
use super::blocks::per_layer_input::{PleLayerWeights, PleWeights};
use super::config::{KvSource, LayerSpec, ModelSpec};
use crate::error::Result;
use crate::gpu::{GpuContext, Tensor};
use crate::ops::embedding::EmbeddingTable;
use crate::weights::declared::{TensorDecl, WeightBytes, WeightLoader};
use crate::weights::layout::MatrixUse;
pub use crate::weights::layout::WeightFormat;
pub use crate::weights::linear::{table_from_matrix, table_rows, LinearWeight};
use crate::weights::source::{embed_scale, Scope, WeightSource};
use crate::weights::upload::Uploader;

/// One decoder layer (HF `Gemma4TextDecoderLayer`): its blocks' weights.
pub struct LayerWeights {
    pub attn: AttentionWeights,
    pub mlp: MlpWeights,
    pub moe: Option<MoeWeights>,
    pub ple: Option<PleLayerWeights>,
    pub layer_scalar: f32,
}

impl LayerWeights {
    /// The layer's tensors, in its scope (`layers.{i}`): its blocks' and `layer_scalar`.
    /// `owns_kv`: the layer projects its own K/V (the assistant's layers never do).
    pub fn tensors(spec: &ModelSpec, l: &LayerSpec, owns_kv: bool) -> Vec<TensorDecl> {
        let (h, nh) = (spec.config.hidden_size, spec.config.num_attention_heads);
        let mut t = AttentionWeights::tensors(l, h, nh, owns_kv);
        t.extend(MlpWeights::tensors(l, h));
        if let Some(m) = spec.moe {
            t.extend(MoeWeights::tensors(m, h));
        }
        if spec.ple_dim > 0 {
            t.extend(PleLayerWeights::tensors(spec.ple_dim, h));
        }
        t.push(TensorDecl::optional_scalar(LAYER_SCALAR));
        t
    }

    /// Loads layer `l` from its scope `src` (`layers.{i}`).
    pub fn load(
        wl: &mut WeightLoader<'_, '_>,
        src: &Scope<'_>,
        spec: &ModelSpec,
        l: &LayerSpec,
        owns_kv: bool,
    ) -> Result<LayerWeights> {
        let (h, nh) = (spec.config.hidden_size, spec.config.num_attention_heads);
        let attn = AttentionWeights::load(wl, src, l, h, nh, owns_kv)?;
        let mlp = MlpWeights::load(wl, src, l, h)?;
        let moe = spec
            .moe
            .map(|m| MoeWeights::load(wl, src, m, h))
            .transpose()?;
        let ple = (spec.ple_dim > 0)
            .then(|| PleLayerWeights::load(wl, src, spec.ple_dim, h))
            .transpose()?;
        let mut g = wl.load(src, &[TensorDecl::optional_scalar(LAYER_SCALAR)])?;
        let layer_scalar = g.scalar(LAYER_SCALAR)?.unwrap_or(1.0);
        wl.finish(g)?;
        Ok(LayerWeights {
            attn,
            mlp,
            moe,
            ple,
            layer_scalar,
        })
    }
}

/// Multiplies the whole layer output (absent in older checkpoints: 1).
const LAYER_SCALAR: &str = "layer_scalar";
const EMBED_TOKENS: &str = "embed_tokens.weight";
const NORM: &str = "norm.weight";

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
    /// What the load uploaded, summed over the declared tensors.
    bytes: WeightBytes,
}

impl Weights {
    /// Every tensor the target loads, by name in the model's scope, in load order: the
    /// tied embedding, the model-level per-layer-input weights, each layer's, the final
    /// norm.
    pub fn tensors(spec: &ModelSpec) -> Vec<TensorDecl> {
        let mut t = vec![embedding(spec)];
        if spec.ple_dim > 0 {
            t.extend(PleWeights::tensors(spec));
        }
        for l in &spec.layers {
            let prefix = format!("layers.{}.", l.index);
            let layer = LayerWeights::tensors(spec, l, l.kv == KvSource::Own);
            t.extend(layer.into_iter().map(|d| d.under(&prefix)));
        }
        t.push(TensorDecl::vector(NORM, spec.config.hidden_size));
        t
    }

    /// Bytes of the embedding tables, of which a forward reads only the rows of its tokens.
    pub fn table_bytes(&self) -> u64 {
        self.bytes.tables
    }

    /// Bytes of every weight on the GPU.
    pub fn bytes(&self) -> u64 {
        self.bytes.total
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
        let wl = &mut WeightLoader::new(up, format);
        let root = Scope::root(ck);
        let mut g = wl.load(&root, &[embedding(spec)])?;
        let (embed_tokens, lm_head) = g.table_and_linear(EMBED_TOKENS)?;
        wl.finish(g)?;
        wl.up.flush();
        // HF multiplies by `embed_scale.to(weight.dtype)`. wgemma computes in f32, as HF does
        // with the model loaded in float32 (the golden fixtures' reference), so the scale is
        // sqrt(hidden) in f32; HF running a bf16 checkpoint in bf16 would use bf16(sqrt(H))
        // (39.25 instead of 39.19 at E2B).
        let dtype = safetensors::Dtype::F32;
        let ple = (spec.ple_dim > 0)
            .then(|| PleWeights::load(wl, &root, spec))
            .transpose()?;
        progress(1, total);
        let mut layers = Vec::with_capacity(spec.layers.len());
        for l in &spec.layers {
            // Names as HF's module tree has them: `layers.{i}.self_attn.k_proj.weight`.
            let src = root.pp("layers").pp(l.index);
            layers.push(LayerWeights::load(
                wl,
                &src,
                spec,
                l,
                l.kv == KvSource::Own,
            )?);
            // Hand each layer's queued writes to the GPU, so their staging memory is freed
            // as the load goes instead of holding every weight twice until the first submit.
            wl.up.flush();
            progress(layers.len() + 1, total);
        }
        let mut g = wl.load(&root, &[TensorDecl::vector(NORM, h)])?;
        let norm = g.vector(NORM)?;
        wl.finish(g)?;
        progress(total, total);
        Ok(Weights {
            embed_tokens,
            lm_head,
            embed_scale: embed_scale(h, dtype),
            ple_embed_scale: embed_scale(spec.ple_dim.max(1), dtype),
            ple,
            layers,
            norm,
            bytes: wl.bytes,
        })
    }
}

/// The embedding table and the tied lm_head: one prepared matrix, both uses.
fn embedding(spec: &ModelSpec) -> TensorDecl {
    let c = &spec.config;
    TensorDecl::matrix(
        EMBED_TOKENS,
        c.vocab_size,
        c.hidden_size,
        MatrixUse::TableAndLinear,
    )
}
