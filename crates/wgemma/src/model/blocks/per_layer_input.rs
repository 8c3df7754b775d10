//! The per-layer input block of E2B/E4B (HF `Gemma4TextDecoderLayer`'s
//! `per_layer_input_gate` / `per_layer_projection`): gelu(gate(h)) times this layer's slice
//! of the per-layer inputs, projected back to the hidden size; its output is queued on the
//! residual stream under `post_per_layer_input_norm`, scaled by the layer scalar.

use super::{block_input, BlockCx};
use crate::error::{Error, Result};
use crate::model::config::LayerSpec;
use crate::model::geglu_stage::GateFactor;
use crate::model::plan_parts::Op;
use crate::model::residual::{project_gelu_mul, Pending, Residual};
use crate::model::weights::PleLayerWeights;

/// Plans layer `l`'s per-layer input block.
pub(in crate::model) fn plan<'a>(
    cx: &BlockCx<'a>,
    l: &LayerSpec,
    pw: &'a PleLayerWeights,
    residual: &mut Residual<'a>,
    ops: &mut Vec<Op>,
) -> Result<()> {
    let BlockCx {
        ctx,
        spec,
        weights,
        a,
        ..
    } = *cx;
    let w = &weights.layers[l.index];
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
        scale: w.layer_scalar,
    })
}
