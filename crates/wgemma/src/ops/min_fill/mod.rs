//! Min-fill: `dst[..] = min(src) - 1`, HF's mask value for the tokens the MTP assistant's
//! centroid head did not select (`Gemma4AssistantMaskedEmbedder`: `output =
//! torch.full(..., selected_logits.min() - 1)`, then the selected logits are scattered
//! over it). One dispatch: every workgroup reduces `src` (the 4096 selected logits at E2B
//! shapes) and fills its block of `dst` (256 x 16 elements).
//!
//! Rules (the CPU reference [`min_fill_ref`] states them too): the min runs over ALL of
//! `src` (HF takes one min over the whole tensor, not per row); a NaN in `src` makes the
//! fill NaN (torch.min propagates NaN); the subtraction is one f32 operation, which equals
//! HF's f64 `min.item() - 1.0` rounded back to f32.

mod reference;

pub use reference::min_fill_ref;

#[cfg(any(test, feature = "harness"))]
mod cases;
#[cfg(any(test, feature = "harness"))]
pub use cases::{bench_cases, random_cases, MinFillCase};

use crate::error::{Error, Result};
use crate::gpu::{workgroups_for, DType, GpuContext, Kernel, KernelBuilder, Tensor};

const SHADER: &str = "min_fill";
const WORKGROUP: u32 = 256;
const ITEMS: u32 = 16;

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    n_src: u32,
    n_dst: u32,
    _pad: [u32; 2],
}

/// Plans `dst[i] = min(src) - 1` for every element of `dst` (both f32, any shapes, `src`
/// non-empty, distinct buffers).
pub fn min_fill(ctx: &GpuContext, src: &Tensor, dst: &Tensor) -> Result<Kernel> {
    for (t, what) in [(src, "dtype of src"), (dst, "dtype of dst")] {
        if t.dtype() != DType::F32 {
            return Err(Error::invalid(
                SHADER,
                what,
                "f32",
                format!("{:?}", t.dtype()),
            ));
        }
    }
    if src.numel() == 0 || dst.numel() == 0 {
        return Err(Error::invalid(
            SHADER,
            "element counts of src and dst",
            ">= 1 each",
            format!("{} and {}", src.numel(), dst.numel()),
        ));
    }
    if src.buffer() == dst.buffer() {
        return Err(Error::invalid(
            SHADER,
            "dst",
            "a tensor other than src",
            "src itself",
        ));
    }
    let to_u32 = |what: &str, n: usize| {
        u32::try_from(n).map_err(|_| Error::invalid(SHADER, what.to_string(), "< 2^32", n))
    };
    let params = Params {
        n_src: to_u32("elements of src", src.numel())?,
        n_dst: to_u32("elements of dst", dst.numel())?,
        _pad: [0; 2],
    };
    KernelBuilder::new(ctx, SHADER)
        .uniform(&params)
        .tensor(src)
        .tensor(dst)
        .build_1d(workgroups_for(dst.numel() as u64, WORKGROUP * ITEMS))
}

#[cfg(test)]
mod tests;
