//! The RMSNorm prologue of the Q4 matvecs ([`q4_linear_norm`]): x built by every workgroup
//! from the residual stream (norm, add + norm, add) instead of read, so the norm costs no
//! dispatch of its own. The kernels: `q4_matvec[_wide]_norm[_sg]` and
//! `q4q8_matvec_norm[_sg]` (`q4_matvec_norm_prologue.wgsli`, `q4_matvec_q8_norm_prologue.wgsli`).

use super::{
    build_q4, int8, matvec_caps, q4_failed_guards, q4_fused_available_for, tuning, Epilogue,
    Linear, LinearOptions, LinearRoute, Q4Shape, Q4Weight,
};
use crate::error::{Error, Result};
use crate::gpu::{DType, GpuContext, Tensor};

/// What the norm prologue of [`q4_linear_norm`] computes into x (each row m of `[M, K]`),
/// with `N(v; w) = v / sqrt(mean(v^2) + eps) * w`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NormPrologueMode {
    /// `x = N(resid; w_in)` (a block's input norm on the residual stream).
    Norm,
    /// `r = (resid + N(branch; w_branch)) * out_scale`, `x = N(r; w_in)`: a block's
    /// post-norm and residual add, then the next block's input norm.
    AddNorm,
    /// `r = (resid + N(branch; w_branch)) * out_scale`, `x = r` (the per-layer input gate
    /// reads the residual itself).
    Add,
}

impl NormPrologueMode {
    pub(super) fn code(self) -> u64 {
        match self {
            NormPrologueMode::Norm => 1,
            NormPrologueMode::AddNorm => 2,
            NormPrologueMode::Add => 3,
        }
    }
}

/// The RMSNorm prologue of a fused matvec: x is built by every workgroup from the
/// residual stream instead of being read, so the norm needs no dispatch of its own.
#[derive(Debug, Clone, Copy)]
pub struct NormPrologue<'a> {
    pub mode: NormPrologueMode,
    /// The residual stream `[M, K]` (read only).
    pub resid: &'a Tensor,
    /// The branch output and its post-norm weight `[K]` (`AddNorm`, `Add`).
    pub branch: Option<(&'a Tensor, &'a Tensor)>,
    /// The input norm's weight `[K]` (`Norm`, `AddNorm`).
    pub w_in: Option<&'a Tensor>,
    pub eps: f32,
    /// Scale of the updated residual (the layer scalar at a layer's end; else 1).
    pub out_scale: f32,
    /// Where the updated residual r goes (`AddNorm`, `Add`): a buffer other than `resid`
    /// and `branch`, written by one workgroup. `None`: r is not kept (another matvec
    /// with the same prologue keeps it).
    pub resid_out: Option<&'a Tensor>,
}

/// Storage bindings of the norm-prologue matvec (packed, scales, y, other, resid, branch,
/// w_branch, w_in, resid_out).
const NORM_PROLOGUE_STORAGE_BINDINGS: u32 = 9;

/// Whether [`q4_linear_norm`] can build for `m` activation rows of `w` with `epilogue` on
/// this device: the fused epilogue's conditions, 9 storage bindings per stage, and x of
/// `M * K` floats in workgroup memory beside the reduction's. Callers use a separate norm
/// kernel and [`q4_linear_fused`] otherwise.
pub fn q4_norm_prologue_available(
    ctx: &GpuContext,
    m: usize,
    w: &Q4Weight,
    epilogue: Epilogue,
) -> bool {
    let limits = &ctx.limits;
    let bytes = norm_prologue_workgroup_bytes(ctx, m, w.k(), w.group());
    m >= 1
        && w.k() % 4 == 0
        && limits.max_storage_buffers_per_shader_stage >= NORM_PROLOGUE_STORAGE_BINDINGS
        && bytes <= limits.max_compute_workgroup_storage_size as usize
        && q4_fused_available_for(ctx, m, w, epilogue)
}

/// Workgroup memory of the norm-prologue matvec on this device: x (`m * k` f32; the int8
/// family stages at least one chunk of int8 blocks instead), the norm's tree (256 f32) and
/// the reduction's own arrays (subgroup or portable).
fn norm_prologue_workgroup_bytes(ctx: &GpuContext, m: usize, k: usize, group: usize) -> usize {
    let (subgroup, caps) = matvec_caps(ctx, &LinearOptions::default());
    // The subgroup finish parks at most 4 rows of each 8-lane slot (any tuning).
    let reduction_bytes = if subgroup {
        128 * 16 * tuning::parts(m) as usize
    } else {
        4 * 256 * 16
    };
    let shape = Q4Shape { m, k, group };
    let x_bytes = if q4_failed_guards(LinearRoute::Q4Q8Matvec, shape, &caps, subgroup).is_empty() {
        int8::min_stage_bytes(m)
    } else {
        m * k * 4
    };
    x_bytes + 256 * 4 + reduction_bytes
}

