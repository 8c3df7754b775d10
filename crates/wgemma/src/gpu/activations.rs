//! The precision of the Q4 and Q8_0 matvecs' activations: f32, or int8 per block of 32
//! with integer dot products (`dot4I8Packed`), chosen once per context so that every matvec
//! of every forward (decode, verify, batched rows) computes a row the same way. Q4 prefill
//! below the tensor cores follows it (the int8 GEMM, `ops/linear/q4_gemm_int8.wgsl`): the
//! same quantiser and per-block terms, the blocks summed in another order.

use crate::error::{Error, Result};

/// What a caller asks for ([`super::ContextOptions::activations`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum ActivationChoice {
    /// int8 on a GPU that runs packed integer dot products natively; f32 elsewhere and on
    /// CPU adapters (lavapipe, SwiftShader), where the f32 kernels are as fast and the
    /// results stay the exact ones parity checks compare.
    #[default]
    Auto,
    /// f32 activations everywhere (the exact route: no activation rounding).
    F32,
    /// int8 activations; refused where the dot products are not native (a polyfill runs
    /// them 4-8x slower than the f32 kernels).
    Int8,
}

impl std::str::FromStr for ActivationChoice {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "auto" => Ok(ActivationChoice::Auto),
            "f32" => Ok(ActivationChoice::F32),
            "int8" => Ok(ActivationChoice::Int8),
            other => Err(format!("expected auto, f32 or int8, found `{other}`")),
        }
    }
}

/// What a context runs ([`super::GpuContext::activations`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Activations {
    F32,
    Int8,
}

impl Activations {
    pub fn name(self) -> &'static str {
        match self {
            Activations::F32 => "f32",
            Activations::Int8 => "int8",
        }
    }

    /// Resolves `choice` on a device whose packed integer dot products are `native` or not
    /// (`cpu`: a software adapter).
    pub fn resolve(
        choice: ActivationChoice,
        native: bool,
        cpu: bool,
        adapter: &str,
    ) -> Result<Self> {
        match (choice, native) {
            (ActivationChoice::F32, _) | (ActivationChoice::Auto, false) => Ok(Activations::F32),
            (ActivationChoice::Auto, true) if cpu => Ok(Activations::F32),
            (ActivationChoice::Int8 | ActivationChoice::Auto, true) => Ok(Activations::Int8),
            (ActivationChoice::Int8, false) => Err(Error::DeviceRequest {
                adapter: adapter.to_string(),
                reason: "int8 activations need native packed integer dot products \
                         (Vulkan 1.3 or VK_KHR_shader_integer_dot_product, or the browser's \
                         packed_4x8_integer_dot_product); this adapter has none: use \
                         --activations f32 or auto"
                    .into(),
            }),
        }
    }
}

/// Whether `adapter` runs WGSL's `dot4I8Packed` as a native instruction: on Vulkan when the
/// device has `shaderIntegerDotProduct` (core in 1.3; wgpu then emits SPIR-V `OpSDot`), in
/// a browser when its WGSL has the `packed_4x8_integer_dot_product` language feature
/// (`browser`, read by the web front end). Elsewhere (Metal, DX12, GL) naga writes a
/// polyfill of shifts and multiplies.
pub fn native_integer_dot(adapter: &wgpu::Adapter, browser: bool) -> bool {
    match adapter.get_info().backend {
        wgpu::Backend::Vulkan => vulkan_integer_dot(adapter),
        wgpu::Backend::BrowserWebGpu => browser,
        _ => false,
    }
}

#[cfg(any(
    windows,
    target_os = "linux",
    target_os = "android",
    target_os = "freebsd"
))]
fn vulkan_integer_dot(adapter: &wgpu::Adapter) -> bool {
    const VULKAN_1_3: u32 = (1 << 22) | (3 << 12);
    // SAFETY: the hal adapter is only read (its properties), never used to create objects.
    let hal = unsafe { adapter.as_hal::<wgpu::hal::api::Vulkan>() };
    hal.is_some_and(|a| {
        let caps = a.physical_device_capabilities();
        caps.properties().api_version >= VULKAN_1_3
            || caps.supports_extension(c"VK_KHR_shader_integer_dot_product")
    })
}

#[cfg(not(any(
    windows,
    target_os = "linux",
    target_os = "android",
    target_os = "freebsd"
)))]
fn vulkan_integer_dot(_adapter: &wgpu::Adapter) -> bool {
    false
}
