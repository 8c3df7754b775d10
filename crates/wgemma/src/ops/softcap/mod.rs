//! Logit soft-capping, `y = cap * tanh(x / cap)` (Gemma 4's `final_logit_softcapping` = 30),
//! over `[M, vocab]` logits. Routes: `inplace` when `out` is `x` (the usual use: cap the
//! logits buffer before argmax/sampling), `copy` otherwise.

mod reference;

pub use reference::softcap_ref;

#[cfg(any(test, feature = "harness"))]
mod cases;
#[cfg(any(test, feature = "harness"))]
pub use cases::{bench_cases, random_cases, SoftcapCase};

use crate::error::{Error, Result};
use crate::gpu::{workgroups_for, DType, GpuContext, Kernel, KernelBuilder, Tensor};

const SHADER: &str = "softcap";
const WORKGROUP: u32 = 256;

/// Gemma 4's final logit cap.
pub const FINAL_LOGIT_SOFTCAP: f32 = 30.0;

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    n: u32,
    cap: f32,
    _pad: [u32; 2],
}

/// `out = cap * tanh(x / cap)` elementwise; `out` may be `x` (in place). `cap` must be
/// finite and > 0.
pub fn softcap(ctx: &GpuContext, x: &Tensor, out: &Tensor, cap: f32) -> Result<Kernel> {
    for (t, what) in [(x, "dtype of x"), (out, "dtype of out")] {
        if t.dtype() != DType::F32 {
            return Err(Error::invalid(
                SHADER,
                what,
                "f32",
                format!("{:?}", t.dtype()),
            ));
        }
    }
    let n = x.numel();
    if out.numel() != n {
        return Err(Error::invalid(
            SHADER,
            "element count of out",
            n,
            out.numel(),
        ));
    }
    if !(cap.is_finite() && cap > 0.0) {
        return Err(Error::invalid(SHADER, "cap", "finite and > 0", cap));
    }
    // Tensors fit one storage binding, so n < 2^30 and the flat index cannot wrap.
    let n32 = u32::try_from(n).map_err(|_| Error::invalid(SHADER, "element count", "< 2^32", n))?;
    let params = Params {
        n: n32,
        cap,
        _pad: [0; 2],
    };
    let builder = KernelBuilder::new(ctx, SHADER).uniform(&params).tensor(out);
    let builder = if out.buffer() == x.buffer() {
        builder.entry("inplace")
    } else {
        builder.entry("copy").tensor(x)
    };
    builder.build_1d(workgroups_for(n as u64, WORKGROUP))
}

#[cfg(test)]
mod tests;
