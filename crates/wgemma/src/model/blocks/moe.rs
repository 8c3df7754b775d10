//! The MoE half of a 26B-A4B layer's FFN (HF `Gemma4TextDecoderLayer.forward` with
//! `enable_moe_block`): router on the residual `h`, top-k experts on
//! `pre_feedforward_layernorm_2(h)`, then `out = norm_1(mlp) + norm_2(experts)`. Its norms
//! stay kernels (the residual stream's prologues do not cover this block).

use super::BlockCx;
use crate::error::Result;
use crate::gpu::Tensor;
use crate::model::plan_parts::{MoeActivations, Op};
use crate::model::weights::MoeWeights;
use crate::ops::moe::{
    moe_expert_linear_combine, moe_expert_linear_with, moe_route, MoeEpilogue, MoeLinearOptions,
};
use crate::ops::rmsnorm::{rmsnorm, rmsnorm_add, rmsnorm_with, RmsNormOptions};

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
