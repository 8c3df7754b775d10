//! The residual stream of a forward, and where its RMSNorms run.
//!
//! Gemma 4 ends every block with `h = (h + N(branch; w_post)) * scale` and starts the next
//! with `x = N(h; w_in)`. A [`Residual`] holds the branch output not yet added (pending)
//! and decides how each consumer gets its input:
//! - **Kernels** (any route, MoE, dense weights): the add and the next norm run as one
//!   `rmsnorm_add_norm` dispatch (or `rmsnorm` / `rmsnorm_add`) writing `x` or `h` in place.
//! - **Prologues** (Q4 matvec routes, decode and verify): no dispatch at all; each consuming
//!   matvec rebuilds x in its workgroups from h and the pending branch
//!   ([`NormPrologue`]) and one of them writes the updated h into the other of two
//!   residual buffers (every workgroup still reads the old one). Both ways compute the
//!   same values with the same reduction (tested bit for bit in `tests`).

use super::geglu_stage::{fused_geglu, fused_gelu_mul, GateFactor, GegluStage};
use super::weights::LinearWeight;
use crate::error::{Error, Result};
use crate::gpu::{GpuContext, Kernel, Tensor};
use crate::ops::linear::{
    q4_linear_norm, q4_norm_prologue_available, Epilogue, Linear, NormPrologue, NormPrologueMode,
    Q4Weight,
};
use crate::ops::rmsnorm::{rmsnorm, rmsnorm_add, rmsnorm_add_norm, NextNorm};

/// A branch output waiting to be added to the residual: `h = (h + N(branch; weight)) * scale`.
#[derive(Clone, Copy)]
pub struct Pending<'a> {
    pub branch: &'a Tensor,
    pub weight: &'a Tensor,
    pub scale: f32,
}

/// What a block's projections read: a materialised `x`, or a norm prologue.
#[derive(Clone, Copy)]
pub enum BlockInput<'a> {
    X(&'a Tensor),
    Prologue(NormPrologue<'a>),
}

/// The residual stream of one plan (see the module docs).
pub struct Residual<'a> {
    ctx: &'a GpuContext,
    eps: f32,
    /// The buffer holding h now, and (prologue mode) the one the next add writes.
    h: &'a Tensor,
    spare: Option<&'a Tensor>,
    /// `x` of the kernel mode.
    x: &'a Tensor,
    pending: Option<Pending<'a>>,
}

impl<'a> Residual<'a> {
    /// A stream on `h` whose norms run as kernels writing `x`.
    pub fn kernels(ctx: &'a GpuContext, h: &'a Tensor, x: &'a Tensor, eps: f32) -> Self {
        Residual {
            ctx,
            eps,
            h,
            spare: None,
            x,
            pending: None,
        }
    }

    /// A stream on `h` whose norms run as matvec prologues; adds alternate between `h`
    /// and `spare`.
    pub fn prologues(
        ctx: &'a GpuContext,
        h: &'a Tensor,
        spare: &'a Tensor,
        x: &'a Tensor,
        eps: f32,
    ) -> Self {
        Residual {
            ctx,
            eps,
            h,
            spare: Some(spare),
            x,
            pending: None,
        }
    }

    pub fn uses_prologues(&self) -> bool {
        self.spare.is_some()
    }

    /// The buffer holding h once every pending add is applied (after [`Self::input`]).
    pub fn h(&self) -> &'a Tensor {
        self.h
    }

    /// Queues `h = (h + N(branch; weight)) * scale`; it runs with the next input.
    pub fn add(&mut self, pending: Pending<'a>) -> Result<()> {
        if self.pending.is_some() {
            return Err(Error::invalid(
                "residual",
                "pending branch outputs",
                "at most one",
                2,
            ));
        }
        self.pending = Some(pending);
        Ok(())
    }

    /// The input of the next block: `N(h'; w_in)` where `w_in` is given, else `h'` itself,
    /// with `h'` the stream after the pending add. Kernel mode pushes the norm kernel to
    /// `kernels`; prologue mode returns the prologue its consumers build (call
    /// [`Self::commit`] once they are planned).
    pub fn input(
        &mut self,
        w_in: Option<&'a Tensor>,
        kernels: &mut Vec<Kernel>,
    ) -> Result<BlockInput<'a>> {
        let ctx = self.ctx;
        let eps = self.eps;
        match (self.spare, self.pending, w_in) {
            (None, None, Some(w)) => {
                kernels.push(rmsnorm(ctx, self.h, Some(w), self.x, eps)?);
                Ok(BlockInput::X(self.x))
            }
            (None, None, None) => Ok(BlockInput::X(self.h)),
            (None, Some(p), Some(w)) => {
                self.pending = None;
                let next = NextNorm {
                    weight: w,
                    out: self.x,
                };
                kernels.push(rmsnorm_add_norm(
                    ctx,
                    p.branch,
                    Some(p.weight),
                    self.h,
                    p.scale,
                    next,
                    eps,
                )?);
                Ok(BlockInput::X(self.x))
            }
            (None, Some(p), None) => {
                self.pending = None;
                kernels.push(rmsnorm_add(
                    ctx,
                    p.branch,
                    Some(p.weight),
                    self.h,
                    self.h,
                    p.scale,
                    eps,
                )?);
                Ok(BlockInput::X(self.h))
            }
            (Some(spare), pending, w_in) => {
                let mode = match (pending, w_in) {
                    (None, Some(_)) => NormPrologueMode::Norm,
                    (Some(_), Some(_)) => NormPrologueMode::AddNorm,
                    (Some(_), None) => NormPrologueMode::Add,
                    (None, None) => return Ok(BlockInput::X(self.h)),
                };
                Ok(BlockInput::Prologue(NormPrologue {
                    mode,
                    resid: self.h,
                    branch: pending.map(|p| (p.branch, p.weight)),
                    w_in,
                    eps,
                    out_scale: pending.map_or(1.0, |p| p.scale),
                    resid_out: pending.map(|_| spare),
                }))
            }
        }
    }

    /// Prologue mode: the consumers of the last [`Self::input`] are planned, so the
    /// updated residual now lives in the other buffer.
    pub fn commit(&mut self) {
        if let (Some(spare), Some(_)) = (self.spare, self.pending.take()) {
            self.spare = Some(self.h);
            self.h = spare;
        }
    }

    /// Applies the pending add and the final norm into `out` (the head's hidden state),
    /// or only the add when there is no head. Always a kernel: the head reads `out`
    /// itself (the assistant too).
    pub fn finish(
        &mut self,
        final_norm: Option<(&'a Tensor, &'a Tensor)>,
    ) -> Result<Option<Kernel>> {
        let ctx = self.ctx;
        let Some(p) = self.pending.take() else {
            return Ok(match final_norm {
                Some((w, out)) => Some(rmsnorm(ctx, self.h, Some(w), out, self.eps)?),
                None => None,
            });
        };
        Ok(Some(match final_norm {
            Some((weight, out)) => rmsnorm_add_norm(
                ctx,
                p.branch,
                Some(p.weight),
                self.h,
                p.scale,
                NextNorm { weight, out },
                self.eps,
            )?,
            None => rmsnorm_add(
                ctx,
                p.branch,
                Some(p.weight),
                self.h,
                self.h,
                p.scale,
                self.eps,
            )?,
        }))
    }
}

