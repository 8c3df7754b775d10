//! GeGLU, the gate of Gemma 4's MLP: `out = gelu_tanh(gate) * up` with PyTorch's tanh
//! approximation (`hidden_activation = "gelu_pytorch_tanh"`). Two layouts:
//! `split` takes gate and up as two `[M, I]` tensors; `fused` takes one `[M, 2I]` tensor
//! whose rows are `[gate | up]`, the output of a single linear over the stacked
//! `gate_proj`/`up_proj` weights (one weight pass for both).

mod reference;
mod strided;

pub use reference::{geglu_fused_ref, geglu_ref, gelu_tanh_ref};
pub use strided::{geglu_strided, geglu_strided_ref, random_strided_cases, GegluStridedCase};

use crate::error::{Error, Result};
use crate::gpu::{workgroups_for, DType, GpuContext, Kernel, KernelBuilder, Tensor};
use crate::harness::{Check, Expected, OpCase, Prepared, Rng, Values};
use rand::Rng as _;

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

/// Harness case: `m` rows of intermediate size `inter`; `range` bounds the gate values.
pub struct GegluCase {
    pub m: usize,
    pub inter: usize,
    pub fused: bool,
    pub range: f32,
}

impl GegluCase {
    pub fn new(m: usize, inter: usize, fused: bool) -> Self {
        GegluCase {
            m,
            inter,
            fused,
            range: 6.0,
        }
    }
}

impl OpCase for GegluCase {
    fn name(&self) -> String {
        format!(
            "geglu {} m={} inter={} range={}",
            if self.fused { "fused" } else { "split" },
            self.m,
            self.inter,
            self.range
        )
    }

    fn prepare(&self, ctx: &GpuContext, rng: &mut Rng) -> Result<Prepared> {
        let (m, i) = (self.m, self.inter);
        let n = m * i;
        let r = self.range;
        let gate: Vec<f32> = (0..n).map(|_| rng.random_range(-r..r)).collect();
        let up: Vec<f32> = (0..n).map(|_| rng.random_range(-3.0..3.0)).collect();
        let out = Tensor::zeros(ctx, "out", &[m, i], DType::F32)?;
        let kernel = if self.fused {
            let gate_up: Vec<f32> = gate
                .chunks(i)
                .zip(up.chunks(i))
                .flat_map(|(g, u)| g.iter().chain(u).copied())
                .collect();
            let t = Tensor::from_f32(ctx, "gate_up", &[m, 2 * i], &gate_up)?;
            geglu_fused(ctx, &t, &out)?
        } else {
            let tg = Tensor::from_f32(ctx, "gate", &[m, i], &gate)?;
            let tu = Tensor::from_f32(ctx, "up", &[m, i], &up)?;
            geglu(ctx, &tg, &tu, &out)?
        };
        Ok(Prepared {
            kernels: vec![kernel],
            outputs: vec![Expected {
                name: "out",
                tensor: out,
                reference: Values::F32(geglu_ref(&gate, &up)),
                // lavapipe measures ~2e-6 / 2e-15; erf-GELU instead of tanh-GELU would be off
                // by up to ~5e-4.
                check: Check::Close {
                    max_abs: 2e-5,
                    nmse: 1e-12,
                },
            }],
            bytes_moved: 3 * 4 * n as u64,
        })
    }
}

/// Both layouts over random sizes (not multiples of the workgroup, single rows).
pub fn random_cases(rng: &mut Rng) -> Vec<Box<dyn OpCase>> {
    [false, true]
        .into_iter()
        .map(|fused| {
            Box::new(GegluCase::new(
                rng.random_range(1..5),
                rng.random_range(1..1500),
                fused,
            )) as Box<dyn OpCase>
        })
        .collect()
}

