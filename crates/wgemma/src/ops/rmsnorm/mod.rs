//! Gemma 4 RMSNorm (HF `Gemma4RMSNorm`): `y = x / sqrt(mean(x^2) + eps) * w` in f32 with a
//! plain `w` (NOT `1 + w`), a weightless variant (v_norm) and per-head use (q_norm/k_norm:
//! view `[M, heads * head_dim]` as `[M * heads, head_dim]`). The fused form
//! `out = (residual + rmsnorm(x) * w) * out_scale` makes a post-norm + residual add one
//! dispatch. HF multiplies `layer_scalar` AFTER the last residual add of a decoder layer
//! (`hidden = residual + post_norm(...); hidden *= layer_scalar`), so the layer's last fused
//! norm takes `out_scale = layer_scalar`; the per-layer-input combine
//! `(norm(proj * hidden^-0.5) + per_layer_inputs) * 2^-0.5` is the same op with
//! `input_scale = hidden^-0.5` and `out_scale = 2^-0.5`.
//!
//! Routes, one workgroup per row, chosen by which buffers alias:
//! `norm` (out separate), `norm_inplace` (out = x), `add` (out = residual),
//! `add_inplace` (out = x), `add_to` (all separate). No subgroup route: one row is at most
//! 5376 floats, so the op is bound by dispatch latency, not by the tree reduction.

mod reference;

pub use reference::{rmsnorm_add_ref, rmsnorm_ref};

#[cfg(any(test, feature = "harness"))]
mod cases;
#[cfg(any(test, feature = "harness"))]
pub use cases::{bench_cases, random_cases, CaseMode, RmsNormCase};

use crate::error::{Error, Result};
use crate::gpu::{DType, GpuContext, Kernel, KernelBuilder, Tensor};

const SHADER: &str = "rmsnorm";

/// Gemma 4's `rms_norm_eps`.
pub const EPS: f32 = 1e-6;

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    rows: u32,
    d: u32,
    eps: f32,
    in_scale: f32,
    out_scale: f32,
    has_weight: u32,
    _pad: [u32; 2],
}

/// Scalars of the general form `out = (residual +) rmsnorm(x * input_scale) * w * ...`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RmsNormOptions {
    pub eps: f32,
    /// Multiplies `x` before the norm (HF `per_layer_model_projection_scale`).
    pub input_scale: f32,
    /// Multiplies the result: the norm alone, or `residual + norm` when fused.
    pub output_scale: f32,
}

impl Default for RmsNormOptions {
    fn default() -> Self {
        RmsNormOptions {
            eps: EPS,
            input_scale: 1.0,
            output_scale: 1.0,
        }
    }
}

/// The kernel variant, decided by which tensors share a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RmsNormRoute {
    /// `out = N(x)`, out separate from x.
    Norm,
    /// `x = N(x)`.
    NormInPlace,
    /// `residual = residual + N(x)` (out is the residual).
    Add,
    /// `x = residual + N(x)` (out is x).
    AddInPlace,
    /// `out = residual + N(x)`, all separate.
    AddTo,
}

impl RmsNormRoute {
    fn entry(self) -> &'static str {
        match self {
            RmsNormRoute::Norm => "norm",
            RmsNormRoute::NormInPlace => "norm_inplace",
            RmsNormRoute::Add => "add",
            RmsNormRoute::AddInPlace => "add_inplace",
            RmsNormRoute::AddTo => "add_to",
        }
    }
}

/// Picks the route from the aliasing of `x`, `residual` and `out`; fails closed when x,
/// residual and out are all one buffer.
pub fn choose_route(x: &Tensor, residual: Option<&Tensor>, out: &Tensor) -> Result<RmsNormRoute> {
    let same = |a: &Tensor, b: &Tensor| a.buffer() == b.buffer();
    match residual {
        None if same(out, x) => Ok(RmsNormRoute::NormInPlace),
        None => Ok(RmsNormRoute::Norm),
        Some(r) => match (same(out, r), same(out, x)) {
            (true, true) => Err(Error::NoRoute {
                op: SHADER,
                shapes: format!("x {:?} = residual = out (one buffer)", x.shape()),
                failed: vec![
                    "norm/norm_inplace: needs no residual".into(),
                    "add: x must differ from out".into(),
                    "add_inplace: residual must differ from out".into(),
                    "add_to: x and residual must differ from out".into(),
                ],
            }),
            (true, false) => Ok(RmsNormRoute::Add),
            (false, true) => Ok(RmsNormRoute::AddInPlace),
            (false, false) => Ok(RmsNormRoute::AddTo),
        },
    }
}

