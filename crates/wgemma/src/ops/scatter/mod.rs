//! Scatter along the last dim (aten.scatter.src): `dst[r, idx[r, i]] = src[r, i]` on a
//! destination that already holds values (the centroid head's full-vocab row, prefilled
//! with `min(selected) - 1`).
//!
//! Rules: among duplicate indices of one row the LAST in source order wins (torch leaves
//! this undefined on GPUs; we define it). Out-of-range indices (`>= n`) are DROPPED: torch
//! raises, but refusing would need a readback of GPU-resident indices, so the kernels skip
//! them and never write out of bounds.
//!
//! Routes:
//! - [`ScatterRoute::DuplicateSafe`] (any session, any indices): claim (atomicMax of
//!   `i + 1` into a per-target winner buffer), apply (the winner writes), release (winner
//!   back to zero): three dispatches over the source elements.
//! - [`ScatterRoute::ParallelUnique`] (one dispatch, one thread per source element): ONLY
//!   for an index tensor with a [`UniqueIndices`] certificate, in a session whose
//!   [`OpSet`] has the certified scatter. Uncertified indices (no certificate, or one for
//!   another tensor) take the safe route; a certificate offered to a plain session is an
//!   error ([`Error::NoRoute`]), not a silent downgrade.

mod certificate;
mod reference;

pub use certificate::{PermutationCertificate, UniqueIndices};
pub use reference::scatter_ref;

use crate::error::{Error, Result};
use crate::gpu::{workgroups_for, DType, GpuContext, Kernel, KernelBuilder, Tensor};
use crate::ops::opset::{GatedOp, OpSet};

#[cfg(any(test, feature = "harness"))]
mod cases;
#[cfg(any(test, feature = "harness"))]
pub use cases::{bench_cases, random_cases, ScatterCase, ScatterIndices};

const OP: &str = "scatter";
const WORKGROUP: u32 = 256;

/// How a scatter runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ScatterRoute {
    /// Last write wins in source order; any indices (`scatter_last_write.wgsl`).
    DuplicateSafe,
    /// One thread per source element; certified-unique indices only (`scatter_unique.wgsl`).
    ParallelUnique,
}

/// A planned scatter: its kernels (dispatch in order, in one pass) and the route taken.
#[derive(Debug)]
pub struct Scatter {
    pub route: ScatterRoute,
    pub kernels: Vec<Kernel>,
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    rows: u32,
    n: u32,
    s: u32,
    _pad: u32,
}

struct Shape {
    rows: usize,
    n: usize,
    s: usize,
}

fn check_shapes(dst: &Tensor, idx: &Tensor, src: &Tensor) -> Result<Shape> {
    for (t, what, dtype) in [
        (dst, "dtype of dst", DType::F32),
        (idx, "dtype of idx", DType::U32),
        (src, "dtype of src", DType::F32),
    ] {
        if t.dtype() != dtype {
            return Err(Error::invalid(
                OP,
                what,
                format!("{dtype:?}"),
                format!("{:?}", t.dtype()),
            ));
        }
    }
    let n = dst.shape().last().copied().unwrap_or(0);
    let s = idx.shape().last().copied().unwrap_or(0);
    if n == 0 || s == 0 || dst.numel() == 0 || idx.numel() == 0 {
        return Err(Error::invalid(
            OP,
            "shapes of dst and idx",
            "non-empty, last dims >= 1",
            format!("dst {:?}, idx {:?}", dst.shape(), idx.shape()),
        ));
    }
    let rows = dst.numel() / n;
    let lead = |t: &Tensor| t.shape()[..t.shape().len() - 1].to_vec();
    if src.shape() != idx.shape() || lead(idx) != lead(dst) {
        return Err(Error::invalid(
            OP,
            "shapes of idx and src",
            format!("both {:?} + [s]", lead(dst)),
            format!("idx {:?}, src {:?}", idx.shape(), src.shape()),
        ));
    }
    if u32::try_from(dst.numel()).is_err() || u32::try_from(idx.numel()).is_err() {
        return Err(Error::invalid(
            OP,
            "elements of dst / idx",
            "< 2^32",
            format!("{} / {}", dst.numel(), idx.numel()),
        ));
    }
    Ok(Shape { rows, n, s })
}

