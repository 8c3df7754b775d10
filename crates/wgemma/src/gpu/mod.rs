//! The wgpu runtime: context, tensors, dispatch planning, kernels/steps and readback.

mod activations;
mod allocate;
mod browser;
mod context;
mod dispatch;
mod errors;
mod kernel;
mod profile;
mod readback;
pub mod registry;
pub(crate) mod shader_meta;
mod tensor;

pub use activations::{native_integer_dot, ActivationChoice, Activations};
pub use browser::{browser_limits, BROWSER_FEATURES};
#[cfg(not(target_arch = "wasm32"))]
pub use context::test_context;
pub use context::{
    offers_coop_16x16_f16, ContextOptions, Counters, GemmCeiling, GpuContext, ShaderChecks,
    OPTIONAL_FEATURES,
};
pub use dispatch::{workgroups_for, Grid};
pub use errors::GpuErrors;
pub use kernel::{
    read_tensor_bytes, read_tensor_f32, read_tensor_i32, read_tensor_u32, run_kernels, Kernel,
    KernelBuilder, Pass, Step,
};
pub use profile::{DispatchTime, MAX_PROFILE_MARKS};
pub use readback::Readback;
pub use tensor::{plan_row_chunks, DType, Tensor};
