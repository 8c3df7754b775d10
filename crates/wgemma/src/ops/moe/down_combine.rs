//! The expert down projection and the combine as one op:
//! `out[m] = sum_j weights[m, j] * W[ids[m, j]] x[m * top_k + j]`.
//!
//! Routes, first eligible wins:
//! - [`MoeCombineRoute::Q4Fused`] (`moe_q4_down_combine.wgsl`, one dispatch per expert
//!   chunk): each workgroup takes one token and a row tile and sums its slots' experts
//!   itself. Guards: Q4 weight, K % 32, M <= [`FUSED_MAX_TOKENS`] (it reads each slot's
//!   expert for its own token, so tokens sharing an expert read it again; beyond a few
//!   tokens the grouped linear reads each expert once), device.
//! - [`MoeCombineRoute::Separate`]: [`moe_expert_linear_with`] into a `[M * top_k, N]`
//!   scratch tensor allocated here, once, then [`moe_combine`].

use super::linear::{
    check_distinct, check_dtype, choose_moe_linear_route, grouped_lanes, ids_shape,
    moe_expert_linear_with, MoeDeviceCaps, MoeLinearOptions, MoeLinearRoute, MoeLinearShape,
};
use super::moe_combine;
use super::weight::{ChunkData, ExpertFormat, ExpertWeight};
use crate::error::{Error, Result};
use crate::gpu::{DType, GpuContext, Kernel, KernelBuilder, Pass, Tensor};

const OP: &str = "moe_expert_linear_combine";
/// Most tokens the fused route takes.
pub const FUSED_MAX_TOKENS: usize = 4;
const FUSED_WORKGROUP_BYTES: u32 = 256 * 8;

/// How [`moe_expert_linear_combine`] runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MoeCombineRoute {
    /// Q4 down projection and combine in one kernel per expert chunk.
    Q4Fused,
    /// The gathered-expert linear (this route of it) into scratch, then [`moe_combine`].
    Separate(MoeLinearRoute),
}

impl std::fmt::Display for MoeCombineRoute {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MoeCombineRoute::Q4Fused => f.write_str("q4_fused"),
            MoeCombineRoute::Separate(r) => write!(f, "separate({r})"),
        }
    }
}

/// A built down projection + combine: its route and kernels, recorded in order.
#[derive(Debug)]
pub struct MoeDownCombine {
    route: MoeCombineRoute,
    kernels: Vec<Kernel>,
}

impl MoeDownCombine {
    pub fn route(&self) -> MoeCombineRoute {
        self.route
    }
    pub fn kernels(&self) -> &[Kernel] {
        &self.kernels
    }
    pub fn into_kernels(self) -> Vec<Kernel> {
        self.kernels
    }
    /// Records every kernel into `pass`.
    pub fn record(&self, pass: &mut Pass<'_>) {
        self.kernels.iter().for_each(|k| pass.dispatch(k));
    }
}

