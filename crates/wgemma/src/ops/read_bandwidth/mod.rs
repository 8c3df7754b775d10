//! Device read-bandwidth probe: `wgemma ops bench` runs it first so every kernel's GB/s can
//! be read against the bandwidth this device delivers to a plain streaming read, measured
//! in the same run.

use crate::error::{Error, Result};
use crate::gpu::{workgroups_for, DType, GpuContext, Kernel, KernelBuilder, Tensor};
use crate::harness::{Check, Expected, OpCase, Prepared, Rng, Values};
use rand::Rng as _;

const SHADER: &str = "read_bandwidth";
const WORKGROUP: u32 = 256;
const PER_THREAD: u32 = 8;

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    n_vec4: u32,
    _pad: [u32; 3],
}

/// Workgroups the probe launches for `words` u32 words (a multiple of 4).
fn groups_for(words: usize) -> u64 {
    workgroups_for((words / 4) as u64, WORKGROUP * PER_THREAD)
}

/// Builds the probe over `data` (u32 words, a multiple of 4), writing per-workgroup sums
/// into `partial` (at least `groups_for` elements).
pub fn read_bandwidth(ctx: &GpuContext, data: &Tensor, partial: &Tensor) -> Result<Kernel> {
    if data.numel() % 4 != 0 || data.dtype() != DType::U32 {
        return Err(Error::invalid(
            SHADER,
            "data",
            "u32 words, a multiple of 4",
            format!("{:?} x {}", data.dtype(), data.numel()),
        ));
    }
    let groups = groups_for(data.numel());
    if (partial.numel() as u64) < groups {
        return Err(Error::invalid(
            SHADER,
            "partial length",
            groups,
            partial.numel(),
        ));
    }
    KernelBuilder::new(ctx, SHADER)
        .uniform(&Params {
            n_vec4: (data.numel() / 4) as u32,
            _pad: [0; 3],
        })
        .tensor(data)
        .tensor(partial)
        .build_1d(groups)
}

/// CPU reference: per-workgroup wrapping sums of the words each workgroup reads.
pub fn read_bandwidth_ref(words: &[u32]) -> Vec<u32> {
    let per_group = (WORKGROUP * PER_THREAD * 4) as usize;
    words
        .chunks(per_group)
        .map(|c| c.iter().fold(0u32, |a, &w| a.wrapping_add(w)))
        .collect()
}

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
