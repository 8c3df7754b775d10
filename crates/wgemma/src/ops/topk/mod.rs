//! TopK over the last dim of an f32 tensor: the `k` greatest values of each row and their
//! u32 indices, sorted descending. MTP-only (the assistant's centroid head: 2048 centroid
//! logits -> 32 clusters), so it takes an [`OpSet`] and fails closed for a plain session.
//!
//! Order: the total order of [`crate::ops::argmax::order_key`]: NaN (any payload) is the greatest, -0 == +0,
//! -inf < ... < +inf < NaN. Ties: equal keys come out lower index first. The order is then
//! strict, so the output is unique and every route must produce it bit for bit. Values are
//! the input's own bits (a -0 stays -0, a NaN keeps its payload).
//!
//! Routes:
//! - [`TopKRoute::Fast2048To32`]: one row of 2048 -> k = 32, one workgroup of 64 staged
//!   through 12.5 KiB of workgroup memory, four barriers: the 32nd greatest of the 64
//!   per-thread maxima bounds the top 32 from below; the elements above it (at most 1024,
//!   typically a few dozen) are ranked among themselves.
//! - [`TopKRoute::Generic`]: any rows, any n, 1 <= k <= n: rank counting, one thread per
//!   element, the row streamed through workgroup memory in tiles of 256.
//!
//! The indices a TopK writes are distinct within each row by construction; [`TopK`] hands
//! that fact out as a [`DistinctIndices`] token (only this module can make one), which the
//! scatter's uniqueness certificates build on.

mod reference;

pub use reference::topk_ref;

#[cfg(any(test, feature = "harness"))]
mod cases;
#[cfg(any(test, feature = "harness"))]
pub use cases::{bench_cases, case_input, random_cases, TopKCase, TopKData};

use crate::error::{Error, Result};
use crate::gpu::{DType, GpuContext, Grid, Kernel, KernelBuilder, Tensor};
use crate::ops::opset::{GatedOp, OpSet};

const OP: &str = "topk";
const FAST_N: usize = 2048;
const FAST_K: usize = 32;
const FAST_WORKGROUP: u32 = 64;
/// Keys of 2048 elements, 1024 candidate indices, 64 thread maxima (key, index), a counter
/// and the threshold.
const FAST_WORKGROUP_BYTES: u32 = 4 * (2048 + 1024 + 2 * 64 + 1 + 2);
const GENERIC_WORKGROUP: u32 = 256;
const GENERIC_WORKGROUP_BYTES: u32 = 4 * GENERIC_WORKGROUP + 8;

/// How a TopK runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TopKRoute {
    /// f32 [1, 1, 2048] -> k = 32, workgroup 64 (`topk_2048_32.wgsl`).
    Fast2048To32,
    /// Any rows, n, and 1 <= k <= n (`topk_generic.wgsl`).
    Generic,
}

/// Proof that the u32 indices in one tensor ([rows, k]) are pairwise distinct within each
/// row and all `< bound`. Made only by [`topk`] for the indices tensor it writes; valid for
/// the values that TopK kernel writes (dispatch it before any consumer in the same pass,
/// and do not write the tensor by other means).
#[derive(Debug, Clone)]
pub struct DistinctIndices {
    tensor: Tensor,
    rows: usize,
    k: usize,
    bound: usize,
}

impl DistinctIndices {
    pub fn tensor(&self) -> &Tensor {
        &self.tensor
    }
    pub fn rows(&self) -> usize {
        self.rows
    }
    /// Indices per row.
    pub fn k(&self) -> usize {
        self.k
    }
    /// Every index is `< bound` (the TopK's row length).
    pub fn bound(&self) -> usize {
        self.bound
    }
    /// Whether this proof is about `tensor` (same buffer, same shape).
    pub fn certifies(&self, tensor: &Tensor) -> bool {
        same_tensor(&self.tensor, tensor)
    }
}

/// Same buffer and shape: a certificate is about one tensor, not about its look-alikes.
pub(crate) fn same_tensor(a: &Tensor, b: &Tensor) -> bool {
    std::ptr::eq(a.buffer(), b.buffer()) && a.shape() == b.shape() && a.dtype() == b.dtype()
}

/// A planned TopK: its kernel, the route chosen and the distinctness token of its indices.
#[derive(Debug)]
pub struct TopK {
    pub route: TopKRoute,
    pub kernel: Kernel,
    pub distinct: DistinctIndices,
}

/// Plans TopK of `input` (f32 [..., n]) into `values` (f32 [..., k]) and `indices`
/// (u32 [..., k]), `k` being their last dim; the fast route when its guards hold, else the
/// generic one. Errors: [`Error::Invalid`] for malformed shapes/dtypes, [`Error::NoRoute`]
/// when `ops` lacks TopK or no route's guards hold.
pub fn topk(
    ctx: &GpuContext,
    ops: &OpSet,
    input: &Tensor,
    values: &Tensor,
    indices: &Tensor,
) -> Result<TopK> {
    plan(ctx, ops, input, values, indices, None)
}

/// [`topk`] on a named route (tests, benchmarks); [`Error::NoRoute`] when its guards fail.
pub fn topk_on_route(
    ctx: &GpuContext,
    ops: &OpSet,
    input: &Tensor,
    values: &Tensor,
    indices: &Tensor,
    route: TopKRoute,
) -> Result<TopK> {
    plan(ctx, ops, input, values, indices, Some(route))
}

struct Shape {
    rows: usize,
    n: usize,
    k: usize,
}

