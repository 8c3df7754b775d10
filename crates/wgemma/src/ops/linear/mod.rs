//! Linear layers, `y[m, n] = sum_k x[m, k] * W[n, k]` (HF `nn.Linear`, no bias), with
//! x f32 `[M, K]` and y f32 `[M, N]`, over Q4 group-wise weights ([`quant`] documents the
//! format) or dense f32/f16 weights (parity runs).
//!
//! Q4 routes, chosen when the kernels are built (M is fixed then), first eligible wins:
//! - [`LinearRoute::Q4Gemv`] (M = 1) and [`LinearRoute::Q4LinearM3`] (M = 3): vec4<u32>
//!   loads (32 weights), coalesced across lanes, several rows per lane so each x load is
//!   reused, each weight word applied to all M rows; reduced with `subgroupAdd` when the
//!   device has subgroups, else through workgroup memory ([`LinearOptions::portable`]
//!   forces the latter). Guards: M, K % 32, group % 8, device limits.
//! - [`LinearRoute::Q4Gemm`] (M >= 2): 64 x 64 tiles, x and dequantised W staged in
//!   workgroup memory.
//! - [`LinearRoute::Q4Generic`]: any M, one invocation per output.
//!
//! A weight too large for one storage binding is split into row chunks at upload
//! ([`Q4Weight`]); the op then holds one kernel per chunk, each writing its rows of y.

mod cases;
pub mod quant;
pub mod reference;
mod routes;
#[cfg(test)]
mod tests;

pub use cases::{bench_cases, random_cases, DenseLinearCase, Q4LinearCase, WeightData};
pub use quant::{
    dequantize_q4, quantize_q4, Q4Chunk, Q4Host, Q4Weight, Q4Words, CHUNK_ROW_MULTIPLE,
};
pub use reference::{linear_ref, q4_linear_ref, tolerance};
pub use routes::{
    check_dense_route, choose_q4_route, q4_failed_guards, DeviceCaps, LinearRoute, Q4Shape,
    Reduction, Q4_ROUTES,
};

use crate::error::{Error, Result};
use crate::gpu::{workgroups_for, DType, GpuContext, Kernel, KernelBuilder, Pass, Tensor};
use routes::MATVEC_ROWS_PER_WORKGROUP;

/// Options of [`q4_linear_with`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LinearOptions {
    /// Build this route or fail with its failed guards (tests, benchmarks).
    pub route: Option<LinearRoute>,
    /// Use the portable workgroup-memory reduction even when subgroups are available.
    pub portable: bool,
}

/// A built linear op: its route and one kernel per weight chunk, recorded in order.
#[derive(Debug)]
pub struct Linear {
    route: LinearRoute,
    reduction: Reduction,
    kernels: Vec<Kernel>,
}

