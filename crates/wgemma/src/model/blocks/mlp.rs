//! The MLP block (HF `Gemma4TextMLP` with the pre- and post-feedforward norms):
//! gate_up + GeGLU of the normed residual in one matvec where the route allows it, down
//! projection, and on MoE layers the expert half (`moe`); the output is queued on the
//! residual stream under `post_feedforward_layernorm`. Plans that ask for it
//! (`Model::set_persistent_mlp`) run the dense block of a one-row step as ONE persistent
//! dispatch where the device passes its guards (`ops::persistent_mlp`).

use super::{block_input, BlockCx};
use crate::error::Result;
use crate::gpu::{Kernel, Tensor};
use crate::model::config::LayerSpec;
use crate::model::forward::Op;
use crate::model::residual::{project_geglu, BlockInput, Pending, Residual};
use crate::model::weights::LinearWeight;
use crate::ops::linear::NormPrologue;
use crate::ops::persistent_mlp::{persistent_mlp_guards, q4_mlp_persistent};

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
    // The persistent kernel writes the MLP output to x, which no norm writes when they run
    // as prologues (the only mode it takes): `o` is its prologue's branch, and one dispatch
    // cannot both read and write a buffer.
    let persistent = match (&input, w.moe.is_none()) {
        (BlockInput::Prologue(p), true) => persistent_mlp(cx, l, p, &act, &a.x)?,
        _ => None,
    };
    let mlp_out = match persistent {
        Some(kernel) => {
            ops.push(Op::Kernel(kernel));
            residual.commit();
            &a.x
        }
        None => {
            ops.push(Op::Geglu(project_geglu(
                ctx,
                &input,
                &w.gate_up_proj,
                &act,
                &gate_up,
            )?));
            residual.commit();
            ops.push(Op::Linear(w.down_proj.linear(ctx, &act, &a.o)?));
            &a.o
        }
    };
    // With a MoE block, the FFN output is norm_1(mlp) + norm_2(experts(norm(residual))).
    let ffn_out = match (&w.moe, &a.moe) {
        (Some(mw), Some(ma)) => {
            super::moe::plan(cx, mw, ma, residual.h(), &a.o, ops)?;
            &ma.out
        }
        _ => mlp_out,
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

/// The persistent MLP kernel of layer `l` writing the block's output to `out`, when the
/// plan asks for it and the device and the weights pass its guards (else None: the
/// two-dispatch path).
fn persistent_mlp(
    cx: &BlockCx<'_>,
    l: &LayerSpec,
    input: &NormPrologue,
    act: &Tensor,
    out: &Tensor,
) -> Result<Option<Kernel>> {
    let (Some(workgroups), w) = (cx.persistent_mlp, &cx.weights.layers[l.index]) else {
        return Ok(None);
    };
    let (LinearWeight::Q4(gate_up), LinearWeight::Q4(down)) = (&w.gate_up_proj, &w.down_proj)
    else {
        return Ok(None);
    };
    if !persistent_mlp_guards(cx.ctx, cx.m, gate_up, down).is_empty() {
        return Ok(None);
    }
    q4_mlp_persistent(cx.ctx, input, gate_up, down, act, out, workgroups).map(Some)
}
