//! The GeGLU stages of Gemma 4 as one op: a Q4 matvec with the activation in its epilogue
//! when the route allows it ([`q4_fused_available`]), else the projection followed
//! by the separate GeGLU kernel (prefill GEMMs, dense weights, split weights). Both give
//! the same values: the epilogue calls the same `gelu_tanh` on the same f32 totals.

use super::weights::LinearWeight;
use crate::error::Result;
use crate::gpu::{GpuContext, Kernel, Pass, Tensor};
use crate::ops::geglu::{geglu_fused, geglu_strided};
use crate::ops::linear::{q4_fused_available, q4_linear_fused, Epilogue, Linear};

/// One or two dispatches computing a GeGLU stage.
pub enum GegluStage {
    Fused(Linear),
    Split(Linear, Kernel),
}

impl GegluStage {
    pub fn record(&self, pass: &mut Pass<'_>) {
        match self {
            GegluStage::Fused(l) => l.record(pass),
            GegluStage::Split(l, k) => {
                l.record(pass);
                pass.dispatch(k);
            }
        }
    }
}

/// `act = gelu_tanh(gate) * up` with `[gate | up] = x W^T` (W stacks gate over up, 2I
/// rows). `scratch` `[M, 2I]` holds the pre-activation when the stage is split.
pub fn fused_geglu(
    ctx: &GpuContext,
    x: &Tensor,
    w: &LinearWeight,
    act: &Tensor,
    scratch: &Tensor,
) -> Result<GegluStage> {
    if let LinearWeight::Q4(q) = w {
        if q4_fused_available(ctx, x, q, Epilogue::GegluPairs) {
            return Ok(GegluStage::Fused(q4_linear_fused(
                ctx,
                x,
                q,
                act,
                Epilogue::GegluPairs,
            )?));
        }
    }
    Ok(GegluStage::Split(
        w.linear(ctx, x, scratch)?,
        geglu_fused(ctx, scratch, act)?,
    ))
}

/// What a GELU gate multiplies by: `other[m * stride + offset + n]` for output row m,
/// column n (the per-layer inputs: one layer's slice of every row).
#[derive(Debug, Clone, Copy)]
pub struct GateFactor<'a> {
    pub other: &'a Tensor,
    pub stride: usize,
    pub offset: usize,
}

impl<'a> GateFactor<'a> {
    /// The matvec epilogue that multiplies by this factor.
    pub fn epilogue(self) -> Epilogue<'a> {
        Epilogue::GeluMul {
            other: self.other,
            stride: self.stride,
            offset: self.offset,
        }
    }
}

/// `out[m, n] = gelu_tanh((x W^T)[m, n]) * factor[m, n]` (see [`GateFactor`]). `scratch`
/// `[M, N]` holds the pre-activation when the stage is split.
pub fn fused_gelu_mul(
    ctx: &GpuContext,
    x: &Tensor,
    w: &LinearWeight,
    factor: GateFactor<'_>,
    out: &Tensor,
    scratch: &Tensor,
) -> Result<GegluStage> {
    let epilogue = factor.epilogue();
    if let LinearWeight::Q4(q) = w {
        if q4_fused_available(ctx, x, q, epilogue) {
            return Ok(GegluStage::Fused(q4_linear_fused(
                ctx, x, q, out, epilogue,
            )?));
        }
    }
    Ok(GegluStage::Split(
        w.linear(ctx, x, scratch)?,
        geglu_strided(
            ctx,
            scratch,
            factor.other,
            factor.stride,
            factor.offset,
            out,
        )?,
    ))
}