fn check_f32(t: &Tensor, what: &str) -> Result<()> {
    if t.dtype() != DType::F32 {
        return Err(Error::invalid(
            SHADER,
            format!("dtype of {what}"),
            "f32",
            format!("{:?}", t.dtype()),
        ));
    }
    Ok(())
}

/// `out = rmsnorm(x) * w` over the last dimension of `x`; `weight = None` is the
/// weightless norm. `out` may be `x` (in place).
pub fn rmsnorm(
    ctx: &GpuContext,
    x: &Tensor,
    weight: Option<&Tensor>,
    out: &Tensor,
    eps: f32,
) -> Result<Kernel> {
    let opts = RmsNormOptions {
        eps,
        ..Default::default()
    };
    rmsnorm_with(ctx, x, weight, None, out, opts)
}

/// `out = (residual + rmsnorm(x) * w) * layer_scalar` (pass 1.0 for layers that do not end
/// here). `out` may be `residual` (the usual in-place hidden-state update) or `x`.
pub fn rmsnorm_add(
    ctx: &GpuContext,
    x: &Tensor,
    weight: Option<&Tensor>,
    residual: &Tensor,
    out: &Tensor,
    layer_scalar: f32,
    eps: f32,
) -> Result<Kernel> {
    let opts = RmsNormOptions {
        eps,
        input_scale: 1.0,
        output_scale: layer_scalar,
    };
    rmsnorm_with(ctx, x, weight, Some(residual), out, opts)
}

/// The checks shared by every RMSNorm builder; returns `(d, rows)`.
fn validate(
    x: &Tensor,
    weight: Option<&Tensor>,
    residual: Option<&Tensor>,
    out: &Tensor,
    opts: RmsNormOptions,
) -> Result<(usize, usize)> {
    check_f32(x, "x")?;
    check_f32(out, "out")?;
    let d = *x.shape().last().unwrap_or(&0);
    if d == 0 {
        return Err(Error::invalid(
            SHADER,
            "last dimension of x",
            ">= 1",
            format!("shape {:?}", x.shape()),
        ));
    }
    let n = x.numel();
    let rows = n / d;
    if out.numel() != n {
        return Err(Error::invalid(
            SHADER,
            "element count of out",
            n,
            out.numel(),
        ));
    }
    if let Some(w) = weight {
        check_f32(w, "weight")?;
        if w.numel() != d {
            return Err(Error::invalid(
                SHADER,
                "element count of weight",
                d,
                w.numel(),
            ));
        }
        if w.buffer() == out.buffer() {
            return Err(Error::invalid(
                SHADER,
                "weight buffer",
                "distinct from out",
                "out",
            ));
        }
    }
    if let Some(r) = residual {
        check_f32(r, "residual")?;
        if r.numel() != n {
            return Err(Error::invalid(
                SHADER,
                "element count of residual",
                n,
                r.numel(),
            ));
        }
    }
    if u32::try_from(n).is_err() {
        return Err(Error::invalid(SHADER, "element count", "< 2^32", n));
    }
    for (what, v, ok) in [
        ("eps", opts.eps, opts.eps.is_finite() && opts.eps >= 0.0),
        (
            "input_scale",
            opts.input_scale,
            opts.input_scale.is_finite(),
        ),
        (
            "output_scale",
            opts.output_scale,
            opts.output_scale.is_finite(),
        ),
    ] {
        if !ok {
            return Err(Error::invalid(SHADER, what, "a finite value (eps >= 0)", v));
        }
    }
    Ok((d, rows))
}

