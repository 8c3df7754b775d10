//! The GPU context: adapter choice, device with the adapter's own limits, optional features,
//! a pipeline cache and counters of dispatches/submits for benchmarks.

use super::activations::{native_integer_dot, ActivationChoice, Activations};
use super::profile::{DispatchTime, Profiler};
use super::tensor::Tensor;
use crate::error::{Error, Result};
use crate::gpu::registry;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Optional features wgemma uses when the adapter has them; every kernel has a path without.
/// Only features some kernel or the profiler uses are requested: a device asks the driver
/// for no more than it needs.
pub const OPTIONAL_FEATURES: wgpu::Features = wgpu::Features::SHADER_F16
    .union(wgpu::Features::SUBGROUP)
    .union(wgpu::Features::TIMESTAMP_QUERY)
    .union(wgpu::Features::TIMESTAMP_QUERY_INSIDE_PASSES)
    .union(wgpu::Features::TIMESTAMP_QUERY_INSIDE_ENCODERS);

/// Which GEMM family the Q4 prefill routes may use at most (a ceiling: a device without
/// the feature falls further down on its own). Benchmarks lower it to measure the portable
/// routes on a device that has tensor cores.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum GemmCeiling {
    /// The f32 tiled GEMM only.
    F32,
    /// Up to the f16-tile vector GEMM (`SHADER_F16`).
    F16,
    /// Up to the int8 GEMM on integer dot products (where the context runs int8
    /// activations; preferred to the f16 GEMM there).
    Int8,
    /// Up to the cooperative-matrix (tensor core) GEMM.
    #[default]
    CooperativeMatrix,
}

/// Whether the adapter offers the one cooperative-matrix configuration the tensor-core
/// kernels use: 16x16x16, f16 A and B, f32 accumulator, with `SHADER_F16` beside it.
pub fn offers_coop_16x16_f16(
    features: wgpu::Features,
    configs: &[wgpu::CooperativeMatrixProperties],
) -> bool {
    features.contains(wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX | wgpu::Features::SHADER_F16)
        && configs.iter().any(|c| {
            (c.m_size, c.n_size, c.k_size) == (16, 16, 16)
                && c.ab_type == wgpu::CooperativeScalarType::F16
                && c.cr_type == wgpu::CooperativeScalarType::F32
        })
}

/// How to pick the adapter.
#[derive(Debug, Clone, Default)]
pub struct ContextOptions {
    /// Backends to consider; `None` means `WGPU_BACKEND` from the environment, else the
    /// primary ones (Vulkan, Metal, DX12, browser WebGPU).
    pub backends: Option<wgpu::Backends>,
    /// Request no optional features (to test the portable path).
    pub portable: bool,
    /// Lower `maxComputeWorkgroupsPerDimension` (tests exercise grid folding cheaply).
    pub max_workgroups_per_dimension: Option<u32>,
    /// The fastest GEMM family the Q4 prefill routes may use (default: all).
    pub gemm: GemmCeiling,
    /// Only what desktop Chrome grants a page ([`super::browser`]): its features (no
    /// cooperative matrices, no coherent storage) and its tiered limits, so a native GPU
    /// measures the figure a browser user can expect.
    pub webgpu_limits: bool,
    /// The precision of the Q4 matvecs' activations (default: int8 where native).
    pub activations: ActivationChoice,
    /// In a browser: whether its WGSL has `packed_4x8_integer_dot_product` (the web front
    /// end reads `navigator.gpu.wgslLanguageFeatures`; wgpu's own query fails under Node's
    /// dawn.node). Unused natively.
    pub browser_integer_dot: bool,
    /// In a browser: the host adds `subgroups` to the device request where the adapter
    /// offers it (wgpu 30's browser backend cannot request it; the web front end wraps
    /// `requestDevice`), so `SUBGROUP` counts as granted when the device has it. Unused
    /// natively.
    pub browser_subgroups: bool,
    /// Which runtime checks wgpu compiles into every shader (default: bounds and division
    /// checks, loop counters only in the tensor-core kernels; see [`ShaderChecks`]).
    pub shader_checks: ShaderChecks,
}

