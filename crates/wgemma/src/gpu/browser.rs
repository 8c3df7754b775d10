//! What desktop Chrome grants a page, for measuring the browser's figure on a native GPU
//! ([`super::ContextOptions::webgpu_limits`]): the WebGPU features Chrome exposes and the
//! limits after its tiering. Chrome (Dawn) does not pass an adapter's limits through: it
//! rounds each down to the best of a few tiers, so that a page cannot fingerprint the GPU,
//! and it exposes no cooperative matrices (no tensor-core routes).

/// The optional features wgemma uses that Chrome grants a page (`shader-f16`, `subgroups`,
/// `timestamp-query`); timestamps inside passes or encoders and cooperative matrices are
/// native only.
pub const BROWSER_FEATURES: wgpu::Features = wgpu::Features::SHADER_F16
    .union(wgpu::Features::SUBGROUP)
    .union(wgpu::Features::TIMESTAMP_QUERY);

/// Whether a browser's device was created with `subgroups`: the web front end asks for it
/// where the adapter offers it, since wgpu 30's browser backend maps no subgroup feature.
#[cfg(target_arch = "wasm32")]
pub(super) fn browser_device_has_subgroups(device: &wgpu::Device) -> bool {
    use wasm_bindgen::{JsCast, JsValue};
    let Some(device) = device.as_webgpu() else {
        return false;
    };
    let device: &JsValue = device.as_ref();
    let get = |o: &JsValue, k: &str| js_sys::Reflect::get(o, &JsValue::from_str(k)).ok();
    let Some(features) = get(device, "features").filter(|f| f.is_object()) else {
        return false;
    };
    get(&features, "has")
        .and_then(|h| h.dyn_into::<js_sys::Function>().ok())
        .and_then(|has| has.call1(&features, &JsValue::from_str("subgroups")).ok())
        .is_some_and(|v| v.is_truthy())
}

/// Natively wgpu reports `SUBGROUP` itself.
#[cfg(not(target_arch = "wasm32"))]
pub(super) fn browser_device_has_subgroups(_device: &wgpu::Device) -> bool {
    false
}

/// The WGSL a device compiles: in a browser, a shader that calls subgroup builtins starts
/// with `enable subgroups;` (WGSL requires the directive; naga, natively, refuses it).
pub(super) fn wgsl_with_enables(
    source: &'static str,
    browser: bool,
    subgroups: bool,
) -> std::borrow::Cow<'static, str> {
    if browser && subgroups && source.contains("subgroup") {
        format!("enable subgroups;\n{source}").into()
    } else {
        source.into()
    }
}

/// Dawn's tiers (src/dawn/native/Limits.cpp) of the limits wgemma's kernels and buffers
/// depend on, lowest first; the first tier is the WebGPU default.
const STORAGE_BINDING_TIERS: [u64; 6] = [
    128 << 20,
    256 << 20,
    512 << 20,
    1 << 30,
    (2 << 30) - 4,
    (4 << 30) - 4,
];
const BUFFER_SIZE_TIERS: [u64; 4] = [256 << 20, 1 << 30, 2 << 30, (4 << 30) - 4];
const WORKGROUP_STORAGE_TIERS: [u32; 4] = [16384, 32768, 49152, 65536];
const INVOCATIONS_TIERS: [u32; 2] = [256, 1024];
const STORAGE_BUFFERS_PER_STAGE_TIERS: [u32; 3] = [8, 10, 16];
const DYNAMIC_STORAGE_TIERS: [u32; 2] = [4, 8];
const DYNAMIC_UNIFORM_TIERS: [u32; 2] = [8, 10];
const STORAGE_TEXTURES_TIERS: [u32; 2] = [4, 8];

/// The best tier at or below `adapter` (the lowest tier when the adapter is below it: a
/// device request then fails, as Chrome would refuse the adapter).
fn tier<T: Copy + PartialOrd>(tiers: &[T], adapter: T) -> T {
    tiers
        .iter()
        .copied()
        .filter(|&t| t <= adapter)
        .last()
        .unwrap_or(tiers[0])
}