fn check_shapes(input: &Tensor, values: &Tensor, indices: &Tensor) -> Result<Shape> {
    for (t, what, dtype) in [
        (input, "dtype of input", DType::F32),
        (values, "dtype of values", DType::F32),
        (indices, "dtype of indices", DType::U32),
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
    let n = input.shape().last().copied().unwrap_or(0);
    if n == 0 || input.numel() == 0 {
        return Err(Error::invalid(
            OP,
            "input shape",
            "a non-empty tensor with a last dim >= 1",
            format!("{:?}", input.shape()),
        ));
    }
    if values.shape() != indices.shape() {
        return Err(Error::invalid(
            OP,
            "shape of indices",
            format!("{:?} (the shape of values)", values.shape()),
            format!("{:?}", indices.shape()),
        ));
    }
    let lead = &input.shape()[..input.shape().len() - 1];
    let k = values.shape().last().copied().unwrap_or(0);
    if values.shape().len() != input.shape().len() || &values.shape()[..lead.len()] != lead {
        return Err(Error::invalid(
            OP,
            "shape of values",
            format!("{lead:?} + [k]"),
            format!("{:?}", values.shape()),
        ));
    }
    if k == 0 || k > n {
        return Err(Error::invalid(
            OP,
            "k (last dim of values)",
            format!("1..={n}"),
            k,
        ));
    }
    if u32::try_from(input.numel()).is_err() {
        return Err(Error::invalid(
            OP,
            "input elements",
            "< 2^32",
            input.numel(),
        ));
    }
    Ok(Shape {
        rows: input.numel() / n,
        n,
        k,
    })
}

/// The guards of `route` that fail for `shape` on this device.
fn failed_guards(ctx: &GpuContext, route: TopKRoute, s: &Shape) -> Vec<String> {
    let limits = &ctx.limits;
    let mut failed = Vec::new();
    let mut guard = |ok: bool, text: String| {
        if !ok {
            failed.push(format!("{route:?}: {text}"));
        }
    };
    match route {
        TopKRoute::Fast2048To32 => {
            guard(
                s.rows == 1 && s.n == FAST_N,
                format!("input is one row of {FAST_N} (found {} x {})", s.rows, s.n),
            );
            guard(s.k == FAST_K, format!("k == {FAST_K} (found {})", s.k));
            guard(
                limits.max_compute_workgroup_storage_size >= FAST_WORKGROUP_BYTES,
                format!(
                    "workgroup storage >= {FAST_WORKGROUP_BYTES} bytes (device {})",
                    limits.max_compute_workgroup_storage_size
                ),
            );
            guard(
                limits.max_compute_invocations_per_workgroup >= FAST_WORKGROUP,
                format!("{FAST_WORKGROUP} invocations per workgroup"),
            );
        }
        TopKRoute::Generic => {
            guard(
                limits.max_compute_workgroup_storage_size >= GENERIC_WORKGROUP_BYTES,
                format!(
                    "workgroup storage >= {GENERIC_WORKGROUP_BYTES} bytes (device {})",
                    limits.max_compute_workgroup_storage_size
                ),
            );
            guard(
                limits.max_compute_invocations_per_workgroup >= GENERIC_WORKGROUP,
                format!("{GENERIC_WORKGROUP} invocations per workgroup"),
            );
            let workgroups = (s.rows * s.n.div_ceil(GENERIC_WORKGROUP as usize)) as u64;
            guard(
                Grid::fold_1d(workgroups, limits.max_compute_workgroups_per_dimension).is_ok(),
                format!("{workgroups} workgroups fit the device's 2-D grid"),
            );
        }
    }
    failed
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct GenericParams {
    n: u32,
    k: u32,
    rows: u32,
    tiles: u32,
}

fn plan(
    ctx: &GpuContext,
    ops: &OpSet,
    input: &Tensor,
    values: &Tensor,
    indices: &Tensor,
    forced: Option<TopKRoute>,
) -> Result<TopK> {
    let shapes = format!(
        "input {:?} -> values/indices {:?}",
        input.shape(),
        values.shape()
    );
    ops.require(GatedOp::TopK, OP, &shapes)?;
    let s = check_shapes(input, values, indices)?;
    let candidates = match forced {
        Some(route) => vec![route],
        None => vec![TopKRoute::Fast2048To32, TopKRoute::Generic],
    };
    let mut failed = Vec::new();
    let mut chosen = None;
    for route in candidates {
        let f = failed_guards(ctx, route, &s);
        if f.is_empty() {
            chosen = Some(route);
            break;
        }
        failed.extend(f);
    }
    let route = chosen.ok_or(Error::NoRoute {
        op: OP,
        shapes,
        failed,
    })?;
    let kernel = match route {
        TopKRoute::Fast2048To32 => KernelBuilder::new(ctx, "topk_2048_32")
            .tensor(input)
            .tensor(values)
            .tensor(indices)
            .build(Grid::new(1, 1, 1))?,
        TopKRoute::Generic => {
            let tiles = s.n.div_ceil(GENERIC_WORKGROUP as usize);
            KernelBuilder::new(ctx, "topk_generic")
                .uniform(&GenericParams {
                    n: s.n as u32,
                    k: s.k as u32,
                    rows: s.rows as u32,
                    tiles: tiles as u32,
                })
                .tensor(input)
                .tensor(values)
                .tensor(indices)
                .build_1d((s.rows * tiles) as u64)?
        }
    };
    Ok(TopK {
        route,
        kernel,
        distinct: DistinctIndices {
            tensor: indices.clone(),
            rows: s.rows,
            k: s.k,
            bound: s.n,
        },
    })
}

#[cfg(test)]
mod tests;
