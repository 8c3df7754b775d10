//! Harness cases of RoPE: every entry (in place, out of place, q and k together) vs
//! [`rope_ref`].

use super::{rope_ref, Rope, RopeConfig, RopeType, MAX_POSITION};
use crate::error::Result;
use crate::gpu::{DType, GpuContext, Tensor};
use crate::harness::{Check, Expected, OpCase, Prepared, Rng, Values};
use rand::Rng as _;

/// Which RoPE entry a case exercises.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RopeMode {
    InPlace,
    OutOfPlace,
    QkInPlace,
}

/// Harness case: rotate random q (and k) at random positions below `max_position`.
pub struct RopeCase {
    pub config: RopeConfig,
    pub mode: RopeMode,
    pub rows: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub max_position: u32,
}

impl OpCase for RopeCase {
    fn name(&self) -> String {
        format!(
            "rope {} {:?} theta={} d={} rows={} heads={} kv_heads={} pos<{}",
            self.config.rope_type.name(),
            self.mode,
            self.config.theta,
            self.config.head_dim,
            self.rows,
            self.heads,
            self.kv_heads,
            self.max_position
        )
    }

    fn prepare(&self, ctx: &GpuContext, rng: &mut Rng) -> Result<Prepared> {
        let d = self.config.head_dim;
        let rope = Rope::new(ctx, self.config)?;
        let mut rand_vec =
            |n: usize| -> Vec<f32> { (0..n).map(|_| rng.random_range(-1.0..1.0)).collect() };
        let q = rand_vec(self.rows * self.heads * d);
        let k = rand_vec(self.rows * self.kv_heads * d);
        let positions: Vec<u32> = (0..self.rows)
            .map(|_| rng.random_range(0..self.max_position))
            .collect();
        let tq = Tensor::from_f32(ctx, "q", &[self.rows, self.heads, d], &q)?;
        let tp = Tensor::from_u32(ctx, "positions", &[self.rows], &positions)?;
        let q_ref = rope_ref(&q, self.rows, self.heads, &self.config, &positions);
        let check = Check::Close {
            max_abs: 1e-6,
            nmse: 1e-12,
        };
        let act_bytes = (self.rows * self.heads * d * 4) as u64;
        let (kernel, outputs, bytes_moved) = match self.mode {
            RopeMode::InPlace => (
                rope.in_place(ctx, &tq, &tp)?,
                vec![(tq, q_ref)],
                2 * act_bytes,
            ),
            RopeMode::OutOfPlace => {
                let out = Tensor::zeros(ctx, "out", &[self.rows, self.heads, d], DType::F32)?;
                (
                    rope.out_of_place(ctx, &tq, &tp, &out)?,
                    vec![(out, q_ref)],
                    2 * act_bytes,
                )
            }
            RopeMode::QkInPlace => {
                let tk = Tensor::from_f32(ctx, "k", &[self.rows, self.kv_heads, d], &k)?;
                let k_ref = rope_ref(&k, self.rows, self.kv_heads, &self.config, &positions);
                let k_bytes = (self.rows * self.kv_heads * d * 4) as u64;
                (
                    rope.qk_in_place(ctx, &tq, &tk, &tp)?,
                    vec![(tq, q_ref), (tk, k_ref)],
                    2 * (act_bytes + k_bytes),
                )
            }
        };
        Ok(Prepared {
            kernels: vec![kernel.kernel_for_rows(self.rows)?],
            outputs: outputs
                .into_iter()
                .zip(["q", "k"])
                .map(|((tensor, reference), name)| Expected {
                    name,
                    tensor,
                    reference: Values::F32(reference),
                    check,
                })
                .collect(),
            bytes_moved,
        })
    }
}

/// Random shapes over both Gemma 4 configurations and small head dims, positions up to the
/// 2^18 limit (large angles exercise the range reduction).
pub fn random_cases(rng: &mut Rng) -> Vec<Box<dyn OpCase>> {
    let mut cases: Vec<Box<dyn OpCase>> = Vec::new();
    for mode in [RopeMode::InPlace, RopeMode::OutOfPlace, RopeMode::QkInPlace] {
        let d = [64, 256, 512][rng.random_range(0..3)];
        let config = if rng.random_bool(0.5) {
            RopeConfig::gemma4_sliding(d)
        } else {
            RopeConfig::gemma4_full(d)
        };
        cases.push(Box::new(RopeCase {
            config,
            mode,
            rows: rng.random_range(1..20),
            heads: rng.random_range(1..9),
            kv_heads: rng.random_range(1..3),
            max_position: [64, 8192, MAX_POSITION][rng.random_range(0..3)],
        }));
    }
    cases
}

/// E2B shapes: q (8 heads) and k (1 kv head) of one decode row and of a 512-row prefill
/// chunk, for the sliding (256) and full (512) configurations.
pub fn bench_cases() -> Vec<Box<dyn OpCase>> {
    let mut cases: Vec<Box<dyn OpCase>> = Vec::new();
    for rows in [1, 512] {
        for config in [
            RopeConfig::gemma4_sliding(256),
            RopeConfig::gemma4_full(512),
        ] {
            cases.push(Box::new(RopeCase {
                config,
                mode: RopeMode::QkInPlace,
                rows,
                heads: 8,
                kv_heads: 1,
                max_position: 32_768,
            }));
        }
    }
    cases
}

/// The name a case prints for its RoPE type.
impl RopeType {
    fn name(self) -> &'static str {
        match self {
            RopeType::Default => "default",
            RopeType::Proportional => "proportional",
        }
    }
}