/// The general form: `out = rmsnorm(x * input_scale) * w * output_scale`, or with a
/// residual `out = (residual + rmsnorm(x * input_scale) * w) * output_scale`. Rows are the
/// leading dimensions of `x`, the norm runs over its last dimension `d`; `weight` is f32
/// `[d]`, `residual` and `out` have x's element count.
pub fn rmsnorm_with(
    ctx: &GpuContext,
    x: &Tensor,
    weight: Option<&Tensor>,
    residual: Option<&Tensor>,
    out: &Tensor,
    opts: RmsNormOptions,
) -> Result<Kernel> {
    let (d, rows) = validate(x, weight, residual, out, opts)?;
    let route = choose_route(x, residual, out)?;
    // A 1-element stand-in keeps the binding layout fixed for the weightless norm.
    let dummy;
    let w = match weight {
        Some(w) => w,
        None => {
            dummy = Tensor::zeros(ctx, "rmsnorm.no_weight", &[1], DType::F32)?;
            &dummy
        }
    };
    let builder = KernelBuilder::new(ctx, SHADER)
        .entry(route.entry())
        .uniform(&Params {
            rows: rows as u32,
            d: d as u32,
            eps: opts.eps,
            in_scale: opts.input_scale,
            out_scale: opts.output_scale,
            has_weight: weight.is_some() as u32,
            _pad: [0; 2],
        })
        .tensor(out)
        .tensor(w);
    let builder = match (route, residual) {
        (RmsNormRoute::Norm | RmsNormRoute::Add, _) => builder.tensor(x),
        (RmsNormRoute::AddInPlace, Some(r)) => builder.tensor(r),
        (RmsNormRoute::AddTo, Some(r)) => builder.tensor(x).tensor(r),
        _ => builder,
    };
    builder.build_1d(rows as u64)
}

/// The input norm of the next block in [`rmsnorm_add_norm`]: its weight and the tensor its
/// output goes to.
#[derive(Debug, Clone, Copy)]
pub struct NextNorm<'a> {
    pub weight: &'a Tensor,
    pub out: &'a Tensor,
}

/// `residual = (residual + rmsnorm(x) * w) * layer_scalar`, then
/// `out = rmsnorm(residual) * next.weight`, in ONE dispatch (`rmsnorm_add_norm.wgsl`): the
/// end of one decoder block and the input norm of the next ([`NextNorm`]). Bit-identical to
/// [`rmsnorm_add`] followed by [`rmsnorm`]. `next.out` must differ from `x` and `residual`.
pub fn rmsnorm_add_norm(
    ctx: &GpuContext,
    x: &Tensor,
    weight: Option<&Tensor>,
    residual: &Tensor,
    layer_scalar: f32,
    next: NextNorm<'_>,
    eps: f32,
) -> Result<Kernel> {
    let NextNorm {
        weight: next_weight,
        out,
    } = next;
    let opts = RmsNormOptions {
        eps,
        input_scale: 1.0,
        output_scale: layer_scalar,
    };
    let (d, rows) = validate(x, weight, Some(residual), residual, opts)?;
    check_f32(out, "out")?;
    check_f32(next_weight, "next_weight")?;
    if out.numel() != x.numel() {
        return Err(Error::invalid(
            SHADER,
            "element count of out",
            x.numel(),
            out.numel(),
        ));
    }
    if next_weight.numel() != d {
        return Err(Error::invalid(
            SHADER,
            "element count of next_weight",
            d,
            next_weight.numel(),
        ));
    }
    if x.buffer() == residual.buffer() {
        return Err(Error::invalid(
            SHADER,
            "x buffer",
            "distinct from residual (updated in place)",
            "shared",
        ));
    }
    if out.buffer() == residual.buffer() || out.buffer() == x.buffer() {
        return Err(Error::invalid(
            SHADER,
            "out buffer",
            "distinct from x and residual",
            "shared",
        ));
    }
    let dummy;
    let w = match weight {
        Some(w) => w,
        None => {
            dummy = Tensor::zeros(ctx, "rmsnorm.no_weight", &[1], DType::F32)?;
            &dummy
        }
    };
    KernelBuilder::new(ctx, "rmsnorm_add_norm")
        .uniform(&Params {
            rows: rows as u32,
            d: d as u32,
            eps,
            in_scale: 1.0,
            out_scale: layer_scalar,
            has_weight: weight.is_some() as u32,
            _pad: [0; 2],
        })
        .tensor(residual)
        .tensor(w)
        .tensor(x)
        .tensor(out)
        .tensor(next_weight)
        .build_1d(rows as u64)
}

#[cfg(test)]
mod tests;
