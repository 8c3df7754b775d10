//! GeGLU, the gate of Gemma 4's MLP: `out = gelu_tanh(gate) * up` with PyTorch's tanh
//! approximation (`hidden_activation = "gelu_pytorch_tanh"`). Two layouts:
//! `split` takes gate and up as two `[M, I]` tensors; `fused` takes one `[M, 2I]` tensor
//! whose rows are `[gate | up]`, the output of a single linear over the stacked
//! `gate_proj`/`up_proj` weights (one weight pass for both).

mod reference;
mod strided;

pub use reference::{geglu_fused_ref, geglu_ref, geglu_strided_ref, gelu_tanh_ref};
pub use strided::geglu_strided;

#[cfg(any(test, feature = "harness"))]
mod cases;
#[cfg(any(test, feature = "harness"))]
pub use cases::{bench_cases, random_cases, random_strided_cases, GegluCase, GegluStridedCase};

use crate::error::{Error, Result};
use crate::gpu::{workgroups_for, DType, GpuContext, Kernel, KernelBuilder, Tensor};

const SHADER: &str = "geglu";
const WORKGROUP: u32 = 256;

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    n: u32,
    inter: u32,
    _pad: [u32; 2],
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

fn check_distinct(out: &Tensor, input: &Tensor, what: &str) -> Result<()> {
    if out.buffer() == input.buffer() {
        return Err(Error::invalid(
            SHADER,
            format!("buffer of out (written while {what} is read)"),
            format!("distinct from {what}"),
            format!("the buffer of {what}"),
        ));
    }
    Ok(())
}

fn last_dim(t: &Tensor) -> usize {
    t.shape().last().copied().unwrap_or(0)
}

/// `out = gelu_tanh(gate) * up` over `[M, I]` tensors (any shape with equal element counts;
/// `I` = the last dimension of `gate`).
pub fn geglu(ctx: &GpuContext, gate: &Tensor, up: &Tensor, out: &Tensor) -> Result<Kernel> {
    check_f32(gate, "gate")?;
    check_f32(up, "up")?;
    check_f32(out, "out")?;
    let n = gate.numel();
    if up.numel() != n {
        return Err(Error::invalid(SHADER, "element count of up", n, up.numel()));
    }
    if out.numel() != n {
        return Err(Error::invalid(
            SHADER,
            "element count of out",
            n,
            out.numel(),
        ));
    }
    check_distinct(out, gate, "gate")?;
    check_distinct(out, up, "up")?;
    let n32 = u32::try_from(n).map_err(|_| Error::invalid(SHADER, "element count", "< 2^32", n))?;
    KernelBuilder::new(ctx, SHADER)
        .entry("split")
        .uniform(&Params {
            n: n32,
            inter: last_dim(gate).max(1) as u32,
            _pad: [0; 2],
        })
        .tensor(out)
        .tensor(gate)
        .tensor(up)
        .build_1d(workgroups_for(n as u64, WORKGROUP))
}

/// `out[m, j] = gelu_tanh(gate_up[m, j]) * gate_up[m, I + j]` for `gate_up` `[M, 2I]`
/// (gate first in each row) and `out` with `M * I` elements.
pub fn geglu_fused(ctx: &GpuContext, gate_up: &Tensor, out: &Tensor) -> Result<Kernel> {
    check_f32(gate_up, "gate_up")?;
    check_f32(out, "out")?;
    let two_i = last_dim(gate_up);
    if two_i == 0 || two_i % 2 != 0 {
        return Err(Error::invalid(
            SHADER,
            "last dimension of gate_up ([M, 2I], gate first)",
            "even and >= 2",
            format!("shape {:?}", gate_up.shape()),
        ));
    }
    let n = gate_up.numel() / 2;
    if out.numel() != n {
        return Err(Error::invalid(
            SHADER,
            "element count of out",
            n,
            out.numel(),
        ));
    }
    check_distinct(out, gate_up, "gate_up")?;
    if u32::try_from(gate_up.numel()).is_err() {
        return Err(Error::invalid(
            SHADER,
            "element count of gate_up",
            "< 2^32",
            gate_up.numel(),
        ));
    }
    KernelBuilder::new(ctx, SHADER)
        .entry("fused")
        .uniform(&Params {
            n: n as u32,
            inter: (two_i / 2) as u32,
            _pad: [0; 2],
        })
        .tensor(out)
        .tensor(gate_up)
        .build_1d(workgroups_for(n as u64, WORKGROUP))
}

#[cfg(test)]
mod tests;
