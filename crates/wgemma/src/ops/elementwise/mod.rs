//! Elementwise f32 add, mul and scale.

mod reference;

pub use reference::{add_ref, mul_ref, scale_ref};

use crate::error::{Error, Result};
use crate::gpu::{workgroups_for, DType, GpuContext, Kernel, KernelBuilder, Tensor};
use crate::harness::{Check, Expected, OpCase, Prepared, Rng, Values};
use rand::Rng as _;

const SHADER: &str = "elementwise";
const WORKGROUP: u32 = 256;

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    n: u32,
    op: u32,
    scale: f32,
    _pad: u32,
}

/// Which elementwise operation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Elementwise {
    Add,
    Mul,
    Scale(f32),
}

impl Elementwise {
    fn code(self) -> (u32, f32) {
        match self {
            Elementwise::Add => (0, 0.0),
            Elementwise::Mul => (1, 0.0),
            Elementwise::Scale(s) => (2, s),
        }
    }
}

fn check_f32(t: &Tensor, what: &str) -> Result<()> {
    if t.dtype() != DType::F32 {
        return Err(Error::invalid(
            SHADER,
            what.to_string(),
            "f32",
            format!("{:?}", t.dtype()),
        ));
    }
    Ok(())
}

/// `out = a op b` (or `a * s` for [`Elementwise::Scale`], where `b` is ignored and may be `a`).
pub fn elementwise(
    ctx: &GpuContext,
    op: Elementwise,
    a: &Tensor,
    b: &Tensor,
    out: &Tensor,
) -> Result<Kernel> {
    check_f32(a, "dtype of a")?;
    check_f32(b, "dtype of b")?;
    check_f32(out, "dtype of out")?;
    let n = a.numel();
    for (t, what) in [(b, "element count of b"), (out, "element count of out")] {
        if t.numel() != n && !(matches!(op, Elementwise::Scale(_)) && what.ends_with(" b")) {
            return Err(Error::invalid(SHADER, what, n, t.numel()));
        }
    }
    let n32 = u32::try_from(n).map_err(|_| Error::invalid(SHADER, "element count", "< 2^32", n))?;
    let (code, scale) = op.code();
    KernelBuilder::new(ctx, SHADER)
        .uniform(&Params {
            n: n32,
            op: code,
            scale,
            _pad: 0,
        })
        .tensor(a)
        .tensor(b)
        .tensor(out)
        .build_1d(workgroups_for(n as u64, WORKGROUP))
}

/// Harness case: `n` random elements.
pub struct ElementwiseCase {
    pub op: Elementwise,
    pub n: usize,
}

impl OpCase for ElementwiseCase {
    fn name(&self) -> String {
        format!("elementwise {:?} n={}", self.op, self.n)
    }

    fn prepare(&self, ctx: &GpuContext, rng: &mut Rng) -> Result<Prepared> {
        let a: Vec<f32> = (0..self.n).map(|_| rng.random_range(-4.0..4.0)).collect();
        let b: Vec<f32> = (0..self.n).map(|_| rng.random_range(-4.0..4.0)).collect();
        let ta = Tensor::from_f32(ctx, "a", &[self.n], &a)?;
        let tb = Tensor::from_f32(ctx, "b", &[self.n], &b)?;
        let out = Tensor::zeros(ctx, "out", &[self.n], DType::F32)?;
        let reference = match self.op {
            Elementwise::Add => add_ref(&a, &b),
            Elementwise::Mul => mul_ref(&a, &b),
            Elementwise::Scale(s) => scale_ref(&a, s),
        };
        let kernel = elementwise(ctx, self.op, &ta, &tb, &out)?;
        Ok(Prepared {
            kernels: vec![kernel],
            outputs: vec![Expected {
                name: "out",
                tensor: out,
                reference: Values::F32(reference),
                check: Check::Exact,
            }],
            bytes_moved: 3 * 4 * self.n as u64,
        })
    }
}

/// Cases over random sizes (including ones not a multiple of the workgroup).
pub fn random_cases(rng: &mut Rng) -> Vec<Box<dyn OpCase>> {
    [Elementwise::Add, Elementwise::Mul, Elementwise::Scale(0.37)]
        .into_iter()
        .map(|op| {
            Box::new(ElementwiseCase {
                op,
                n: rng.random_range(1..5000),
            }) as Box<dyn OpCase>
        })
        .collect()
}

/// E2B-shaped cases: the hidden state (1536) and the MLP intermediate (6144 x 2).
pub fn bench_cases() -> Vec<Box<dyn OpCase>> {
    [1536, 12288, 1 << 20]
        .into_iter()
        .map(|n| {
            Box::new(ElementwiseCase {
                op: Elementwise::Add,
                n,
            }) as Box<dyn OpCase>
        })
        .collect()
}
