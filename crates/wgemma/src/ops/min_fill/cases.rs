//! Harness cases of min_fill: GPU vs [`min_fill_ref`], with NaN and -inf in `src`.

use super::{min_fill, min_fill_ref};
use crate::error::Result;
use crate::gpu::{GpuContext, Tensor};
use crate::harness::{Check, Expected, OpCase, Prepared, Rng, Values};
use rand::Rng as _;

/// Harness case: `n_src` random values (optionally with a NaN or -inf) filling `n_dst`.
pub struct MinFillCase {
    pub n_src: usize,
    pub n_dst: usize,
    pub special: Option<f32>,
}

impl OpCase for MinFillCase {
    fn name(&self) -> String {
        format!(
            "min_fill n_src={} n_dst={}{}",
            self.n_src,
            self.n_dst,
            self.special.map_or(String::new(), |v| format!(" with {v}"))
        )
    }

    fn prepare(&self, ctx: &GpuContext, rng: &mut Rng) -> Result<Prepared> {
        let mut x: Vec<f32> = (0..self.n_src)
            .map(|_| rng.random_range(-50.0..50.0))
            .collect();
        if let Some(v) = self.special {
            let i = rng.random_range(0..self.n_src);
            x[i] = v;
        }
        let src = Tensor::from_f32(ctx, "selected", &[1, self.n_src], &x)?;
        // Garbage in dst: every element must be overwritten.
        let garbage: Vec<f32> = (0..self.n_dst).map(|i| i as f32).collect();
        let dst = Tensor::from_f32(ctx, "logits", &[1, self.n_dst], &garbage)?;
        Ok(Prepared {
            kernels: vec![min_fill(ctx, &src, &dst)?],
            outputs: vec![Expected {
                name: "dst",
                tensor: dst,
                reference: Values::F32(min_fill_ref(&x, self.n_dst)),
                check: Check::Exact,
            }],
            bytes_moved: 4 * (self.n_dst + self.n_src) as u64,
        })
    }
}

/// Random sizes, with and without a NaN / -inf in `src`.
pub fn random_cases(rng: &mut Rng) -> Vec<Box<dyn OpCase>> {
    [None, Some(f32::NAN), Some(f32::NEG_INFINITY)]
        .into_iter()
        .map(|special| {
            Box::new(MinFillCase {
                n_src: rng.random_range(1..5000),
                n_dst: rng.random_range(1..70_000),
                special,
            }) as Box<dyn OpCase>
        })
        .collect()
}

/// E2B's centroid head: 4096 selected logits into a 262144 row.
pub fn bench_cases() -> Vec<Box<dyn OpCase>> {
    vec![Box::new(MinFillCase {
        n_src: 4096,
        n_dst: 262_144,
        special: None,
    })]
}
