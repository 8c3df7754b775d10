//! Harness cases of RMSNorm: every buffer sharing (in place, residual add) vs the CPU
//! references.

use super::{rmsnorm_add_ref, rmsnorm_ref, rmsnorm_with, RmsNormOptions, EPS};
use crate::error::Result;
use crate::gpu::{DType, GpuContext, Tensor};
use crate::harness::{Check, Expected, OpCase, Prepared, Rng, Values};
use rand::Rng as _;

/// Which buffers a harness case shares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CaseMode {
    Norm,
    NormInPlace,
    /// Residual updated in place.
    Add,
    /// x overwritten with residual + N(x).
    AddInPlace,
    AddTo,
}

/// Harness case: `rows` rows of `d`.
pub struct RmsNormCase {
    pub rows: usize,
    pub d: usize,
    pub weight: bool,
    pub mode: CaseMode,
    pub input_scale: f32,
    pub output_scale: f32,
}

impl RmsNormCase {
    pub fn new(rows: usize, d: usize, weight: bool, mode: CaseMode) -> Self {
        RmsNormCase {
            rows,
            d,
            weight,
            mode,
            input_scale: 1.0,
            output_scale: 1.0,
        }
    }
}

impl OpCase for RmsNormCase {
    fn name(&self) -> String {
        format!(
            "rmsnorm {:?} rows={} d={} weight={} in_scale={} out_scale={}",
            self.mode, self.rows, self.d, self.weight, self.input_scale, self.output_scale
        )
    }

    fn prepare(&self, ctx: &GpuContext, rng: &mut Rng) -> Result<Prepared> {
        let (rows, d) = (self.rows, self.d);
        let n = rows * d;
        // Rows of different magnitudes, so a wrong per-row scale shows.
        let mut x = Vec::with_capacity(n);
        for _ in 0..rows {
            let mag: f32 = rng.random_range(0.05..8.0);
            x.extend((0..d).map(|_| rng.random_range(-mag..mag)));
        }
        let w: Vec<f32> = (0..d).map(|_| rng.random_range(-2.0..2.0)).collect();
        let res: Vec<f32> = (0..n).map(|_| rng.random_range(-4.0..4.0)).collect();
        let opts = RmsNormOptions {
            eps: EPS,
            input_scale: self.input_scale,
            output_scale: self.output_scale,
        };
        let wref = self.weight.then_some(&w[..]);
        let (inp, outs) = (self.input_scale, self.output_scale);
        let tx = Tensor::from_f32(ctx, "x", &[rows, d], &x)?;
        let tw = Tensor::from_f32(ctx, "weight", &[d], &w)?;
        let tw = self.weight.then_some(&tw);
        let (kernel, out, reference) = match self.mode {
            CaseMode::Norm | CaseMode::NormInPlace => {
                let out = if self.mode == CaseMode::Norm {
                    Tensor::zeros(ctx, "out", &[rows, d], DType::F32)?
                } else {
                    tx.clone()
                };
                let k = rmsnorm_with(ctx, &tx, tw, None, &out, opts)?;
                (k, out, rmsnorm_ref(&x, d, wref, EPS, inp, outs))
            }
            mode => {
                let tr = Tensor::from_f32(ctx, "residual", &[rows, d], &res)?;
                let out = match mode {
                    CaseMode::Add => tr.clone(),
                    CaseMode::AddInPlace => tx.clone(),
                    _ => Tensor::zeros(ctx, "out", &[rows, d], DType::F32)?,
                };
                let k = rmsnorm_with(ctx, &tx, tw, Some(&tr), &out, opts)?;
                (k, out, rmsnorm_add_ref(&x, d, wref, &res, EPS, inp, outs))
            }
        };
        // x and out, plus the residual when fused (in-place outputs still read + write).
        let tensors =
            2 + (self.mode != CaseMode::Norm && self.mode != CaseMode::NormInPlace) as u64;
        Ok(Prepared {
            kernels: vec![kernel],
            outputs: vec![Expected {
                name: "out",
                tensor: out,
                reference: Values::F32(reference),
                // lavapipe: <= 2e-6 (f32 vs f64 sums) on outputs up to ~15.
                check: Check::Close {
                    max_abs: 2e-5,
                    nmse: 1e-12,
                },
            }],
            bytes_moved: 4 * (tensors * n as u64 + self.weight as u64 * d as u64),
        })
    }
}

/// Every route, with and without weight, over random shapes (d not a multiple of the
/// workgroup, single rows, per-head sizes).
pub fn random_cases(rng: &mut Rng) -> Vec<Box<dyn OpCase>> {
    use CaseMode::*;
    let mut cases: Vec<Box<dyn OpCase>> = Vec::new();
    for (mode, weight) in [
        (Norm, true),
        (Norm, false),
        (NormInPlace, true),
        (Add, true),
        (AddInPlace, false),
        (AddTo, true),
        (AddTo, false),
    ] {
        let mut case = RmsNormCase::new(
            rng.random_range(1..6),
            rng.random_range(1..700),
            weight,
            mode,
        );
        if mode != Norm || rng.random_bool(0.5) {
            case.input_scale = rng.random_range(0.01..3.0);
            case.output_scale = rng.random_range(0.1..2.0);
        }
        cases.push(Box::new(case));
    }
    // Per-head: q_norm/k_norm over head_dim.
    let heads = rng.random_range(1..9);
    let head_dim = [64, 128, 256, 512][rng.random_range(0..4)];
    cases.push(Box::new(RmsNormCase::new(
        rng.random_range(1..4) * heads,
        head_dim,
        true,
        NormInPlace,
    )));
    cases
}

/// E2B shapes: hidden 1536 (decode and a 512-row prefill), the fused post-norm + residual,
/// per-head 8 x 256, and the 31B hidden 5376.
pub fn bench_cases() -> Vec<Box<dyn OpCase>> {
    use CaseMode::*;
    vec![
        Box::new(RmsNormCase::new(1, 1536, true, Norm)),
        Box::new(RmsNormCase::new(1, 1536, true, Add)),
        Box::new(RmsNormCase::new(8, 256, true, NormInPlace)),
        Box::new(RmsNormCase::new(1, 256, false, NormInPlace)),
        Box::new(RmsNormCase::new(512, 1536, true, Norm)),
        Box::new(RmsNormCase::new(512, 1536, true, Add)),
        Box::new(RmsNormCase::new(512 * 8, 256, true, NormInPlace)),
        Box::new(RmsNormCase::new(1, 5376, true, Add)),
    ]
}
