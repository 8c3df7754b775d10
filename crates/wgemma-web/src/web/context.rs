//! Opening WebGPU in the host: `navigator.gpu`, its adapter and its WGSL language features.

use super::errors::{js_error, wgemma_error};
use js_sys::Reflect;
use wasm_bindgen::prelude::*;
use wgemma::gpu::{ContextOptions, GpuContext};

/// Whether `navigator.gpu.wgslLanguageFeatures` has `feature` (false where it or its `has`
/// is missing).
fn wgsl_has(feature: &str) -> bool {
    let get = |o: &JsValue, k: &str| js_sys::Reflect::get(o, &JsValue::from_str(k)).ok();
    let features = get(&js_sys::global(), "navigator")
        .and_then(|n| get(&n, "gpu"))
        .and_then(|g| get(&g, "wgslLanguageFeatures"));
    let Some(features) = features.filter(|f| f.is_object()) else {
        return false;
    };
    get(&features, "has")
        .and_then(|h| h.dyn_into::<js_sys::Function>().ok())
        .and_then(|has| has.call1(&features, &JsValue::from_str(feature)).ok())
        .is_some_and(|v| v.is_truthy())
}

#[wasm_bindgen(inline_js = r#"
export function request_subgroups_where_offered(gpu) {
  if (!gpu || typeof gpu.requestAdapter !== 'function' || gpu.__wgemmaSubgroups) return;
  const requestAdapter = gpu.requestAdapter.bind(gpu);
  gpu.requestAdapter = async (options) => {
    const adapter = await requestAdapter(options);
    // Hardware adapters only: a software fallback (SwiftShader in headless Chromium) keeps
    // the workgroup-memory kernels it has always run.
    const fallback = adapter && (adapter.isFallbackAdapter || adapter.info?.isFallbackAdapter);
    if (adapter && !fallback && adapter.features && adapter.features.has('subgroups')) {
      const requestDevice = adapter.requestDevice.bind(adapter);
      adapter.requestDevice = (descriptor) => {
        const d = descriptor ?? {};
        const features = [...(d.requiredFeatures ?? [])];
        if (!features.includes('subgroups')) features.push('subgroups');
        return requestDevice({ ...d, requiredFeatures: features });
      };
    }
    return adapter;
  };
  gpu.__wgemmaSubgroups = true;
}
"#)]
extern "C" {
    /// Makes `gpu.requestAdapter()`'s hardware adapters ask for `subgroups` in every device
    /// request where they offer it: wgpu 30's browser backend maps no subgroup feature, so without
    /// this the subgroup kernels (matvec sums, int8 quantising, decode attention) are off in
    /// every browser.
    fn request_subgroups_where_offered(gpu: &JsValue);
}

/// `navigator.gpu` (undefined where the host has none).
fn navigator_gpu() -> JsValue {
    let get = |o: &JsValue, k: &str| Reflect::get(o, &JsValue::from_str(k)).ok();
    get(&js_sys::global(), "navigator")
        .and_then(|n| get(&n, "gpu"))
        .unwrap_or(JsValue::UNDEFINED)
}

/// Opens WebGPU: an `Error` named `WebGpuUnavailable` when the host has no `navigator.gpu`
/// or offers no adapter.
pub(crate) async fn open_context() -> Result<GpuContext, JsValue> {
    check_navigator_gpu()?;
    request_subgroups_where_offered(&navigator_gpu());
    let options = ContextOptions {
        backends: Some(wgpu::Backends::BROWSER_WEBGPU),
        browser_integer_dot: wgsl_has("packed_4x8_integer_dot_product"),
        browser_subgroups: true,
        ..ContextOptions::default()
    };
    match GpuContext::new(options).await {
        Ok(ctx) => Ok(ctx),
        Err(wgemma::Error::NoAdapter { .. }) => Err(js_error(
            "WebGpuUnavailable",
            "WebGPU is unavailable: navigator.gpu exists but requestAdapter() offered no \
             adapter (WebGPU may be disabled or blocklisted for this GPU; headless \
             Chromium without a GPU needs --enable-unsafe-webgpu)",
        )),
        Err(e) => Err(wgemma_error(e)),
    }
}

/// Rejects early with a specific message when the page has no WebGPU at all.
fn check_navigator_gpu() -> Result<(), JsValue> {
    let global = js_sys::global();
    let navigator = Reflect::get(&global, &"navigator".into()).unwrap_or(JsValue::UNDEFINED);
    let gpu = if navigator.is_undefined() {
        JsValue::UNDEFINED
    } else {
        Reflect::get(&navigator, &"gpu".into()).unwrap_or(JsValue::UNDEFINED)
    };
    if gpu.is_undefined() || gpu.is_null() {
        let secure = Reflect::get(&global, &"isSecureContext".into())
            .map(|v| v != JsValue::FALSE)
            .unwrap_or(true);
        let hint = if secure {
            "use a browser with WebGPU (Chrome/Edge 113+, Safari 26+, Firefox 141+)"
        } else {
            "WebGPU needs a secure context: serve the page over https or from localhost"
        };
        return Err(js_error(
            "WebGpuUnavailable",
            &format!("WebGPU is unavailable: navigator.gpu is undefined in this browser; {hint}"),
        ));
    }
    Ok(())
}
