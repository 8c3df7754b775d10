//! The built linear op ([`Linear`]), its options, the kernels' uniform params, and the
//! checks of x and y every linear makes.

use super::{LinearRoute, MatvecTuning, Reduction};
use crate::error::{Error, Result};
use crate::gpu::{Activations, DType, Kernel, Pass, Tensor};

/// Options of [`q4_linear_with`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LinearOptions {
    /// Build this route or fail with its failed guards (tests, benchmarks).
    pub route: Option<LinearRoute>,
    /// Use the portable workgroup-memory reduction even when subgroups are available.
    pub portable: bool,
    /// Build the matvec routes with this geometry instead of the adapter table's
    /// (benchmarks, tests); refused when invalid for the shape.
    pub tuning: Option<MatvecTuning>,
    /// Run the matvecs at this activation precision instead of the context's (tests and
    /// benchmarks compare the families on one device; int8 then runs where the dot
    /// products are a polyfill too).
    pub activations: Option<Activations>,
}

/// A built linear op: its route and one kernel per weight chunk, recorded in order.
#[derive(Debug)]
pub struct Linear {
    pub(super) route: LinearRoute,
    pub(super) reduction: Reduction,
    pub(super) kernels: Vec<Kernel>,
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
    /// A linear op another op folder built (`ops/ggml_linear`): its kernels in order.
    pub fn from_kernels(route: LinearRoute, kernels: Vec<Kernel>) -> Linear {
        Linear {
            route,
            reduction: Reduction::NotApplicable,
            kernels,
        }
    }
    /// Records every kernel into `pass`.
    pub fn record(&self, pass: &mut Pass<'_>) {
        self.kernels.iter().for_each(|k| pass.dispatch(k));
    }
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
pub(super) struct Q4Params {
    pub(super) m: u32,
    pub(super) n: u32,
    pub(super) k: u32,
    pub(super) groups: u32,
    pub(super) y_stride: u32,
    pub(super) y_offset: u32,
    pub(super) aux0: u32,
    pub(super) aux1: u32,
    pub(super) eps: f32,
    pub(super) out_scale: f32,
    pub(super) write_resid: u32,
    pub(super) _pad: u32,
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
pub(super) struct DenseParams {
    pub(super) m: u32,
    pub(super) n: u32,
    pub(super) k: u32,
    pub(super) _pad: u32,
}

pub(super) fn to_u32(op: &'static str, what: &str, v: usize) -> Result<u32> {
    u32::try_from(v).map_err(|_| Error::invalid(op, what, "< 2^32", v))
}

/// Checks x f32 `[.., K]` and y f32 `[.., N]` with the same leading rows; returns M.
pub(crate) fn check_io(
    op: &'static str,
    x: &Tensor,
    y: &Tensor,
    n: usize,
    k: usize,
) -> Result<usize> {
    check_io_cols(op, x, y, n, n, k)
}

/// [`check_io`] for a y of `y_cols` columns (an epilogue may halve N).
pub(super) fn check_io_cols(
    op: &'static str,
    x: &Tensor,
    y: &Tensor,
    n: usize,
    y_cols: usize,
    k: usize,
) -> Result<usize> {
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
    if y.shape().last() != Some(&y_cols) || y.numel() != m * y_cols {
        return Err(Error::invalid(
            op,
            "shape of y",
            format!("[{m}, {y_cols}]"),
            format!("{:?}", y.shape()),
        ));
    }
    to_u32(op, "elements of y", m * n)?;
    to_u32(op, "elements of x", m * k)?;
    Ok(m)
}