/// The runtime checks wgpu's shader translation (naga) adds to every kernel natively. A
/// browser compiles WGSL with its own checks (Tint's robustness) and ignores these.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum ShaderChecks {
    /// Everything wgpu adds by default: index clamping, guarded integer division and a
    /// counter in every loop that ends it after 2^64 iterations. The counter stops the
    /// driver from unrolling a loop, which costs the tiled GEMMs most of their speed.
    All,
    /// Index clamping and guarded division, no loop counters: every loop in wgemma's
    /// kernels is bounded by a constant or a uniform size, which is the promise
    /// `force_loop_bounding = false` asks for.
    Bounded,
    /// As `Bounded`, except that kernels on cooperative matrices (the tensor-core GEMMs and
    /// prefill attention) keep the loop counters. The default: every other kernel is
    /// measured faster without them (decode 353 against 288 tok/s on an H100, the f32 GEMM
    /// 10x), while the tensor-core prefill has only been measured fast with them.
    #[default]
    BoundedExceptCooperative,
    /// No checks at all (a measurement of what the remaining checks cost; not for use).
    None,
}

impl ShaderChecks {
    /// The checks for a kernel whose WGSL is `source`.
    fn runtime_checks(self, source: &str) -> wgpu::ShaderRuntimeChecks {
        let bounded = wgpu::ShaderRuntimeChecks {
            force_loop_bounding: false,
            ..wgpu::ShaderRuntimeChecks::checked()
        };
        match self {
            ShaderChecks::All => wgpu::ShaderRuntimeChecks::checked(),
            ShaderChecks::Bounded => bounded,
            ShaderChecks::BoundedExceptCooperative if source.contains("coop_mat") => {
                wgpu::ShaderRuntimeChecks::checked()
            }
            ShaderChecks::BoundedExceptCooperative => bounded,
            ShaderChecks::None => wgpu::ShaderRuntimeChecks::unchecked(),
        }
    }
}