/// The guards of the parallel route that fail.
fn parallel_guards(ops: &OpSet, idx: &Tensor, certificate: Option<&UniqueIndices>) -> Vec<String> {
    let mut failed = Vec::new();
    if let Some(missing) = ops.missing(GatedOp::CertifiedScatter) {
        failed.push(format!("ParallelUnique: {missing}"));
    }
    match certificate {
        None => {
            failed.push("ParallelUnique: idx carries a uniqueness certificate (none given)".into())
        }
        Some(c) if !c.certifies(idx) => failed.push(format!(
            "ParallelUnique: the certificate is for idx (it names another tensor, {:?} {:?})",
            c.tensor().dtype(),
            c.tensor().shape()
        )),
        Some(_) => {}
    }
    failed
}

/// Plans `dst[r, idx[r, i]] = src[r, i]` (dst f32 `[.., n]`, idx u32 and src f32 `[.., s]`
/// with dst's leading dims). The parallel route when `certificate` certifies `idx` and
/// `ops` allows it; the duplicate-safe route when there is no certificate or it names
/// another tensor. A certificate offered to an op set without the certified scatter is
/// [`Error::NoRoute`].
pub fn scatter(
    ctx: &GpuContext,
    ops: &OpSet,
    dst: &Tensor,
    idx: &Tensor,
    src: &Tensor,
    certificate: Option<&UniqueIndices>,
) -> Result<Scatter> {
    let s = check_shapes(dst, idx, src)?;
    if certificate.is_some() {
        ops.require(GatedOp::CertifiedScatter, OP, &shapes(dst, idx))?;
    }
    let route = if parallel_guards(ops, idx, certificate).is_empty() {
        ScatterRoute::ParallelUnique
    } else {
        ScatterRoute::DuplicateSafe
    };
    build(ctx, route, &s, dst, idx, src)
}

/// [`scatter`] on a named route (tests, benchmarks); [`Error::NoRoute`] naming every failed
/// guard when the route is not allowed for these indices in this session.
pub fn scatter_on_route(
    ctx: &GpuContext,
    ops: &OpSet,
    dst: &Tensor,
    idx: &Tensor,
    src: &Tensor,
    certificate: Option<&UniqueIndices>,
    route: ScatterRoute,
) -> Result<Scatter> {
    let s = check_shapes(dst, idx, src)?;
    if route == ScatterRoute::ParallelUnique {
        let failed = parallel_guards(ops, idx, certificate);
        if !failed.is_empty() {
            return Err(Error::NoRoute {
                op: OP,
                shapes: shapes(dst, idx),
                failed,
            });
        }
    }
    build(ctx, route, &s, dst, idx, src)
}

fn shapes(dst: &Tensor, idx: &Tensor) -> String {
    format!("dst {:?} <- idx {:?}", dst.shape(), idx.shape())
}

fn build(
    ctx: &GpuContext,
    route: ScatterRoute,
    s: &Shape,
    dst: &Tensor,
    idx: &Tensor,
    src: &Tensor,
) -> Result<Scatter> {
    let params = Params {
        rows: s.rows as u32,
        n: s.n as u32,
        s: s.s as u32,
        _pad: 0,
    };
    let workgroups = workgroups_for((s.rows * s.s) as u64, WORKGROUP);
    let kernels = match route {
        ScatterRoute::ParallelUnique => vec![KernelBuilder::new(ctx, "scatter_unique")
            .uniform(&params)
            .tensor(idx)
            .tensor(src)
            .tensor(dst)
            .build_1d(workgroups)?],
        ScatterRoute::DuplicateSafe => {
            // Planned once; all zeros between runs (release restores what claim touched).
            let winner = Tensor::zeros(ctx, "scatter winner", &[s.rows, s.n], DType::U32)?;
            let entry = |entry: &'static str| {
                KernelBuilder::new(ctx, "scatter_last_write")
                    .entry(entry)
                    .uniform(&params)
                    .tensor(idx)
                    .tensor(&winner)
            };
            vec![
                entry("claim").build_1d(workgroups)?,
                entry("apply")
                    .tensor(src)
                    .tensor(dst)
                    .build_1d(workgroups)?,
                entry("release").build_1d(workgroups)?,
            ]
        }
    };
    Ok(Scatter { route, kernels })
}

#[cfg(test)]
mod tests;