/// `y = epilogue(prologue(resid) W^T)`: the matvec with a norm prologue (see
/// [`NormPrologue`]); fails closed when [`q4_norm_prologue_available`] is false.
pub fn q4_linear_norm(
    ctx: &GpuContext,
    prologue: &NormPrologue,
    w: &Q4Weight,
    y: &Tensor,
    epilogue: Epilogue,
) -> Result<Linear> {
    q4_linear_norm_with(ctx, prologue, w, y, epilogue, &LinearOptions::default())
}

/// [`q4_linear_norm`] with explicit [`LinearOptions`] (the portable reduction in tests).
pub fn q4_linear_norm_with(
    ctx: &GpuContext,
    prologue: &NormPrologue,
    w: &Q4Weight,
    y: &Tensor,
    epilogue: Epilogue,
    options: &LinearOptions,
) -> Result<Linear> {
    const OP: &str = "q4_linear_norm";
    let k = w.k();
    let resid = prologue.resid;
    let m = resid.numel() / k.max(1);
    if !q4_norm_prologue_available(ctx, m, w, epilogue) {
        return Err(Error::NoRoute {
            op: OP,
            shapes: format!(
                "resid {:?}, W [{}, {k}] in {} chunk(s), epilogue {epilogue:?}",
                resid.shape(),
                w.n(),
                w.chunks().len()
            ),
            failed: vec![format!(
                "norm prologue: a matvec route (M <= 9), {NORM_PROLOGUE_STORAGE_BINDINGS} storage \
                 bindings per stage (device: {}), {} bytes of workgroup memory (device: {})",
                ctx.limits.max_storage_buffers_per_shader_stage,
                norm_prologue_workgroup_bytes(ctx, m, k, w.group()),
                ctx.limits.max_compute_workgroup_storage_size
            )],
        });
    }
    let (needs_branch, needs_w_in) = match prologue.mode {
        NormPrologueMode::Norm => (false, true),
        NormPrologueMode::AddNorm => (true, true),
        NormPrologueMode::Add => (true, false),
    };
    if prologue.branch.is_some() != needs_branch || prologue.w_in.is_some() != needs_w_in {
        return Err(Error::invalid(
            OP,
            format!("inputs of the {:?} prologue", prologue.mode),
            format!("branch {needs_branch}, w_in {needs_w_in}"),
            format!(
                "branch {}, w_in {}",
                prologue.branch.is_some(),
                prologue.w_in.is_some()
            ),
        ));
    }
    let mut rows = vec![(resid, "resid")];
    let mut vectors = vec![];
    if let Some((branch, w_branch)) = prologue.branch {
        rows.push((branch, "branch"));
        vectors.push((w_branch, "w_branch"));
    }
    if let Some(w_in) = prologue.w_in {
        vectors.push((w_in, "w_in"));
    }
    if let Some(out) = prologue.resid_out {
        if !needs_branch {
            return Err(Error::invalid(
                OP,
                "resid_out of the Norm prologue",
                "none (the residual is not updated)",
                "a tensor",
            ));
        }
        rows.push((out, "resid_out"));
    }
    for (t, name) in rows {
        if t.dtype() != DType::F32 || t.numel() != m * k {
            return Err(Error::invalid(
                OP,
                name,
                format!("f32 [{m}, {k}]"),
                format!("{:?} {:?}", t.dtype(), t.shape()),
            ));
        }
    }
    for (t, name) in vectors {
        if t.dtype() != DType::F32 || t.numel() != k {
            return Err(Error::invalid(
                OP,
                name,
                format!("f32 [{k}]"),
                format!("{:?} {:?}", t.dtype(), t.shape()),
            ));
        }
    }
    // The residual output is written while every workgroup still reads the old stream.
    let written = [Some(y), prologue.resid_out];
    let read = [Some(resid), prologue.branch.map(|b| b.0)];
    for out in written.iter().flatten() {
        if read.iter().flatten().any(|r| r.buffer() == out.buffer()) {
            return Err(Error::invalid(
                OP,
                "output buffers (y, resid_out)",
                "distinct from resid and branch",
                "shared",
            ));
        }
    }
    build_q4(ctx, resid, w, y, options, epilogue, Some(prologue))
}