/// A device, its queue and what wgemma learned about it.
pub struct GpuContext {
    pub adapter: wgpu::Adapter,
    pub device: wgpu::Device,
    pub queue: wgpu::Queue,
    pub info: wgpu::AdapterInfo,
    pub limits: wgpu::Limits,
    pub features: wgpu::Features,
    /// The GEMM ceiling this context was asked for (see [`GemmCeiling`]).
    pub gemm: GemmCeiling,
    /// Whether the device was created with the 16x16x16 f16 x f16 + f32 cooperative
    /// matrices (see [`offers_coop_16x16_f16`]).
    coop_16x16_f16: bool,
    /// Whether `dot4I8Packed` is a native instruction here (see [`native_integer_dot`]).
    integer_dot: bool,
    activations: Activations,
    shader_checks: ShaderChecks,
    pipelines: Mutex<HashMap<PipelineKey, Arc<wgpu::ComputePipeline>>>,
    /// Scratch tensors shared by name (see [`GpuContext::shared_scratch`]).
    pub(super) scratch: Mutex<HashMap<&'static str, Tensor>>,
    counters: Counters,
    profiler: Option<Profiler>,
    /// Print every dispatch of a pass and the bindings that cost it a barrier (see
    /// [`GpuContext::set_trace_barriers`]).
    trace_barriers: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct PipelineKey {
    shader: &'static str,
    entry: &'static str,
    constants: Vec<(&'static str, u64)>,
}

/// Work counters, read by benchmarks (dispatches and submits per token).
#[derive(Debug, Default)]
pub struct Counters {
    pub dispatches: AtomicU64,
    /// Dispatches before which wgpu records a pipeline barrier (see `Pass`): the dependent
    /// steps of the recorded work.
    pub barriers: AtomicU64,
    pub submits: AtomicU64,
    pub passes: AtomicU64,
    /// Bytes of every tensor buffer created (GPU memory held by wgemma's tensors).
    pub tensor_bytes: AtomicU64,
}

impl Counters {
    /// Dispatches preceded by a pipeline barrier so far.
    pub fn barriers(&self) -> u64 {
        self.barriers.load(Ordering::Relaxed)
    }

    /// (dispatches, submits, passes) so far.
    pub fn snapshot(&self) -> (u64, u64, u64) {
        (
            self.dispatches.load(Ordering::Relaxed),
            self.submits.load(Ordering::Relaxed),
            self.passes.load(Ordering::Relaxed),
        )
    }
}

fn device_type_rank(t: wgpu::DeviceType) -> u8 {
    match t {
        wgpu::DeviceType::DiscreteGpu => 0,
        wgpu::DeviceType::IntegratedGpu => 1,
        wgpu::DeviceType::VirtualGpu => 2,
        wgpu::DeviceType::Other => 3,
        wgpu::DeviceType::Cpu => 4,
    }
}

impl GpuContext {
    /// Picks an adapter (discrete first), then requests a device with the adapter's own
    /// limits (the WebGPU defaults cap storage bindings at 128 MiB) and the optional
    /// features it has.
    pub async fn new(options: ContextOptions) -> Result<Self> {
        let mut desc = wgpu::InstanceDescriptor::new_without_display_handle_from_env();
        desc.backends = options
            .backends
            .or_else(wgpu::Backends::from_env)
            .unwrap_or(wgpu::Backends::PRIMARY);
        let backends = desc.backends;
        let instance = wgpu::Instance::new(desc);
        let adapter = Self::pick_adapter(&instance, backends).await?;
        let info = adapter.get_info();
        let integer_dot = native_integer_dot(&adapter, options.browser_integer_dot);
        let cpu = info.device_type == wgpu::DeviceType::Cpu;
        let activations = Activations::resolve(options.activations, integer_dot, cpu, &info.name)?;
        let mut features = if options.portable {
            wgpu::Features::empty()
        } else if options.webgpu_limits {
            adapter.features() & super::browser::BROWSER_FEATURES
        } else {
            adapter.features() & OPTIONAL_FEATURES
        };
        let mut limits = if options.webgpu_limits {
            super::browser::browser_limits(&adapter.limits())
        } else {
            adapter.limits()
        };
        if let Some(max) = options.max_workgroups_per_dimension {
            limits.max_compute_workgroups_per_dimension =
                limits.max_compute_workgroups_per_dimension.min(max);
        }
        // Tensor cores only where the adapter offers the exact configuration the kernels
        // use; a device request that fails with the experimental feature is retried
        // without it, so the context fails closed to the portable GEMMs.
        let coop = !options.portable
            && !options.webgpu_limits
            && options.gemm == GemmCeiling::CooperativeMatrix
            && offers_coop_16x16_f16(adapter.features(), &adapter.cooperative_matrix_properties());
        let coop_features = wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX;
        let request = |features: wgpu::Features| {
            let experimental = if features.contains(coop_features) {
                // SAFETY: the experimental feature is only used by the cooperative-matrix
                // GEMM, whose WGSL `wgemma ops check` compares with the CPU reference on
                // the device; wgpu asks for this acknowledgement.
                unsafe { wgpu::ExperimentalFeatures::enabled() }
            } else {
                wgpu::ExperimentalFeatures::disabled()
            };
            adapter.request_device(&wgpu::DeviceDescriptor {
                label: Some("wgemma"),
                required_features: features,
                required_limits: limits.clone(),
                experimental_features: experimental,
                memory_hints: wgpu::MemoryHints::Performance,
                trace: wgpu::Trace::Off,
            })
        };
        let mut created = None;
        if coop {
            if let Ok(pair) = request(features | coop_features).await {
                features |= coop_features;
                created = Some(pair);
            }
        }
        let (device, queue) = match created {
            Some(pair) => pair,
            None => request(features).await.map_err(|e| Error::DeviceRequest {
                adapter: info.name.clone(),
                reason: e.to_string(),
            })?,
        };
        if options.browser_subgroups
            && !options.portable
            && super::browser::browser_device_has_subgroups(&device)
        {
            features |= wgpu::Features::SUBGROUP;
        }
        Ok(GpuContext {
            coop_16x16_f16: features.contains(coop_features),
            integer_dot,
            activations,
            shader_checks: options.shader_checks,
            gemm: options.gemm,
            adapter,
            device,
            queue,
            info,
            limits,
            features,
            pipelines: Mutex::new(HashMap::new()),
            scratch: Mutex::new(HashMap::new()),
            counters: Counters::default(),
            profiler: None,
            trace_barriers: false,
        })
    }

    async fn pick_adapter(
        instance: &wgpu::Instance,
        backends: wgpu::Backends,
    ) -> Result<wgpu::Adapter> {
        let no_adapter = || Error::NoAdapter {
            backends: format!("{backends:?}"),
        };
        #[cfg(not(target_arch = "wasm32"))]
        {
            let mut adapters = instance.enumerate_adapters(backends).await;
            adapters.sort_by_key(|a| device_type_rank(a.get_info().device_type));
            adapters.into_iter().next().ok_or_else(no_adapter)
        }
        #[cfg(target_arch = "wasm32")]
        {
            // The browser picks; without a GPU it may only offer its software (fallback)
            // adapter, e.g. Chromium's SwiftShader, and only when asked for one.
            let _ = device_type_rank;
            for force_fallback_adapter in [false, true] {
                let options = wgpu::RequestAdapterOptions {
                    power_preference: wgpu::PowerPreference::HighPerformance,
                    force_fallback_adapter,
                    ..Default::default()
                };
                if let Ok(adapter) = instance.request_adapter(&options).await {
                    return Ok(adapter);
                }
            }
            Err(no_adapter())
        }
    }

    /// Native convenience: blocks on [`GpuContext::new`]. Not available on wasm32.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn new_blocking(options: ContextOptions) -> Result<Self> {
        pollster::block_on(Self::new(options))
    }

    pub fn has(&self, feature: wgpu::Features) -> bool {
        self.features.contains(feature)
    }

    /// A shader's WGSL as this device compiles it (see [`super::browser::wgsl_with_enables`]).
    fn wgsl_for_device(&self, source: &'static str) -> std::borrow::Cow<'static, str> {
        super::browser::wgsl_with_enables(
            source,
            cfg!(target_arch = "wasm32"),
            self.has(wgpu::Features::SUBGROUP),
        )
    }

    /// Whether the device runs 16x16x16 f16 x f16 + f32 cooperative matrices (requested
    /// at creation where the adapter offers them and the GEMM ceiling allows).
    pub fn has_coop_16x16_f16(&self) -> bool {
        self.coop_16x16_f16
    }

    /// Whether `dot4I8Packed` runs natively on this device.
    pub fn has_integer_dot(&self) -> bool {
        self.integer_dot
    }

    /// The runtime checks compiled into this context's kernels.
    pub fn shader_checks(&self) -> ShaderChecks {
        self.shader_checks
    }

    /// The precision the Q4 matvecs run their activations at.
    pub fn activations(&self) -> Activations {
        self.activations
    }

    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// Times every dispatch from now on (benchmarks only: one timestamp per dispatch).
    /// Needs the timestamp-query features; an error names the missing ones.
    pub fn enable_profiling(&mut self) -> Result<()> {
        self.profiler = Some(Profiler::new(&self.device, self.features)?);
        Ok(())
    }

    /// Prints every dispatch of each pass recorded from now on, and the bindings that cost it
    /// a barrier, to stderr (a diagnostic: `wgemma bench --trace-barriers`; it replaced the
    /// `WGEMMA_TRACE_BARRIERS` environment switch, so the library reads no environment).
    pub fn set_trace_barriers(&mut self, on: bool) {
        self.trace_barriers = on;
    }

    pub(crate) fn trace_barriers(&self) -> bool {
        self.trace_barriers
    }

    pub(crate) fn profiler(&self) -> Option<&Profiler> {
        self.profiler.as_ref()
    }

    /// The dispatches submitted since the last call, with their GPU times (waits for them).
    /// Empty when profiling is off.
    pub async fn read_profile(&self) -> Result<Vec<DispatchTime>> {
        match &self.profiler {
            Some(p) => p.read(&self.device, &self.queue).await,
            None => Ok(Vec::new()),
        }
    }

    /// A compute pipeline for a registered shader's entry point with override constants,
    /// created once and cached.
    pub fn pipeline(
        &self,
        shader: &'static str,
        entry: &'static str,
        constants: &[(&'static str, u64)],
    ) -> Result<Arc<wgpu::ComputePipeline>> {
        let key = PipelineKey {
            shader,
            entry,
            constants: constants.to_vec(),
        };
        let mut cache = self.pipelines.lock().expect("pipeline cache poisoned");
        if let Some(p) = cache.get(&key) {
            return Ok(p.clone());
        }
        let entry_meta =
            registry::shader(shader).ok_or_else(|| Error::UnknownShader(shader.into()))?;
        if entry_meta.workgroup_size(entry).is_none() {
            return Err(Error::UnknownShader(format!("{shader}::{entry}")));
        }
        let checks = self.shader_checks.runtime_checks(entry_meta.source);
        let descriptor = wgpu::ShaderModuleDescriptor {
            label: Some(shader),
            source: wgpu::ShaderSource::Wgsl(self.wgsl_for_device(entry_meta.source)),
        };
        // SAFETY: `ShaderChecks::Bounded` and `BoundedExceptCooperative` (the default) drop
        // only loop counters, and every loop in the registry's kernels ends within a constant
        // or uniform bound;
        // `ShaderChecks::None` is a measurement switch whose kernels index within the
        // bindings their planners size.
        let module = unsafe { self.device.create_shader_module_trusted(descriptor, checks) };
        let constants: Vec<(&str, f64)> = constants.iter().map(|(k, v)| (*k, *v as f64)).collect();
        let pipeline = self
            .device
            .create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: Some(shader),
                layout: None,
                module: &module,
                entry_point: Some(entry),
                compilation_options: wgpu::PipelineCompilationOptions {
                    constants: &constants,
                    zero_initialize_workgroup_memory: false,
                },
                cache: None,
            });
        let pipeline = Arc::new(pipeline);
        cache.insert(key, pipeline.clone());
        Ok(pipeline)
    }

    /// Submits the writes queued so far (no command buffers) and lets the device free the
    /// staging memory of writes that completed, without waiting. A loader calls it between
    /// tensors so that staging copies of every weight do not pile up until the first
    /// forward's submit. Not counted as a submit: it records no work of its own.
    pub fn flush_uploads(&self) {
        self.queue.submit([]);
        // Non-blocking; on the web the browser frees staging memory itself.
        let _ = self.device.poll(wgpu::PollType::Poll);
    }

    pub(crate) fn count_pass(&self, dispatches: u64, barriers: u64) {
        self.counters.passes.fetch_add(1, Ordering::Relaxed);
        self.counters
            .barriers
            .fetch_add(barriers, Ordering::Relaxed);
        self.counters
            .dispatches
            .fetch_add(dispatches, Ordering::Relaxed);
    }

    pub(crate) fn count_tensor_bytes(&self, bytes: u64) {
        self.counters
            .tensor_bytes
            .fetch_add(bytes, Ordering::Relaxed);
    }

    pub(crate) fn count_submit(&self) {
        self.counters.submits.fetch_add(1, Ordering::Relaxed);
    }

    /// A one-line description: adapter, backend, device type.
    pub fn describe(&self) -> String {
        format!(
            "{} ({:?}, {:?}, driver {} {})",
            self.info.name,
            self.info.backend,
            self.info.device_type,
            self.info.driver,
            self.info.driver_info
        )
    }
}

/// A GPU context shared by the tests of one process (device creation is not free on
/// lavapipe): the library's tests and every integration test use it, so it stays out of
/// the `harness` feature.
#[cfg(not(target_arch = "wasm32"))]
pub fn test_context() -> &'static GpuContext {
    static CTX: std::sync::OnceLock<GpuContext> = std::sync::OnceLock::new();
    CTX.get_or_init(|| {
        GpuContext::new_blocking(Default::default()).unwrap_or_else(|e| panic!("{e}"))
    })
}

#[cfg(test)]
mod tests {
    use super::{registry, ShaderChecks};

