//! The per-layer input block of E2B/E4B (HF `Gemma4TextDecoderLayer`'s
//! `per_layer_input_gate` / `per_layer_projection`): gelu(gate(h)) times this layer's slice
//! of the per-layer inputs, projected back to the hidden size; its output is queued on the
//! residual stream under `post_per_layer_input_norm`, scaled by the layer scalar.

use super::{block_input, BlockCx};
use crate::error::{Error, Result};
use crate::gpu::Tensor;
use crate::model::config::{LayerSpec, ModelSpec};
use crate::model::geglu_stage::GateFactor;
use crate::model::plan_parts::Op;
use crate::model::residual::{project_gelu_mul, Pending, Residual};
use crate::ops::embedding::EmbeddingTable;
use crate::weights::declared::{TensorDecl, WeightLoader};
use crate::weights::layout::MatrixUse;
use crate::weights::linear::LinearWeight;
use crate::weights::source::Scope;

/// Per-layer-embedding weights of one layer.
pub struct PleLayerWeights {
    pub per_layer_input_gate: LinearWeight,
    pub per_layer_projection: LinearWeight,
    pub post_per_layer_input_norm: Tensor,
}

/// Model-level per-layer-embedding weights: the table and the projection that make every
/// layer's per-layer inputs.
pub struct PleWeights {
    pub embed_tokens_per_layer: EmbeddingTable,
    pub per_layer_model_projection: LinearWeight,
    pub per_layer_projection_norm: Tensor,
}

// Names in the decoder layer's scope (`layers.{i}`).
const PER_LAYER_INPUT_GATE: &str = "per_layer_input_gate.weight";
const PER_LAYER_PROJECTION: &str = "per_layer_projection.weight";
const POST_PER_LAYER_INPUT_NORM: &str = "post_per_layer_input_norm.weight";
// Names in the model's scope.
const EMBED_TOKENS_PER_LAYER: &str = "embed_tokens_per_layer.weight";
const PER_LAYER_MODEL_PROJECTION: &str = "per_layer_model_projection.weight";
const PER_LAYER_PROJECTION_NORM: &str = "per_layer_projection_norm.weight";

impl PleLayerWeights {
    /// The block's tensors in its layer's scope: the gate, the projection and the norm.
    pub fn tensors(ple_dim: usize, hidden: usize) -> Vec<TensorDecl> {
        vec![
            TensorDecl::linear(PER_LAYER_INPUT_GATE, ple_dim, hidden),
            TensorDecl::linear(PER_LAYER_PROJECTION, hidden, ple_dim),
            TensorDecl::vector(POST_PER_LAYER_INPUT_NORM, hidden),
        ]
    }

    /// Loads the tensors of [`PleLayerWeights::tensors`] from the layer's scope `src`.
    pub fn load(
        wl: &mut WeightLoader<'_, '_>,
        src: &Scope<'_>,
        ple_dim: usize,
        hidden: usize,
    ) -> Result<PleLayerWeights> {
        let mut g = wl.load(src, &Self::tensors(ple_dim, hidden))?;
        let w = PleLayerWeights {
            per_layer_input_gate: g.linear(PER_LAYER_INPUT_GATE)?,
            per_layer_projection: g.linear(PER_LAYER_PROJECTION)?,
            post_per_layer_input_norm: g.vector(POST_PER_LAYER_INPUT_NORM)?,
        };
        wl.finish(g)?;
        Ok(w)
    }
}

impl PleWeights {
    /// The model-level tensors: the `[vocab, layers * P]` table, the projection of the
    /// embeddings into the same width, and its norm.
    pub fn tensors(spec: &ModelSpec) -> Vec<TensorDecl> {
        let (v, h) = (spec.config.vocab_size, spec.config.hidden_size);
        let width = spec.layers.len() * spec.ple_dim;
        vec![
            TensorDecl::matrix(EMBED_TOKENS_PER_LAYER, v, width, MatrixUse::Table),
            TensorDecl::linear(PER_LAYER_MODEL_PROJECTION, width, h),
            TensorDecl::vector(PER_LAYER_PROJECTION_NORM, spec.ple_dim),
        ]
    }

    /// Loads the tensors of [`PleWeights::tensors`] from the model's scope `root`.
    pub fn load(
        wl: &mut WeightLoader<'_, '_>,
        root: &Scope<'_>,
        spec: &ModelSpec,
    ) -> Result<PleWeights> {
        let mut g = wl.load(root, &Self::tensors(spec))?;
        let w = PleWeights {
            embed_tokens_per_layer: g.table(EMBED_TOKENS_PER_LAYER)?,
            per_layer_model_projection: g.linear(PER_LAYER_MODEL_PROJECTION)?,
            per_layer_projection_norm: g.vector(PER_LAYER_PROJECTION_NORM)?,
        };
        wl.finish(g)?;
        Ok(w)
    }
}

/// Plans layer `l`'s per-layer input block; `layer_scalar` multiplies its residual add,
/// which ends the layer.
pub(in crate::model) fn plan<'a>(
    cx: &BlockCx<'a>,
    l: &LayerSpec,
    pw: &'a PleLayerWeights,
    layer_scalar: f32,
    residual: &mut Residual<'a>,
    ops: &mut Vec<Op>,
) -> Result<()> {
    let BlockCx { ctx, spec, a, .. } = *cx;
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
    let input = block_input(residual, None, ops)?;
    // Layer l's slice of every row of the combined per-layer inputs `[M, layers * P]`.
    let factor = GateFactor {
        other: &pa.inputs,
        stride: spec.layers.len() * p,
        offset: l.index * p,
    };
    ops.push(Op::Geglu(project_gelu_mul(
        ctx,
        &input,
        &pw.per_layer_input_gate,
        factor,
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
        scale: layer_scalar,
    })
}
