//! Device read-bandwidth probe: `wgemma ops bench` runs it first so every kernel's GB/s can
//! be read against the bandwidth this device delivers to a plain streaming read, measured
//! in the same run.

mod reference;

pub use reference::read_bandwidth_ref;

#[cfg(any(test, feature = "harness"))]
mod cases;
#[cfg(any(test, feature = "harness"))]
pub use cases::{bench_cases, random_cases, ReadBandwidthCase};

use crate::error::{Error, Result};
use crate::gpu::{workgroups_for, DType, GpuContext, Kernel, KernelBuilder, Tensor};

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