/// The guards of the fused route that fail (empty when eligible).
pub fn fused_failed_guards(
    format: ExpertFormat,
    k: usize,
    tokens: usize,
    ctx: &GpuContext,
) -> Vec<String> {
    let mut failed = Vec::new();
    let mut need = |ok: bool, what: String| {
        if !ok {
            failed.push(format!("q4_fused: {what}"));
        }
    };
    need(
        matches!(format, ExpertFormat::Q4 { .. }),
        format!("Q4 weight (found {format:?})"),
    );
    need(
        k % 32 == 0,
        format!("K % 32 == 0 for vec4<u32> loads (found K = {k})"),
    );
    need(
        tokens <= FUSED_MAX_TOKENS,
        format!("M <= {FUSED_MAX_TOKENS} (found {tokens})"),
    );
    let limits = &ctx.limits;
    need(
        limits.max_compute_invocations_per_workgroup >= 256
            && limits.max_compute_workgroup_size_x >= 256,
        "device allows 256 invocations per workgroup".to_string(),
    );
    need(
        limits.max_compute_workgroup_storage_size >= FUSED_WORKGROUP_BYTES,
        format!("device workgroup storage >= {FUSED_WORKGROUP_BYTES} bytes"),
    );
    failed
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct FusedParams {
    m: u32,
    top_k: u32,
    n: u32,
    k: u32,
    groups: u32,
    e0: u32,
    e1: u32,
    x_div: u32,
    tiles: u32,
    accumulate: u32,
    _pad: [u32; 2],
}

/// Slot classes of the fused kernel: `top_k` rounded up to a power of two, at most the
/// units of a workgroup (K = 704, top-8: 8 lanes, 32 units, 4 row pairs per workgroup).
pub fn fused_slot_classes(top_k: usize, lanes: u32) -> u32 {
    (top_k.next_power_of_two() as u32).min(256 / lanes)
}

/// `out[m] = sum_j weights[m, j] * W[ids[m, j]] x[m * top_k + j]` with the route chosen
/// automatically (or `forced`). `x` f32 `[M * top_k, K]` (one row per slot, e.g. the GeGLU
/// output) or `[M, K]`; `ids` u32 and `weights` f32 `[M, top_k]`; `out` f32 `[M, N]`.
pub fn moe_expert_linear_combine(
    ctx: &GpuContext,
    x: &Tensor,
    ids: &Tensor,
    weights: &Tensor,
    w: &ExpertWeight,
    out: &Tensor,
    forced: Option<MoeCombineRoute>,
) -> Result<MoeDownCombine> {
    let (m, top_k) = ids_shape(OP, ids)?;
    let (n, k) = (w.n(), w.k());
    let slots = m * top_k;
    check_dtype(OP, weights, "weights", DType::F32)?;
    check_dtype(OP, x, "x", DType::F32)?;
    check_dtype(OP, out, "out", DType::F32)?;
    if weights.shape() != ids.shape() {
        return Err(Error::invalid(
            OP,
            "shape of weights",
            format!("{:?} (as ids)", ids.shape()),
            format!("{:?}", weights.shape()),
        ));
    }
    if out.shape().last() != Some(&n) || out.numel() != m * n {
        return Err(Error::invalid(
            OP,
            "shape of out",
            format!("[{m}, {n}]"),
            format!("{:?}", out.shape()),
        ));
    }
    if x.shape().last() != Some(&k) || (x.numel() != m * k && x.numel() != slots * k) {
        return Err(Error::invalid(
            OP,
            "shape of x",
            format!("[{slots}, {k}] or [{m}, {k}]"),
            format!("{:?}", x.shape()),
        ));
    }
    check_distinct(
        OP,
        out,
        "out",
        &[(x, "x"), (ids, "ids"), (weights, "weights")],
    )?;
    for (what, v) in [
        ("elements of out", m * n),
        ("elements of x", x.numel()),
        ("elements of the scratch [M * top_k, N]", slots * n),
    ] {
        u32::try_from(v).map_err(|_| Error::invalid(OP, what, "< 2^32", v))?;
    }
    let fused_failed = fused_failed_guards(w.format(), k, m, ctx);
    let route = match forced {
        Some(MoeCombineRoute::Q4Fused) | None if fused_failed.is_empty() => {
            MoeCombineRoute::Q4Fused
        }
        Some(MoeCombineRoute::Q4Fused) => {
            return Err(Error::NoRoute {
                op: OP,
                shapes: format!(
                    "x {:?}, ids {:?}, W [{}, {n}, {k}] {:?}",
                    x.shape(),
                    ids.shape(),
                    w.experts(),
                    w.format()
                ),
                failed: fused_failed,
            })
        }
        Some(MoeCombineRoute::Separate(r)) => MoeCombineRoute::Separate(r),
        None => {
            let shape = MoeLinearShape {
                format: w.format(),
                k,
                slots,
            };
            match choose_moe_linear_route(shape, &MoeDeviceCaps::of(ctx), None, String::new) {
                Ok(r) => MoeCombineRoute::Separate(r),
                Err(Error::NoRoute { failed, .. }) => {
                    return Err(Error::NoRoute {
                        op: OP,
                        shapes: format!("x {:?}, ids {:?}", x.shape(), ids.shape()),
                        failed: fused_failed.into_iter().chain(failed).collect(),
                    })
                }
                Err(e) => return Err(e),
            }
        }
    };
    let kernels = match route {
        MoeCombineRoute::Separate(linear_route) => {
            // Scratch for the per-slot outputs, allocated once with the kernels.
            let y = Tensor::zeros(ctx, "moe down scratch", &[slots, n], DType::F32)?;
            let options = MoeLinearOptions {
                route: Some(linear_route),
                ..Default::default()
            };
            let mut kernels = moe_expert_linear_with(ctx, x, ids, w, &y, &options)?.into_kernels();
            kernels.push(moe_combine(ctx, &y, weights, out)?);
            kernels
        }
        MoeCombineRoute::Q4Fused => fused_kernels(ctx, x, ids, weights, w, out)?,
    };
    Ok(MoeDownCombine { route, kernels })
}

fn fused_kernels(
    ctx: &GpuContext,
    x: &Tensor,
    ids: &Tensor,
    weights: &Tensor,
    w: &ExpertWeight,
    out: &Tensor,
) -> Result<Vec<Kernel>> {
    let (m, top_k) = (ids.shape()[0], ids.shape()[1]);
    let (n, k) = (w.n(), w.k());
    let ExpertFormat::Q4 { group } = w.format() else {
        return Err(Error::invalid(
            OP,
            "weight format",
            "Q4",
            format!("{:?}", w.format()),
        ));
    };
    let x_div = if x.numel() == m * top_k * k { 1 } else { top_k };
    let lanes = grouped_lanes(k);
    let classes = fused_slot_classes(top_k, lanes);
    let rows_per_wg = 2 * (256 / lanes / classes) as usize;
    let tiles = n.div_ceil(rows_per_wg);
    let mut kernels = Vec::with_capacity(w.chunks().len());
    for (c, chunk) in w.chunks().iter().enumerate() {
        let ChunkData::Q4 { packed, scales } = &chunk.data else {
            return Err(Error::invalid(
                OP,
                format!("buffers of expert chunk {c}"),
                "Q4 packed words and scales",
                "dense data",
            ));
        };
        let params = FusedParams {
            m: m as u32,
            top_k: top_k as u32,
            n: n as u32,
            k: k as u32,
            groups: (k / group) as u32,
            e0: chunk.experts.start as u32,
            e1: chunk.experts.end as u32,
            x_div: x_div as u32,
            tiles: tiles as u32,
            accumulate: (c > 0) as u32,
            _pad: [0; 2],
        };
        kernels.push(
            KernelBuilder::new(ctx, "moe_q4_down_combine")
                .constant("GROUP", group as u64)
                .constant("LANES", lanes as u64)
                .constant("SLOT_PAR", classes as u64)
                .uniform(&params)
                .tensor(ids)
                .tensor(weights)
                .tensor(x)
                .tensor(packed)
                .tensor(scales)
                .tensor(out)
                .build_1d((m * tiles) as u64)?,
        );
    }
    Ok(kernels)
}
