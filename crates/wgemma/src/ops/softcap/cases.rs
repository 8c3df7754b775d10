//! Harness cases of softcap: both routes vs [`softcap_ref`].

use super::{softcap, softcap_ref, FINAL_LOGIT_SOFTCAP};
use crate::error::Result;
use crate::gpu::{DType, GpuContext, Tensor};
use crate::harness::{Check, Expected, OpCase, Prepared, Rng, Values};
use rand::Rng as _;

/// Harness case: `m` rows of `vocab` logits, uniform in `[-range, range]`.
pub struct SoftcapCase {
    pub m: usize,
    pub vocab: usize,
    pub cap: f32,
    pub in_place: bool,
    pub range: f32,
}

impl SoftcapCase {
    pub fn new(m: usize, vocab: usize, in_place: bool) -> Self {
        SoftcapCase {
            m,
            vocab,
            cap: FINAL_LOGIT_SOFTCAP,
            in_place,
            range: 100.0,
        }
    }
}

impl OpCase for SoftcapCase {
    fn name(&self) -> String {
        format!(
            "softcap {} m={} vocab={} cap={} range={}",
            if self.in_place { "inplace" } else { "copy" },
            self.m,
            self.vocab,
            self.cap,
            self.range
        )
    }

    fn prepare(&self, ctx: &GpuContext, rng: &mut Rng) -> Result<Prepared> {
        let n = self.m * self.vocab;
        let r = self.range;
        let x: Vec<f32> = (0..n).map(|_| rng.random_range(-r..r)).collect();
        let tx = Tensor::from_f32(ctx, "logits", &[self.m, self.vocab], &x)?;
        let out = if self.in_place {
            tx.clone()
        } else {
            Tensor::zeros(ctx, "out", &[self.m, self.vocab], DType::F32)?
        };
        let kernel = softcap(ctx, &tx, &out, self.cap)?;
        Ok(Prepared {
            kernels: vec![kernel],
            outputs: vec![Expected {
                name: "out",
                tensor: out,
                reference: Values::F32(softcap_ref(&x, self.cap)),
                // About one f32 ulp of the cap (lavapipe: ~1.7e-7 * cap).
                check: Check::Close {
                    max_abs: 2e-6 * self.cap,
                    nmse: 1e-12,
                },
            }],
            bytes_moved: 2 * 4 * n as u64,
        })
    }
}

/// Both routes over random sizes.
pub fn random_cases(rng: &mut Rng) -> Vec<Box<dyn OpCase>> {
    [false, true]
        .into_iter()
        .map(|in_place| {
            let mut case =
                SoftcapCase::new(rng.random_range(1..4), rng.random_range(1..3000), in_place);
            case.cap = rng.random_range(1.0..50.0);
            Box::new(case) as Box<dyn OpCase>
        })
        .collect()
}

/// E2B logits: vocab 262144 for decode (M = 1) and a 3-row verify (MTP k = 2).
pub fn bench_cases() -> Vec<Box<dyn OpCase>> {
    vec![
        Box::new(SoftcapCase::new(1, 262_144, true)),
        Box::new(SoftcapCase::new(3, 262_144, true)),
    ]
}