/// The Q4 weight of `w` when the norm prologue can build for it (`m` rows, `epilogue`).
pub fn prologue_weight<'w>(
    ctx: &GpuContext,
    m: usize,
    w: &'w LinearWeight,
    epilogue: Epilogue,
) -> Option<&'w Q4Weight> {
    match w {
        LinearWeight::Q4(q) if q4_norm_prologue_available(ctx, m, q, epilogue) => Some(q),
        _ => None,
    }
}

/// `y = input W^T`. `keep` marks the one projection of a prologue group that writes the
/// updated residual.
pub fn project(
    ctx: &GpuContext,
    input: &BlockInput,
    w: &LinearWeight,
    y: &Tensor,
    keep: bool,
) -> Result<Linear> {
    match input {
        BlockInput::X(x) => w.linear(ctx, x, y),
        BlockInput::Prologue(p) => {
            let m = p.resid.numel() / w_k(w);
            let q = prologue_weight(ctx, m, w, Epilogue::None).ok_or_else(|| no_prologue(w))?;
            q4_linear_norm(ctx, &keep_or_not(p, keep), q, y, Epilogue::None)
        }
    }
}

/// The MLP's gate_up projection with GeGLU (`act = gelu(gate) * up`).
pub fn project_geglu(
    ctx: &GpuContext,
    input: &BlockInput,
    w: &LinearWeight,
    act: &Tensor,
    scratch: &Tensor,
) -> Result<GegluStage> {
    match input {
        BlockInput::X(x) => fused_geglu(ctx, x, w, act, scratch),
        BlockInput::Prologue(p) => {
            let m = p.resid.numel() / w_k(w);
            let q =
                prologue_weight(ctx, m, w, Epilogue::GegluPairs).ok_or_else(|| no_prologue(w))?;
            Ok(GegluStage::Fused(q4_linear_norm(
                ctx,
                p,
                q,
                act,
                Epilogue::GegluPairs,
            )?))
        }
    }
}

/// The per-layer input gate: `out = gelu(input W^T) * factor` (see [`GateFactor`]).
pub fn project_gelu_mul(
    ctx: &GpuContext,
    input: &BlockInput,
    w: &LinearWeight,
    factor: GateFactor<'_>,
    out: &Tensor,
    scratch: &Tensor,
) -> Result<GegluStage> {
    match input {
        BlockInput::X(x) => fused_gelu_mul(ctx, x, w, factor, out, scratch),
        BlockInput::Prologue(p) => {
            let epilogue = factor.epilogue();
            let m = p.resid.numel() / w_k(w);
            let q = prologue_weight(ctx, m, w, epilogue).ok_or_else(|| no_prologue(w))?;
            Ok(GegluStage::Fused(q4_linear_norm(ctx, p, q, out, epilogue)?))
        }
    }
}

fn keep_or_not<'a>(p: &NormPrologue<'a>, keep: bool) -> NormPrologue<'a> {
    NormPrologue {
        resid_out: if keep { p.resid_out } else { None },
        ..*p
    }
}

fn w_k(w: &LinearWeight) -> usize {
    match w {
        LinearWeight::Q4(q) => q.k().max(1),
        LinearWeight::Dense(t) => t.shape().last().copied().unwrap_or(1).max(1),
        LinearWeight::Ggml(g) => g.k().max(1),
    }
}

fn no_prologue(w: &LinearWeight) -> Error {
    Error::NoRoute {
        op: "q4_linear_norm",
        shapes: match w {
            LinearWeight::Q4(q) => format!("W [{}, {}]", q.n(), q.k()),
            LinearWeight::Dense(t) => format!("dense W {:?}", t.shape()),
            LinearWeight::Ggml(g) => format!("{:?} W [{}, {}]", g.ty(), g.n(), g.k()),
        },
        failed: vec!["the plan chose norm prologues for a weight that cannot take one".into()],
    }
}
