//! The MoE block of Gemma 4 26B-A4B (HF `Gemma4TextRouter` + `Gemma4TextExperts`), as
//! ops the model plans once per layer, for M token rows (1 decode, 3 verify, up to
//! 64 prefill), all f32 activations:
//!
//! 1. [`moe_route`]: router scores `[M, E]` (the `router.proj` output; the lead computes the
//!    router's RMSNorm and projection with the rmsnorm and linear ops) -> expert ids u32
//!    `[M, top_k]` and weights f32 `[M, top_k]`, on the GPU.
//! 2. [`moe_expert_linear_with`]: the gathered-expert linear, reading the ids from the GPU:
//!    `gate_up_proj` with [`MoeEpilogue::Geglu`] gives `a = gelu_tanh(gate) * up`
//!    `[M * top_k, I]` in one dispatch (or without the epilogue `[M * top_k, 2I]` for
//!    [`crate::ops::geglu::geglu_fused`]), then `down_proj` over `a` (one x row per slot)
//!    gives `y [M * top_k, H]`.
//! 3. [`moe_combine`]: `out[m] = sum_j weights[m, j] * y[m * top_k + j]` `[M, H]`.
//!
//! Or 2 + 3 in one: [`moe_expert_linear_combine`] (down projection and combine; fused into
//! one kernel for Q4 and M <= 4, else the two above with a scratch it allocates once).
//! Decode and verify then take 3 dispatches per MoE layer: route, gate_up + GeGLU,
//! down + combine (one more per extra expert chunk when a weight exceeds one binding).
//!
//! Use (plan time, once per layer and M; `ids`, `weights`, `a`, `out` allocated once):
//! ```ignore
//! let w_gate_up = ExpertWeight::upload(ctx, &ExpertHost::from_f32(
//!     &gate_up_proj, e, 2 * i, h, ExpertFormat::Q4 { group: 32 })?)?;
//! let route = moe_route(ctx, &scores, &per_expert_scale, &ids, &weights)?;
//! let geglu = MoeLinearOptions { epilogue: MoeEpilogue::Geglu, ..Default::default() };
//! let gate_up = moe_expert_linear_with(ctx, &x2, &ids, &w_gate_up, &a, &geglu)?;
//! let down = moe_expert_linear_combine(ctx, &a, &ids, &weights, &w_down, &out, None)?;
//! // In the forward's pass: pass.dispatch(&route); gate_up.record(pass); down.record(pass);
//! ```
//!
//! Expert ids `>= E` (never produced by [`moe_route`]) select nothing: their slot's linear
//! output row is zero and they add nothing to the combine, as HF's expert mask (built with
//! `num_classes = E + 1`) skips index `E`.
//!
//! Agreement with HF, and where it differs on purpose:
//! - Selection is on the scores with the total order of [`crate::ops::argmax::order_key`]
//!   (NaN greatest, -0 == +0) and ties broken by the lower expert index. HF selects on the
//!   f32 probabilities with `torch.topk`, whose order among equal values is unspecified:
//!   measured on torch 2.15 CPU (E = 128, k = 8, one tie straddling the k-th place), it
//!   kept the lower index 1546 times in 3000 and the higher 1454, so no fixed rule can match
//!   it; softmax is monotone, so the selections agree whenever there is no exact tie.
//! - Renormalisation sums the chosen probabilities in rank order; the combine sums slots in
//!   rank order (HF's `index_add_` goes expert by expert), all in f32: rounding-level
//!   differences only.

#[cfg(any(test, feature = "harness"))]
mod cases;
mod down_combine;
mod linear;
pub mod reference;
#[cfg(test)]
mod tests;
mod weight;

#[cfg(any(test, feature = "harness"))]
pub use cases::{
    bench_cases, random_cases, BlockDown, MoeBlockCase, MoeCombineCase, MoeDownCombineCase,
    MoeLinearCase, MoeRouteCase,
};
pub use down_combine::{
    fused_failed_guards, fused_slot_classes, moe_expert_linear_combine, MoeCombineRoute,
    MoeDownCombine, FUSED_MAX_TOKENS,
};
pub use linear::{
    choose_moe_linear_route, grouped_lanes, moe_expert_linear, moe_expert_linear_with,
    moe_linear_failed_guards, MoeDeviceCaps, MoeEpilogue, MoeLinear, MoeLinearOptions,
    MoeLinearRoute, MoeLinearShape, GROUPED_MAX_SLOTS,
};
pub use reference::{
    moe_combine_ref, moe_expert_linear_ref, moe_experts_ref, moe_route_ref, ExpertLinearRef,
};
pub use weight::{ChunkData, ExpertChunk, ExpertData, ExpertFormat, ExpertHost, ExpertWeight};

use crate::error::{Error, Result};
use crate::gpu::{workgroups_for, DType, GpuContext, Kernel, KernelBuilder, Tensor};
use linear::{check_distinct, check_dtype, ids_shape};

/// Experts the route kernel holds in workgroup memory.
pub const ROUTE_MAX_EXPERTS: usize = 2048;
/// Largest `top_k` of the route kernel.
pub const ROUTE_MAX_TOP_K: usize = 64;
const ROUTE_WORKGROUP: u32 = 128;
const ROUTE_WORKGROUP_BYTES: u32 =
    4 * (ROUTE_MAX_EXPERTS + ROUTE_MAX_TOP_K) as u32 + 4 * ROUTE_WORKGROUP;

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct RouteParams {
    m: u32,
    e: u32,
    top_k: u32,
    _pad: u32,
}

