//! Harness case of the read-bandwidth probe: the roofline `wgemma ops bench` reads the other
//! cases against, checked against [`read_bandwidth_ref`].

use super::{groups_for, read_bandwidth, read_bandwidth_ref};
use crate::error::Result;
use crate::gpu::{DType, GpuContext, Tensor};
use crate::harness::{Check, Expected, OpCase, Prepared, Rng, Values};
use rand::Rng as _;

/// Harness case over `words` u32 words.
pub struct ReadBandwidthCase {
    pub words: usize,
}

impl OpCase for ReadBandwidthCase {
    fn name(&self) -> String {
        format!(
            "read_bandwidth {} MiB (capped at one binding)",
            (self.words * 4) >> 20
        )
    }

    fn prepare(&self, ctx: &GpuContext, rng: &mut Rng) -> Result<Prepared> {
        let max_words = (ctx.limits.max_storage_buffer_binding_size / 16 * 4) as usize;
        let n = self.words.min(max_words);
        let words: Vec<u32> = (0..n).map(|_| rng.random()).collect();
        let data = Tensor::from_u32(ctx, "data", &[n], &words)?;
        let groups = groups_for(n) as usize;
        let partial = Tensor::zeros(ctx, "partial", &[groups], DType::U32)?;
        let kernel = read_bandwidth(ctx, &data, &partial)?;
        Ok(Prepared {
            kernels: vec![kernel],
            outputs: vec![Expected {
                name: "partial",
                tensor: partial,
                reference: Values::U32(read_bandwidth_ref(&words)),
                check: Check::Exact,
            }],
            bytes_moved: n as u64 * 4,
        })
    }
}

pub fn random_cases(rng: &mut Rng) -> Vec<Box<dyn OpCase>> {
    vec![Box::new(ReadBandwidthCase {
        words: rng.random_range(1..20_000usize) * 4,
    })]
}

/// 256 MiB, four times the H200's L2 (capped at the device's max storage binding).
pub fn bench_cases() -> Vec<Box<dyn OpCase>> {
    vec![Box::new(ReadBandwidthCase { words: 64 << 20 })]
}
