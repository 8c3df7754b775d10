//! The MLP block (HF `Gemma4TextMLP` with the pre- and post-feedforward norms):
//! gate_up + GeGLU of the normed residual in one matvec where the route allows it, down
//! projection, and on MoE layers the expert half (`moe`); the output is queued on the
//! residual stream under `post_feedforward_layernorm`.

use super::{block_input, BlockCx};
use crate::error::Result;
use crate::model::config::LayerSpec;
use crate::model::plan_parts::Op;
use crate::model::residual::{project_geglu, Pending, Residual};

/// Plans layer `l`'s MLP block.
pub(in crate::model) fn plan<'a>(
    cx: &BlockCx<'a>,
    l: &LayerSpec,
    residual: &mut Residual<'a>,
    ops: &mut Vec<Op>,
) -> Result<()> {
    let BlockCx {
        ctx, weights, a, m, ..
    } = *cx;
    let w = &weights.layers[l.index];
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
    let ffn_out = match (&w.moe, &a.moe) {
        (Some(mw), Some(ma)) => {
            super::moe::plan(cx, mw, ma, residual.h(), &a.o, ops)?;
            &ma.out
        }
        _ => &a.o,
    };
    // layer_scalar multiplies the whole layer output: it scales the layer's last add.
    // With a per-layer input block, that block's add ends the layer instead.
    let scale = if w.ple.is_some() { 1.0 } else { w.layer_scalar };
    residual.add(Pending {
        branch: ffn_out,
        weight: &w.post_feedforward_layernorm,
        scale,
    })
}