/// Builds the router kernel: `scores` f32 `[M, E]`, `per_expert_scale` f32 `[E]` ->
/// `ids` u32 `[M, top_k]`, `weights` f32 `[M, top_k]` (see the module docs for the order).
pub fn moe_route(
    ctx: &GpuContext,
    scores: &Tensor,
    per_expert_scale: &Tensor,
    ids: &Tensor,
    weights: &Tensor,
) -> Result<Kernel> {
    const OP: &str = "moe_route";
    check_dtype(OP, scores, "scores", DType::F32)?;
    check_dtype(OP, per_expert_scale, "per_expert_scale", DType::F32)?;
    check_dtype(OP, weights, "weights", DType::F32)?;
    let &[m, experts] = scores.shape() else {
        return Err(Error::invalid(
            OP,
            "shape of scores",
            "[M, E]",
            format!("{:?}", scores.shape()),
        ));
    };
    let (m_ids, top_k) = ids_shape(OP, ids)?;
    if m == 0 || experts == 0 || m_ids != m {
        return Err(Error::invalid(
            OP,
            "shapes of scores [M, E] and ids [M, top_k]",
            "equal M >= 1, E >= 1",
            format!("scores {:?}, ids {:?}", scores.shape(), ids.shape()),
        ));
    }
    if weights.shape() != ids.shape() {
        return Err(Error::invalid(
            OP,
            "shape of weights",
            format!("{:?} (as ids)", ids.shape()),
            format!("{:?}", weights.shape()),
        ));
    }
    if per_expert_scale.shape() != [experts] {
        return Err(Error::invalid(
            OP,
            "shape of per_expert_scale",
            format!("[{experts}]"),
            format!("{:?}", per_expert_scale.shape()),
        ));
    }
    let inputs = [(scores, "scores"), (per_expert_scale, "per_expert_scale")];
    check_distinct(OP, ids, "ids", &inputs)?;
    check_distinct(OP, weights, "weights", &inputs)?;
    check_distinct(OP, weights, "weights", &[(ids, "ids")])?;
    u32::try_from(m * experts)
        .map_err(|_| Error::invalid(OP, "elements of scores", "< 2^32", m * experts))?;
    let mut failed = Vec::new();
    if experts > ROUTE_MAX_EXPERTS {
        failed.push(format!(
            "E <= {ROUTE_MAX_EXPERTS} (keys in workgroup memory; found {experts})"
        ));
    }
    if top_k > experts.min(ROUTE_MAX_TOP_K) {
        failed.push(format!(
            "top_k <= min(E, {ROUTE_MAX_TOP_K}) (found top_k = {top_k}, E = {experts})"
        ));
    }
    let limits = &ctx.limits;
    if limits.max_compute_invocations_per_workgroup < ROUTE_WORKGROUP
        || limits.max_compute_workgroup_size_x < ROUTE_WORKGROUP
    {
        failed.push(format!(
            "device allows {ROUTE_WORKGROUP} invocations per workgroup"
        ));
    }
    if limits.max_compute_workgroup_storage_size < ROUTE_WORKGROUP_BYTES {
        failed.push(format!(
            "device workgroup storage >= {ROUTE_WORKGROUP_BYTES} bytes (found {})",
            limits.max_compute_workgroup_storage_size
        ));
    }
    if !failed.is_empty() {
        return Err(Error::NoRoute {
            op: OP,
            shapes: format!("scores {:?}, ids {:?}", scores.shape(), ids.shape()),
            failed,
        });
    }
    KernelBuilder::new(ctx, "moe_route")
        .uniform(&RouteParams {
            m: m as u32,
            e: experts as u32,
            top_k: top_k as u32,
            _pad: 0,
        })
        .tensor(scores)
        .tensor(per_expert_scale)
        .tensor(ids)
        .tensor(weights)
        .build_1d(m as u64)
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct CombineParams {
    m: u32,
    h: u32,
    top_k: u32,
    _pad: u32,
}

/// Builds the combine kernel: `y` f32 `[M * top_k, H]`, `weights` f32 `[M, top_k]` ->
/// `out` f32 `[M, H]`, `out[m] = sum_j weights[m, j] * y[m * top_k + j]`.
pub fn moe_combine(ctx: &GpuContext, y: &Tensor, weights: &Tensor, out: &Tensor) -> Result<Kernel> {
    const OP: &str = "moe_combine";
    check_dtype(OP, y, "y", DType::F32)?;
    check_dtype(OP, weights, "weights", DType::F32)?;
    check_dtype(OP, out, "out", DType::F32)?;
    let &[m, top_k] = weights.shape() else {
        return Err(Error::invalid(
            OP,
            "shape of weights",
            "[M, top_k]",
            format!("{:?}", weights.shape()),
        ));
    };
    let h = out.shape().last().copied().unwrap_or(0);
    if m == 0 || top_k == 0 || h == 0 || out.numel() != m * h {
        return Err(Error::invalid(
            OP,
            "shape of out",
            format!("[{m}, H >= 1] for weights {:?}", weights.shape()),
            format!("{:?}", out.shape()),
        ));
    }
    if y.shape().last() != Some(&h) || y.numel() != m * top_k * h {
        return Err(Error::invalid(
            OP,
            "shape of y",
            format!("[{}, {h}]", m * top_k),
            format!("{:?}", y.shape()),
        ));
    }
    check_distinct(OP, out, "out", &[(y, "y"), (weights, "weights")])?;
    u32::try_from(y.numel())
        .map_err(|_| Error::invalid(OP, "elements of y", "< 2^32", y.numel()))?;
    KernelBuilder::new(ctx, "moe_combine")
        .uniform(&CombineParams {
            m: m as u32,
            h: h as u32,
            top_k: top_k as u32,
            _pad: 0,
        })
        .tensor(weights)
        .tensor(y)
        .tensor(out)
        .build_1d(workgroups_for((m * h) as u64, 256))
}