    fn source(name: &str) -> &'static str {
        registry::shader(name)
            .unwrap_or_else(|| panic!("no shader {name} in the registry"))
            .source
    }

    #[test]
    fn the_default_drops_loop_counters_except_in_tensor_core_kernels() {
        let checks = ShaderChecks::default();
        let coop = checks.runtime_checks(source("q4_gemm_coop"));
        let decode = checks.runtime_checks(source("attention_decode_latency"));
        let gemm = checks.runtime_checks(source("q4_gemm_int8"));
        assert!(
            coop.force_loop_bounding,
            "the tensor-core GEMM keeps its loop counters"
        );
        assert!(!decode.force_loop_bounding && !gemm.force_loop_bounding);
        for c in [coop, decode, gemm] {
            assert!(
                c.bounds_checks && c.int_div_checks,
                "index clamping and division guards stay"
            );
        }
    }

    #[test]
    fn all_and_none_apply_to_every_kernel() {
        for name in ["q4_gemm_coop", "attention_decode_latency"] {
            let all = ShaderChecks::All.runtime_checks(source(name));
            let none = ShaderChecks::None.runtime_checks(source(name));
            assert!(all.force_loop_bounding && all.bounds_checks);
            assert!(!none.force_loop_bounding && !none.bounds_checks);
            assert!(
                !ShaderChecks::Bounded
                    .runtime_checks(source(name))
                    .force_loop_bounding
            );
        }
    }
}
