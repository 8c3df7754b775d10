//! Harness cases of argmax: GPU vs [`argmax_ref`] over random and E2B shapes.

use super::{argmax_blocked, argmax_ref, ITEMS_PER_THREAD};
use crate::error::Result;
use crate::gpu::{DType, GpuContext, Tensor};
use crate::harness::{Check, Expected, OpCase, Prepared, Rng, Values};
use rand::Rng as _;

/// Harness case: `rows` rows of `n` values drawn from a small integer range (so ties are
/// common and the lowest-index rule is exercised), optionally with NaN, +-inf and +-0
/// sprinkled in.
pub struct ArgmaxCase {
    pub rows: usize,
    pub n: usize,
    pub specials: bool,
    /// Stage-1 elements per thread (the default is 8; smaller blocks test stage 2's loop
    /// over more than 256 partials with small rows).
    pub items_per_thread: u32,
}

impl ArgmaxCase {
    pub fn new(rows: usize, n: usize, specials: bool) -> Self {
        ArgmaxCase {
            rows,
            n,
            specials,
            items_per_thread: ITEMS_PER_THREAD,
        }
    }
}

impl OpCase for ArgmaxCase {
    fn name(&self) -> String {
        format!(
            "argmax rows={} n={}{}{}",
            self.rows,
            self.n,
            if self.specials { " nan/inf/zeros" } else { "" },
            if self.items_per_thread != ITEMS_PER_THREAD {
                format!(" items={}", self.items_per_thread)
            } else {
                String::new()
            }
        )
    }

    fn prepare(&self, ctx: &GpuContext, rng: &mut Rng) -> Result<Prepared> {
        let total = self.rows * self.n;
        let mut x: Vec<f32> = (0..total)
            .map(|_| rng.random_range(-64i32..64) as f32 * 0.5)
            .collect();
        if self.specials {
            let specials = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 0.0, -0.0];
            for _ in 0..(total / 64).max(1) {
                let i = rng.random_range(0..total);
                x[i] = specials[rng.random_range(0..specials.len())];
            }
        }
        let input = Tensor::from_f32(ctx, "logits", &[self.rows, self.n], &x)?;
        let out = Tensor::zeros(ctx, "argmax", &[self.rows], DType::U32)?;
        let kernels = argmax_blocked(ctx, &input, &out, self.items_per_thread)?;
        Ok(Prepared {
            kernels,
            outputs: vec![Expected {
                name: "index",
                tensor: out,
                reference: Values::U32(argmax_ref(&x, self.n)),
                check: Check::Exact,
            }],
            bytes_moved: total as u64 * 4 + self.rows as u64 * 4,
        })
    }
}

/// Random shapes: one to three rows (decode and the M = 3 verify batch), lengths across
/// one to several stage-1 blocks, with and without NaN/inf/zeros.
pub fn random_cases(rng: &mut Rng) -> Vec<Box<dyn OpCase>> {
    vec![
        Box::new(ArgmaxCase::new(
            rng.random_range(1..=3),
            rng.random_range(1..3000),
            false,
        )),
        Box::new(ArgmaxCase::new(
            rng.random_range(1..=3),
            rng.random_range(2000..20_000),
            true,
        )),
    ]
}

/// E2B: the full-vocab logits row for decode (M = 1) and the verify batch (M = 3). The
/// logits were just written by the lm_head, so reading them from L2 is the real case too.
pub fn bench_cases() -> Vec<Box<dyn OpCase>> {
    vec![
        Box::new(ArgmaxCase::new(1, 262_144, false)),
        Box::new(ArgmaxCase::new(3, 262_144, false)),
    ]
}