impl Linear {
    pub fn route(&self) -> LinearRoute {
        self.route
    }
    pub fn reduction(&self) -> Reduction {
        self.reduction
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

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Q4Params {
    m: u32,
    n: u32,
    k: u32,
    groups: u32,
    y_stride: u32,
    y_offset: u32,
    _pad0: u32,
    _pad1: u32,
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct DenseParams {
    m: u32,
    n: u32,
    k: u32,
    _pad: u32,
}

fn to_u32(op: &'static str, what: &str, v: usize) -> Result<u32> {
    u32::try_from(v).map_err(|_| Error::invalid(op, what, "< 2^32", v))
}

/// Checks x f32 `[.., K]` and y f32 `[.., N]` with the same leading rows; returns M.
fn check_io(op: &'static str, x: &Tensor, y: &Tensor, n: usize, k: usize) -> Result<usize> {
    for (t, name) in [(x, "x"), (y, "y")] {
        if t.dtype() != DType::F32 {
            return Err(Error::invalid(
                op,
                format!("dtype of {name}"),
                "f32",
                format!("{:?}", t.dtype()),
            ));
        }
    }
    if x.shape().last() != Some(&k) {
        return Err(Error::invalid(
            op,
            "shape of x (last dim = K)",
            format!("[M, {k}]"),
            format!("{:?}", x.shape()),
        ));
    }
    let m = x.numel() / k;
    if m == 0 {
        return Err(Error::invalid(op, "rows M of x", ">= 1", 0));
    }
    if y.shape().last() != Some(&n) || y.numel() != m * n {
        return Err(Error::invalid(
            op,
            "shape of y",
            format!("[{m}, {n}]"),
            format!("{:?}", y.shape()),
        ));
    }
    to_u32(op, "elements of y", m * n)?;
    to_u32(op, "elements of x", m * k)?;
    Ok(m)
}

/// `y = x W^T` with a Q4 weight, auto-chosen route.
pub fn q4_linear(ctx: &GpuContext, x: &Tensor, w: &Q4Weight, y: &Tensor) -> Result<Linear> {
    q4_linear_with(ctx, x, w, y, &LinearOptions::default())
}

/// `y = x W^T` with a Q4 weight and explicit [`LinearOptions`].
pub fn q4_linear_with(
    ctx: &GpuContext,
    x: &Tensor,
    w: &Q4Weight,
    y: &Tensor,
    options: &LinearOptions,
) -> Result<Linear> {
    const OP: &str = "q4_linear";
    let (n, k, group) = (w.n(), w.k(), w.group());
    let m = check_io(OP, x, y, n, k)?;
    let caps = DeviceCaps::of(ctx);
    // The subgroup matvec maps one 32-lane unit to one subgroup.
    let subgroup = caps.subgroups
        && caps.min_subgroup_size == 32
        && caps.max_subgroup_size == 32
        && !options.portable;
    let shape = Q4Shape { m, k, group };
    let route = choose_q4_route(shape, &caps, subgroup, options.route, || {
        format!(
            "x {:?}, W [{n}, {k}] group {group}, y {:?}",
            x.shape(),
            y.shape()
        )
    })?;
    let is_matvec = matches!(route, LinearRoute::Q4Gemv | LinearRoute::Q4LinearM3);
    let reduction = match (is_matvec, subgroup) {
        (true, true) => Reduction::Subgroup,
        (true, false) => Reduction::Workgroup,
        (false, _) => Reduction::NotApplicable,
    };
    let mut kernels = Vec::with_capacity(w.chunks().len());
    for chunk in w.chunks() {
        let rows = chunk.rows.len();
        let params = Q4Params {
            m: m as u32,
            n: to_u32(OP, "rows of a chunk", rows)?,
            k: k as u32,
            groups: (k / group) as u32,
            y_stride: n as u32,
            y_offset: chunk.rows.start as u32,
            _pad0: 0,
            _pad1: 0,
        };
        let builder = |shader| {
            KernelBuilder::new(ctx, shader)
                .constant("GROUP", group as u64)
                .uniform(&params)
                .tensor(x)
                .tensor(&chunk.packed)
                .tensor(&chunk.scales)
                .tensor(y)
        };
        let kernel = match route {
            LinearRoute::Q4Gemv | LinearRoute::Q4LinearM3 => builder(if subgroup {
                "q4_matvec_sg"
            } else {
                "q4_matvec"
            })
            .constant("MV_M", m as u64)
            .build_1d(workgroups_for(rows as u64, MATVEC_ROWS_PER_WORKGROUP))?,
            LinearRoute::Q4Gemm => {
                builder("q4_gemm").build_1d(rows.div_ceil(64) as u64 * m.div_ceil(64) as u64)?
            }
            _ => builder("q4_linear_generic").build_1d(workgroups_for((m * rows) as u64, 64))?,
        };
        kernels.push(kernel);
    }
    Ok(Linear {
        route,
        reduction,
        kernels,
    })
}

/// `y = x W^T` with a dense weight `w` of dtype f32 or f16 and shape `[N, K]`.
pub fn dense_linear(ctx: &GpuContext, x: &Tensor, w: &Tensor, y: &Tensor) -> Result<Linear> {
    const OP: &str = "dense_linear";
    let route = match w.dtype() {
        DType::F32 => LinearRoute::DenseF32,
        DType::F16 => LinearRoute::DenseF16,
        other => {
            return Err(Error::invalid(
                OP,
                "dtype of w",
                "f32 or f16",
                format!("{other:?}"),
            ))
        }
    };
    let &[n, k] = w.shape() else {
        return Err(Error::invalid(
            OP,
            "shape of w",
            "[N, K]",
            format!("{:?}", w.shape()),
        ));
    };
    if n == 0 || k == 0 {
        return Err(Error::invalid(
            OP,
            "shape of w",
            "N, K >= 1",
            format!("{:?}", w.shape()),
        ));
    }
    to_u32(OP, "elements of w", n * k)?;
    let m = check_io(OP, x, y, n, k)?;
    check_dense_route(route, &DeviceCaps::of(ctx), || {
        format!("x {:?}, w {:?} {:?}", x.shape(), w.shape(), w.dtype())
    })?;
    let kernel = KernelBuilder::new(ctx, "dense_linear")
        .constant("W_F16", (route == LinearRoute::DenseF16) as u64)
        .uniform(&DenseParams {
            m: m as u32,
            n: n as u32,
            k: k as u32,
            _pad: 0,
        })
        .tensor(x)
        .tensor(w)
        .tensor(y)
        .build_1d(n as u64 * m.div_ceil(4) as u64)?;
    Ok(Linear {
        route,
        reduction: Reduction::NotApplicable,
        kernels: vec![kernel],
    })
}