/// The limits a page gets on this adapter in desktop Chrome when it asks for everything
/// the adapter offers: WebGPU's defaults, each tiered limit raised to the tier the adapter
/// reaches, never above the adapter's own.
pub fn browser_limits(adapter: &wgpu::Limits) -> wgpu::Limits {
    let mut l = wgpu::Limits::defaults();
    l.max_storage_buffer_binding_size = tier(
        &STORAGE_BINDING_TIERS,
        adapter.max_storage_buffer_binding_size,
    );
    l.max_buffer_size = tier(&BUFFER_SIZE_TIERS, adapter.max_buffer_size);
    l.max_compute_workgroup_storage_size = tier(
        &WORKGROUP_STORAGE_TIERS,
        adapter.max_compute_workgroup_storage_size,
    );
    l.max_compute_invocations_per_workgroup = tier(
        &INVOCATIONS_TIERS,
        adapter.max_compute_invocations_per_workgroup,
    );
    l.max_compute_workgroup_size_x = tier(&INVOCATIONS_TIERS, adapter.max_compute_workgroup_size_x);
    l.max_compute_workgroup_size_y = tier(&INVOCATIONS_TIERS, adapter.max_compute_workgroup_size_y);
    l.max_storage_buffers_per_shader_stage = tier(
        &STORAGE_BUFFERS_PER_STAGE_TIERS,
        adapter.max_storage_buffers_per_shader_stage,
    );
    l.max_dynamic_storage_buffers_per_pipeline_layout = tier(
        &DYNAMIC_STORAGE_TIERS,
        adapter.max_dynamic_storage_buffers_per_pipeline_layout,
    );
    l.max_dynamic_uniform_buffers_per_pipeline_layout = tier(
        &DYNAMIC_UNIFORM_TIERS,
        adapter.max_dynamic_uniform_buffers_per_pipeline_layout,
    );
    l.max_storage_textures_per_shader_stage = tier(
        &STORAGE_TEXTURES_TIERS,
        adapter.max_storage_textures_per_shader_stage,
    );
    // A binding never exceeds its buffer (Chrome clamps it the same way).
    l.max_storage_buffer_binding_size = l.max_storage_buffer_binding_size.min(l.max_buffer_size);
    l.or_worse_values_from(adapter)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_round_down_to_chromes_tiers() {
        // An H200 on Vulkan reports far more than any tier.
        let big = wgpu::Limits {
            max_storage_buffer_binding_size: 1 << 40,
            max_buffer_size: 1 << 40,
            max_compute_workgroup_storage_size: 49152,
            max_compute_invocations_per_workgroup: 1024,
            max_compute_workgroup_size_x: 1024,
            max_compute_workgroup_size_y: 1024,
            max_storage_buffers_per_shader_stage: 1 << 20,
            max_bind_groups: 8,
            min_storage_buffer_offset_alignment: 16,
            ..wgpu::Limits::defaults()
        };
        let l = browser_limits(&big);
        assert_eq!(l.max_buffer_size, (4 << 30) - 4);
        assert_eq!(l.max_storage_buffer_binding_size, (4 << 30) - 4);
        assert_eq!(l.max_compute_workgroup_storage_size, 49152);
        assert_eq!(l.max_compute_invocations_per_workgroup, 1024);
        assert_eq!(l.max_storage_buffers_per_shader_stage, 16);
        // Untiered limits stay at WebGPU's: 4 bind groups, 256-byte offsets.
        assert_eq!(l.max_bind_groups, 4);
        assert_eq!(l.min_storage_buffer_offset_alignment, 256);
        assert!(l.check_limits(&big));

        // Between tiers: the lower one.
        let mid = wgpu::Limits {
            max_storage_buffer_binding_size: 3 << 30,
            max_buffer_size: 3 << 30,
            max_compute_workgroup_storage_size: 40000,
            ..big
        };
        let l = browser_limits(&mid);
        assert_eq!(l.max_storage_buffer_binding_size, (2 << 30) - 4);
        assert_eq!(l.max_buffer_size, 2 << 30);
        assert_eq!(l.max_compute_workgroup_storage_size, 32768);
    }

    #[test]
    fn never_above_the_adapter() {
        // A small adapter below WebGPU's defaults keeps its own values (the device request
        // then states what it lacks, as Chrome would refuse it).
        let small = wgpu::Limits::downlevel_defaults();
        let l = browser_limits(&small);
        assert!(l.check_limits(&small));
        assert!(!BROWSER_FEATURES.contains(wgpu::Features::MEMORY_DECORATION_COHERENT));
        assert!(!BROWSER_FEATURES.contains(wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX));
    }

    #[test]
    fn browser_subgroup_shaders_enable_the_extension() {
        let sg = "fn f() { let s = subgroupAdd(1.0); }";
        assert_eq!(
            wgsl_with_enables(sg, true, true),
            format!("enable subgroups;\n{sg}")
        );
        // Natively (naga refuses the directive), without the feature, or without a call.
        assert_eq!(wgsl_with_enables(sg, false, true), sg);
        assert_eq!(wgsl_with_enables(sg, true, false), sg);
        assert_eq!(wgsl_with_enables("fn f() {}", true, true), "fn f() {}");
    }
}
