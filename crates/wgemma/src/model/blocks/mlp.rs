//! The MLP block (HF `Gemma4TextMLP` with the pre- and post-feedforward norms):
//! gate_up + GeGLU of the normed residual in one matvec where the route allows it, down
//! projection, and on MoE layers the expert half (`moe`); the output is queued on the
//! residual stream under `post_feedforward_layernorm`.

use super::moe::MoeWeights;
use super::{block_input, BlockCx};
use crate::error::Result;
use crate::gpu::Tensor;
use crate::model::config::LayerSpec;
use crate::model::plan_parts::Op;
use crate::model::residual::{project_geglu, Pending, Residual};
use crate::weights::declared::{TensorDecl, WeightLoader};
use crate::weights::layout::MatrixUse;
use crate::weights::linear::LinearWeight;
use crate::weights::source::Scope;

/// The MLP block's weights (HF `Gemma4TextMLP` and the feedforward norms around it).
pub struct MlpWeights {
    pub pre_feedforward_layernorm: Tensor,
    /// gate_proj and up_proj stacked into one `[2I, H]` weight (one dispatch, then GeGLU
    /// over the `[M, 2I]` output).
    pub gate_up_proj: LinearWeight,
    pub down_proj: LinearWeight,
    pub post_feedforward_layernorm: Tensor,
}

// Names in the decoder layer's scope (`layers.{i}`).
const PRE_FEEDFORWARD_LAYERNORM: &str = "pre_feedforward_layernorm.weight";
const GATE_UP_PROJ: &str = "mlp.gate_up_proj";
const GATE_PROJ: &str = "mlp.gate_proj.weight";
const UP_PROJ: &str = "mlp.up_proj.weight";
const DOWN_PROJ: &str = "mlp.down_proj.weight";
const POST_FEEDFORWARD_LAYERNORM: &str = "post_feedforward_layernorm.weight";

impl MlpWeights {
    /// The block's tensors in its layer's scope, over `hidden`.
    pub fn tensors(l: &LayerSpec, hidden: usize) -> Vec<TensorDecl> {
        let i = l.intermediate_size;
        vec![
            TensorDecl::vector(PRE_FEEDFORWARD_LAYERNORM, hidden),
            TensorDecl::stacked(
                GATE_UP_PROJ,
                &[GATE_PROJ, UP_PROJ],
                2 * i,
                hidden,
                MatrixUse::Linear,
            ),
            TensorDecl::linear(DOWN_PROJ, hidden, i),
            TensorDecl::vector(POST_FEEDFORWARD_LAYERNORM, hidden),
        ]
    }

    /// Loads the tensors of [`MlpWeights::tensors`] from the layer's scope `src`.
    pub fn load(
        wl: &mut WeightLoader<'_, '_>,
        src: &Scope<'_>,
        l: &LayerSpec,
        hidden: usize,
    ) -> Result<MlpWeights> {
        let mut g = wl.load(src, &Self::tensors(l, hidden))?;
        let w = MlpWeights {
            pre_feedforward_layernorm: g.vector(PRE_FEEDFORWARD_LAYERNORM)?,
            gate_up_proj: g.linear(GATE_UP_PROJ)?,
            down_proj: g.linear(DOWN_PROJ)?,
            post_feedforward_layernorm: g.vector(POST_FEEDFORWARD_LAYERNORM)?,
        };
        wl.finish(g)?;
        Ok(w)
    }
}

/// Plans layer `l`'s MLP block over its weights `w` (and the MoE half's, `moe`); `scale`
/// multiplies the block's residual add.
pub(in crate::model) fn plan<'a>(
    cx: &BlockCx<'a>,
    l: &LayerSpec,
    w: &'a MlpWeights,
    moe: Option<&'a MoeWeights>,
    scale: f32,
    residual: &mut Residual<'a>,
    ops: &mut Vec<Op>,
) -> Result<()> {
    let BlockCx { ctx, a, m, .. } = *cx;
    let i = l.intermediate_size;
    let gate_up = a.gate_up.prefix_view(&[m, 2 * i])?;
    let act = a.act.prefix_view(&[m, i])?;
    let input = block_input(residual, Some(&w.pre_feedforward_layernorm), ops)?;
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
    let ffn_out = match (moe, &a.moe) {
        (Some(mw), Some(ma)) => {
            super::moe::plan(cx, mw, ma, residual.h(), &a.o, ops)?;
            &ma.out
        }
        _ => &a.o,
    };
    residual.add(Pending {
        branch: ffn_out,
        weight: &w.post_feedforward_layernorm,
        scale,
    })
}
