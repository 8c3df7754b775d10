//! GeGLU with a strided `up` operand: the per-layer-input gate of Gemma 4's PLE layers,
//! `gelu_tanh(gate) * per_layer_inputs[:, layer, :]` read straight out of the
//! `[M, layers * P]` per-layer inputs (no copy of the slice).

use super::reference::gelu_tanh_ref;
use crate::error::{Error, Result};
use crate::gpu::{workgroups_for, DType, GpuContext, Kernel, KernelBuilder, Tensor};
use crate::harness::{Check, Expected, OpCase, Prepared, Rng, Values};
use rand::Rng as _;

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

/// CPU reference of [`geglu_strided`].
pub fn geglu_strided_ref(
    gate: &[f32],
    up: &[f32],
    inter: usize,
    up_stride: usize,
    up_offset: usize,
) -> Vec<f32> {
    gate.iter()
        .enumerate()
        .map(|(i, &g)| {
            let (m, j) = (i / inter, i % inter);
            gelu_tanh_ref(g) * up[m * up_stride + up_offset + j]
        })
        .collect()
}

/// Harness case: M rows, I columns, the slice `layer` of `layers`.
pub struct GegluStridedCase {
    pub m: usize,
    pub inter: usize,
    pub layers: usize,
    pub layer: usize,
}

impl OpCase for GegluStridedCase {
    fn name(&self) -> String {
        format!(
            "geglu_strided m={} i={} layer={}/{}",
            self.m, self.inter, self.layer, self.layers
        )
    }

    fn prepare(&self, ctx: &GpuContext, rng: &mut Rng) -> Result<Prepared> {
        let stride = self.layers * self.inter;
        let gate: Vec<f32> = (0..self.m * self.inter)
            .map(|_| rng.random_range(-4.0..4.0))
            .collect();
        let up: Vec<f32> = (0..self.m * stride)
            .map(|_| rng.random_range(-2.0..2.0))
            .collect();
        let tg = Tensor::from_f32(ctx, "gate", &[self.m, self.inter], &gate)?;
        let tu = Tensor::from_f32(ctx, "up", &[self.m, stride], &up)?;
        let out = Tensor::zeros(ctx, "out", &[self.m, self.inter], DType::F32)?;
        let offset = self.layer * self.inter;
        let kernel = geglu_strided(ctx, &tg, &tu, stride, offset, &out)?;
        Ok(Prepared {
            kernels: vec![kernel],
            outputs: vec![Expected {
                name: "out",
                tensor: out,
                reference: Values::F32(geglu_strided_ref(&gate, &up, self.inter, stride, offset)),
                check: Check::Close {
                    max_abs: 1e-5,
                    nmse: 1e-10,
                },
            }],
            bytes_moved: 12 * (self.m * self.inter) as u64,
        })
    }
}

pub fn random_strided_cases(rng: &mut Rng) -> Vec<Box<dyn OpCase>> {
    let layers = rng.random_range(1..6);
    vec![Box::new(GegluStridedCase {
        m: rng.random_range(1..9),
        inter: rng.random_range(1..300),
        layers,
        layer: rng.random_range(0..layers),
    })]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_layout_is_refused() {
        let ctx = crate::harness::test_context();
        let gate = Tensor::zeros(ctx, "gate", &[2, 4], DType::F32).unwrap();
        let up = Tensor::zeros(ctx, "up", &[2, 8], DType::F32).unwrap();
        let out = Tensor::zeros(ctx, "out", &[2, 4], DType::F32).unwrap();
        assert!(geglu_strided(ctx, &gate, &up, 8, 4, &out).is_ok());
        assert!(geglu_strided(ctx, &gate, &up, 8, 5, &out).is_err());
        assert!(geglu_strided(ctx, &gate, &up, 16, 0, &out).is_err());
    }
}