/// E2B: intermediate 6144 (12288 on the KV-shared layers), decode and a 512-row prefill.
pub fn bench_cases() -> Vec<Box<dyn OpCase>> {
    let mut cases: Vec<Box<dyn OpCase>> = Vec::new();
    for inter in [6144, 12288] {
        for fused in [false, true] {
            cases.push(Box::new(GegluCase::new(1, inter, fused)));
        }
        cases.push(Box::new(GegluCase::new(512, inter, true)));
    }
    cases
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::{read_tensor_f32, run_kernels, ContextOptions};
    use crate::harness::{assert_cases_pass, check, test_context};

    #[test]
    fn both_layouts_match_reference() {
        let cases: Vec<Box<dyn OpCase>> = [(1, 1), (1, 255), (3, 257), (2, 1000)]
            .into_iter()
            .flat_map(|(m, i)| {
                [false, true].map(|f| Box::new(GegluCase::new(m, i, f)) as Box<dyn OpCase>)
            })
            .collect();
        assert_cases_pass(&cases, 0..2);
    }

    /// Saturated tails: gelu(50) = 50, gelu(-50) = -0, and no NaN from tanh overflow.
    #[test]
    fn large_gates_saturate_without_nan() {
        let mut case = GegluCase::new(2, 300, true);
        case.range = 200.0;
        assert_cases_pass(&[Box::new(case) as Box<dyn OpCase>], 0..1);
        let ctx = test_context();
        let g = [50.0f32, -50.0, 1e30, -1e30, 0.0];
        let tg = Tensor::from_f32(ctx, "g", &[5], &g).unwrap();
        let tu = Tensor::from_f32(ctx, "u", &[5], &[1.0; 5]).unwrap();
        let out = Tensor::zeros(ctx, "out", &[5], DType::F32).unwrap();
        run_kernels(ctx, &[geglu(ctx, &tg, &tu, &out).unwrap()]);
        let got = pollster::block_on(read_tensor_f32(ctx, &out)).unwrap();
        assert_eq!(&got[..2], &[50.0, 0.0]);
        assert!(got.iter().all(|v| !v.is_nan()), "{got:?}");
    }

    /// Values of torch.nn.functional.gelu(x, approximate="tanh"), on the GPU and the CPU
    /// reference.
    #[test]
    fn gelu_tanh_matches_pytorch_values() {
        let table = [
            (1.0f32, 0.841_192f32),
            (-1.0, -0.158_808),
            (0.5, 0.345_714),
            (-3.0, -0.003_637_39),
            (2.5, 2.484_916),
        ];
        let ctx = test_context();
        let xs: Vec<f32> = table.iter().map(|t| t.0).collect();
        let tg = Tensor::from_f32(ctx, "g", &[xs.len()], &xs).unwrap();
        let tu = Tensor::from_f32(ctx, "u", &[xs.len()], &vec![1.0; xs.len()]).unwrap();
        let out = Tensor::zeros(ctx, "out", &[xs.len()], DType::F32).unwrap();
        run_kernels(ctx, &[geglu(ctx, &tg, &tu, &out).unwrap()]);
        let gpu = pollster::block_on(read_tensor_f32(ctx, &out)).unwrap();
        for ((x, want), got) in table.into_iter().zip(gpu) {
            let cpu = gelu_tanh_ref(x);
            assert!(
                (cpu - want).abs() < 2e-6,
                "cpu gelu_tanh({x}) = {cpu}, want {want}"
            );
            assert!(
                (got - want).abs() < 2e-6,
                "gpu gelu_tanh({x}) = {got}, want {want}"
            );
        }
    }

    #[test]
    fn rejects_bad_inputs() {
        let ctx = test_context();
        let t = |s: &[usize], d| Tensor::zeros(ctx, "t", s, d).unwrap();
        let (g, u, o) = (
            t(&[2, 4], DType::F32),
            t(&[2, 4], DType::F32),
            t(&[2, 4], DType::F32),
        );
        let invalid = |r: Result<Kernel>, what: &str| match r {
            Err(Error::Invalid { what: w, .. }) => assert!(w.contains(what), "{w} !~ {what}"),
            other => panic!("expected Invalid({what}), got {other:?}"),
        };
        invalid(geglu(ctx, &g, &t(&[2, 3], DType::F32), &o), "up");
        invalid(geglu(ctx, &g, &u, &t(&[9], DType::F32)), "out");
        invalid(geglu(ctx, &t(&[8], DType::F16), &u, &o), "dtype of gate");
        invalid(geglu(ctx, &g, &u, &g), "buffer of out");
        invalid(
            geglu_fused(ctx, &t(&[2, 5], DType::F32), &o),
            "last dimension",
        );
        invalid(geglu_fused(ctx, &g, &t(&[2, 4], DType::F32)), "out");
    }

    #[test]
    fn folded_grid_covers_every_element() {
        let ctx = GpuContext::new_blocking(ContextOptions {
            max_workgroups_per_dimension: Some(4),
            ..Default::default()
        })
        .unwrap();
        for fused in [false, true] {
            let case = GegluCase::new(3, 800, fused); // 10 workgroups -> 4 x 3
            let report = pollster::block_on(check(&ctx, &case, 1)).unwrap();
            assert!(report.pass(), "{report}");
        }
    }
}
