//! The MoE half of a 26B-A4B layer's FFN (HF `Gemma4TextDecoderLayer.forward` with
//! `enable_moe_block`): router on the residual `h`, top-k experts on
//! `pre_feedforward_layernorm_2(h)`, then `out = norm_1(mlp) + norm_2(experts)`. Its norms
//! stay kernels (the residual stream's prologues do not cover this block).

use super::BlockCx;
use crate::error::Result;
use crate::gpu::Tensor;
use crate::model::config::MoeSpec;
use crate::model::plan_parts::{MoeActivations, Op};
use crate::ops::moe::{
    moe_expert_linear_combine, moe_expert_linear_with, moe_route, ExpertWeight, MoeEpilogue,
    MoeLinearOptions,
};
use crate::ops::rmsnorm::{rmsnorm, rmsnorm_add, rmsnorm_with, RmsNormOptions};
use crate::weights::declared::{TensorDecl, WeightLoader};
use crate::weights::linear::LinearWeight;
use crate::weights::source::Scope;

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

// Names in the decoder layer's scope (`layers.{i}`).
const ROUTER_PROJ: &str = "router.proj.weight";
const ROUTER_SCALE: &str = "router.scale";
const PER_EXPERT_SCALE: &str = "router.per_expert_scale";
const GATE_UP_PROJ: &str = "experts.gate_up_proj";
const DOWN_PROJ: &str = "experts.down_proj";
const PRE_FEEDFORWARD_LAYERNORM_2: &str = "pre_feedforward_layernorm_2.weight";
const POST_FEEDFORWARD_LAYERNORM_1: &str = "post_feedforward_layernorm_1.weight";
const POST_FEEDFORWARD_LAYERNORM_2: &str = "post_feedforward_layernorm_2.weight";

impl MoeWeights {
    /// The block's tensors in its layer's scope: the router, the experts (in the format's
    /// expert form) and the block's extra norms.
    pub fn tensors(m: MoeSpec, hidden: usize) -> Vec<TensorDecl> {
        let (e, i) = (m.num_experts, m.intermediate_size);
        vec![
            TensorDecl::linear(ROUTER_PROJ, e, hidden),
            TensorDecl::vector(ROUTER_SCALE, hidden),
            TensorDecl::vector(PER_EXPERT_SCALE, e),
            TensorDecl::experts(GATE_UP_PROJ, e, 2 * i, hidden),
            TensorDecl::experts(DOWN_PROJ, e, hidden, i),
            TensorDecl::vector(PRE_FEEDFORWARD_LAYERNORM_2, hidden),
            TensorDecl::vector(POST_FEEDFORWARD_LAYERNORM_1, hidden),
            TensorDecl::vector(POST_FEEDFORWARD_LAYERNORM_2, hidden),
        ]
    }

    /// Loads the tensors of [`MoeWeights::tensors`] from the layer's scope `src`.
    pub fn load(
        wl: &mut WeightLoader<'_, '_>,
        src: &Scope<'_>,
        m: MoeSpec,
        hidden: usize,
    ) -> Result<MoeWeights> {
        let mut g = wl.load(src, &Self::tensors(m, hidden))?;
        let w = MoeWeights {
            router_proj: g.linear(ROUTER_PROJ)?,
            router_scale: g.vector(ROUTER_SCALE)?,
            per_expert_scale: g.vector(PER_EXPERT_SCALE)?,
            gate_up_proj: g.experts(GATE_UP_PROJ)?,
            down_proj: g.experts(DOWN_PROJ)?,
            pre_feedforward_layernorm_2: g.vector(PRE_FEEDFORWARD_LAYERNORM_2)?,
            post_feedforward_layernorm_1: g.vector(POST_FEEDFORWARD_LAYERNORM_1)?,
            post_feedforward_layernorm_2: g.vector(POST_FEEDFORWARD_LAYERNORM_2)?,
        };
        wl.finish(g)?;
        Ok(w)
    }
}

/// Plans the expert half over the residual `h`, combining it with the dense MLP output
/// `mlp` into `a.out`.
pub(super) fn plan(
    cx: &BlockCx,
    w: &MoeWeights,
    a: &MoeActivations,
    h: &Tensor,
    mlp: &Tensor,
    ops: &mut Vec<Op>,
) -> Result<()> {
    let (ctx, eps) = (cx.ctx, cx.eps);
    let hsz = cx.spec.config.hidden_size;
    // Router: rmsnorm without weight, times router.scale and H^-0.5, then proj.
    ops.push(Op::Kernel(rmsnorm_with(
        ctx,
        h,
        Some(&w.router_scale),
        None,
        &a.router_x,
        RmsNormOptions {
            eps,
            input_scale: 1.0,
            output_scale: (hsz as f32).powf(-0.5),
        },
    )?));
    ops.push(Op::Linear(w.router_proj.linear(
        ctx,
        &a.router_x,
        &a.scores,
    )?));
    ops.push(Op::Kernel(moe_route(
        ctx,
        &a.scores,
        &w.per_expert_scale,
        &a.ids,
        &a.weights,
    )?));
    ops.push(Op::Kernel(rmsnorm(
        ctx,
        h,
        Some(&w.pre_feedforward_layernorm_2),
        &a.x2,
        eps,
    )?));
    let geglu = MoeLinearOptions {
        epilogue: MoeEpilogue::Geglu,
        ..Default::default()
    };
    ops.push(Op::Kernels(
        moe_expert_linear_with(ctx, &a.x2, &a.ids, &w.gate_up_proj, &a.act, &geglu)?.into_kernels(),
    ));
    ops.push(Op::Kernels(
        moe_expert_linear_combine(ctx, &a.act, &a.ids, &a.weights, &w.down_proj, &a.out, None)?
            .into_kernels(),
    ));
    ops.push(Op::Kernel(rmsnorm(
        ctx,
        &a.out,
        Some(&w.post_feedforward_layernorm_2),
        &a.out,
        eps,
    )?));
    ops.push(Op::Kernel(rmsnorm_add(
        ctx,
        mlp,
        Some(&w.post_feedforward_layernorm_1),
        &a.out,
        &a.out,
        1.0,
        eps,
    )?));
    Ok(())
}
