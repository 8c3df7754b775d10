//! The assistant's weights: the target's decoder layer blocks (queries only: the K/V are
//! the target's) between its input and output projections, and its head. Declared once
//! ([`tensors`]); the load and the artifact plan both read the declarations.

use super::config::{AssistantHead, AssistantSpec};
use crate::error::Result;
use crate::gpu::{GpuContext, Tensor};
use crate::model::weights::{LayerWeights, LinearWeight, WeightFormat};
use crate::weights::declared::{TensorDecl, WeightLoader};
use crate::weights::source::Scope;
use crate::weights::upload::Uploader;

const PRE_PROJECTION: &str = "pre_projection.weight";
const NORM: &str = "model.norm.weight";
const POST_PROJECTION: &str = "post_projection.weight";
const CENTROIDS: &str = "masked_embedding.centroids.weight";
/// The decoder layers' scope (`model.layers.{i}`).
const LAYERS: &str = "model.layers";

/// The assistant's weights on the GPU.
pub(super) struct AssistantWeights {
    pub pre_projection: LinearWeight,
    pub layers: Vec<LayerWeights>,
    pub norm: Tensor,
    pub post_projection: LinearWeight,
    /// The dense head's lm_head, or the centroid head's centroids (its lm_head rows and
    /// `token_ordering` are the head's own: [`super::step`]).
    pub head: LinearWeight,
}

/// `pre_projection`: `[Ha, 2 Ht]`.
fn input_tensors(spec: &AssistantSpec) -> Vec<TensorDecl> {
    let ha = spec.text.config.hidden_size;
    vec![TensorDecl::linear(
        PRE_PROJECTION,
        ha,
        2 * spec.backbone_hidden_size,
    )]
}

/// The final norm, `post_projection` and the head's linear weight (`lm_head`: the tensor
/// the dense head reads).
fn output_tensors(spec: &AssistantSpec, lm_head: &str) -> Vec<TensorDecl> {
    let c = &spec.text.config;
    let (ha, vocab) = (c.hidden_size, c.vocab_size);
    let head = match spec.head {
        AssistantHead::Dense => TensorDecl::linear(lm_head, vocab, ha),
        AssistantHead::Centroids { num_centroids, .. } => {
            TensorDecl::linear(CENTROIDS, num_centroids, ha)
        }
    };
    vec![
        TensorDecl::vector(NORM, ha),
        TensorDecl::linear(POST_PROJECTION, spec.backbone_hidden_size, ha),
        head,
    ]
}

/// Every tensor [`AssistantWeights::load`] uploads, by full name, in load order.
pub fn tensors(spec: &AssistantSpec, lm_head: &str) -> Vec<TensorDecl> {
    let mut t = input_tensors(spec);
    for l in &spec.text.layers {
        let prefix = format!("{LAYERS}.{}.", l.index);
        let layer = LayerWeights::tensors(&spec.text, l, false);
        t.extend(layer.into_iter().map(|d| d.under(&prefix)));
    }
    t.extend(output_tensors(spec, lm_head));
    t
}

impl AssistantWeights {
    /// Reads and uploads the tensors of [`tensors`] from `root` (the source's full names:
    /// the root scope adds none), matrices in `format`.
    pub fn load(
        ctx: &GpuContext,
        root: &Scope<'_>,
        spec: &AssistantSpec,
        format: WeightFormat,
        lm_head: &str,
    ) -> Result<AssistantWeights> {
        let up = &mut Uploader::new(ctx);
        let wl = &mut WeightLoader::new(up, format);
        let mut g = wl.load(root, &input_tensors(spec))?;
        let pre_projection = g.linear(PRE_PROJECTION)?;
        wl.finish(g)?;
        let mut layers = Vec::with_capacity(spec.text.layers.len());
        for l in &spec.text.layers {
            let src = root.pp(LAYERS).pp(l.index);
            layers.push(LayerWeights::load(wl, &src, &spec.text, l, false)?);
            wl.up.flush();
        }
        let mut g = wl.load(root, &output_tensors(spec, lm_head))?;
        let w = AssistantWeights {
            pre_projection,
            layers,
            norm: g.vector(NORM)?,
            post_projection: g.linear(POST_PROJECTION)?,
            head: g.linear(match spec.head {
                AssistantHead::Dense => lm_head,
                AssistantHead::Centroids { .. } => CENTROIDS,
            })?,
        };
        wl.finish(g)?;
        wl.up.flush();
        Ok(w)
    }
}
