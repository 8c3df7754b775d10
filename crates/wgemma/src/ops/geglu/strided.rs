//! GeGLU with a strided `up` operand: the per-layer-input gate of Gemma 4's PLE layers,
//! `gelu_tanh(gate) * per_layer_inputs[:, layer, :]` read straight out of the
//! `[M, layers * P]` per-layer inputs (no copy of the slice).

use crate::error::{Error, Result};
use crate::gpu::{workgroups_for, DType, GpuContext, Kernel, KernelBuilder, Tensor};

const SHADER: &str = "geglu_strided";

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    n: u32,
    inter: u32,
    up_stride: u32,
    up_offset: u32,
}

/// `out[m, j] = gelu_tanh(gate[m, j]) * up[m * up_stride + up_offset + j]` for gate/out
/// `[M, I]` and `up` holding M rows of `up_stride` floats (`up_offset + I <= up_stride`).
pub fn geglu_strided(
    ctx: &GpuContext,
    gate: &Tensor,
    up: &Tensor,
    up_stride: usize,
    up_offset: usize,
    out: &Tensor,
) -> Result<Kernel> {
    for (t, name) in [(gate, "gate"), (up, "up"), (out, "out")] {
        if t.dtype() != DType::F32 {
            return Err(Error::invalid(
                SHADER,
                format!("dtype of {name}"),
                "f32",
                format!("{:?}", t.dtype()),
            ));
        }
    }
    let inter = gate.shape().last().copied().unwrap_or(0);
    let n = gate.numel();
    if inter == 0 || out.numel() != n {
        return Err(Error::invalid(SHADER, "out element count", n, out.numel()));
    }
    let m = n / inter;
    if up_offset + inter > up_stride || up.numel() < m * up_stride {
        return Err(Error::invalid(
            SHADER,
            "up layout",
            format!(
                "offset {up_offset} + I {inter} <= stride {up_stride}, >= {} elements",
                m * up_stride
            ),
            format!("{} elements", up.numel()),
        ));
    }
    KernelBuilder::new(ctx, SHADER)
        .uniform(&Params {
            n: n as u32,
            inter: inter as u32,
            up_stride: up_stride as u32,
            up_offset: up_offset as u32,
        })
        .tensor(out)
        .tensor(gate)
        .tensor(up)
        .build_1d(workgroups_for(n as u64, 256))
}
