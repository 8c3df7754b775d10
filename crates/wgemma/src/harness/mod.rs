//! The operator test harness, in the spirit of llama.cpp's `test-backend-ops`: every op case
//! builds its inputs, its kernels and its CPU reference outputs; [`check`] runs the kernels
//! on the GPU and compares (max-abs and normalised MSE, exact, or set equality), and
//! [`perf`] runs the same kernels many times in one pass and reports us/run and GB/s.

mod compare;

pub use compare::{compare, Check, Comparison, Values};

use crate::error::Result;
#[cfg(not(target_arch = "wasm32"))]
pub use crate::gpu::test_context;
use crate::gpu::{read_tensor_bytes, run_kernels, GpuContext, Kernel, Tensor};
use rand::SeedableRng;

/// Seeded RNG for op cases (reproducible from the seed printed by a failing case).
pub type Rng = rand_chacha::ChaCha8Rng;

pub fn rng(seed: u64) -> Rng {
    Rng::seed_from_u64(seed)
}

/// One output of a prepared case: the GPU tensor, its CPU reference and how to compare.
pub struct Expected {
    pub name: &'static str,
    pub tensor: Tensor,
    pub reference: Values,
    pub check: Check,
}

/// A case ready to run: kernels recorded in order into one pass.
pub struct Prepared {
    pub kernels: Vec<Kernel>,
    pub outputs: Vec<Expected>,
    /// Bytes the kernels must move per run (weights + activations), for GB/s.
    pub bytes_moved: u64,
}

/// One op case: a shape, dtype and parameters.
pub trait OpCase {
    /// E.g. `q4_linear m=3 k=1536 n=6144 group=32`.
    fn name(&self) -> String;
    fn prepare(&self, ctx: &GpuContext, rng: &mut Rng) -> Result<Prepared>;
}

/// The result of checking one output.
#[derive(Debug, Clone, serde::Serialize)]
pub struct OutputReport {
    pub output: &'static str,
    pub comparison: Comparison,
    pub pass: bool,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct CheckReport {
    pub case: String,
    pub seed: u64,
    pub outputs: Vec<OutputReport>,
}

impl CheckReport {
    pub fn pass(&self) -> bool {
        self.outputs.iter().all(|o| o.pass)
    }
}

impl std::fmt::Display for CheckReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (seed {}):", self.case, self.seed)?;
        for o in &self.outputs {
            write!(
                f,
                " {} {} [{}]",
                o.output,
                o.comparison,
                if o.pass { "OK" } else { "FAIL" }
            )?;
        }
        Ok(())
    }
}

/// Runs `case` on the GPU once and compares every output with its CPU reference.
pub async fn check(ctx: &GpuContext, case: &dyn OpCase, seed: u64) -> Result<CheckReport> {
    let prepared = case.prepare(ctx, &mut rng(seed))?;
    run_kernels(ctx, &prepared.kernels);
    let mut outputs = Vec::new();
    for expected in &prepared.outputs {
        let bytes = read_tensor_bytes(ctx, &expected.tensor).await?;
        let got = expected
            .reference
            .same_kind_from_bytes(&bytes, expected.tensor.numel());
        let comparison = compare(&got, &expected.reference, expected.check);
        outputs.push(OutputReport {
            output: expected.name,
            pass: comparison.passes(expected.check),
            comparison,
        });
    }
    Ok(CheckReport {
        case: case.name(),
        seed,
        outputs,
    })
}

/// Timing of one case.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PerfReport {
    pub case: String,
    pub us_per_run: f64,
    pub gb_per_s: f64,
    pub runs: u32,
}

impl std::fmt::Display for PerfReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:<60} {:>10.2} us/run {:>9.1} GB/s ({} runs)",
            self.case, self.us_per_run, self.gb_per_s, self.runs
        )
    }
}

/// Times `case`: `runs` repetitions recorded into one pass and submitted once, best of
/// three; the fixed submit + wait cost (~0.1 ms) is spread over the runs. Native only (it
/// blocks on the device).
#[cfg(not(target_arch = "wasm32"))]
pub fn perf(ctx: &GpuContext, case: &dyn OpCase, runs: u32) -> Result<PerfReport> {
    let prepared = case.prepare(ctx, &mut rng(0))?;
    let time = |reps: u32| -> Result<f64> {
        let mut step = crate::gpu::Step::new(ctx);
        step.pass(|pass| {
            for _ in 0..reps {
                prepared.kernels.iter().for_each(|k| pass.dispatch(k));
            }
        });
        let start = std::time::Instant::now();
        step.submit();
        ctx.device
            .poll(wgpu::PollType::wait_indefinitely())
            .map_err(|e| crate::Error::Gpu(e.to_string()))?;
        Ok(start.elapsed().as_secs_f64())
    };
    let runs = runs.max(1);
    time(runs.min(4))?; // warm up: pipelines, residency, clocks
    let mut best = f64::INFINITY;
    for _ in 0..3 {
        best = best.min(time(runs)?);
    }
    let per_run = best / runs as f64;
    Ok(PerfReport {
        case: case.name(),
        us_per_run: per_run * 1e6,
        gb_per_s: prepared.bytes_moved as f64 / per_run / 1e9,
        runs,
    })
}

/// A second shared test context whose grids fold above 8 workgroups per dimension, so that
/// small shapes reach the 2-D grid path (and the shaders' flat-index bound checks).
#[cfg(not(target_arch = "wasm32"))]
pub fn folded_test_context() -> &'static GpuContext {
    static CTX: std::sync::OnceLock<GpuContext> = std::sync::OnceLock::new();
    CTX.get_or_init(|| {
        GpuContext::new_blocking(crate::gpu::ContextOptions {
            max_workgroups_per_dimension: Some(8),
            ..Default::default()
        })
        .unwrap_or_else(|e| panic!("{e}"))
    })
}

/// Checks `case` on [`folded_test_context`] with each seed, after asserting that at least one
/// of its kernels really has a folded (2-D) grid; panics with the failing reports.
#[cfg(not(target_arch = "wasm32"))]
pub fn assert_folded_case_passes(case: &dyn OpCase, seeds: std::ops::Range<u64>) {
    let ctx = folded_test_context();
    let prepared = case
        .prepare(ctx, &mut rng(0))
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        prepared.kernels.iter().any(|k| k.grid().y > 1),
        "{}: no kernel has a folded grid",
        case.name()
    );
    for seed in seeds {
        let report = pollster::block_on(check(ctx, case, seed)).unwrap_or_else(|e| panic!("{e}"));
        assert!(report.pass(), "{report}");
    }
}

/// Checks every case with each seed and panics with every failing report (for tests).
#[cfg(not(target_arch = "wasm32"))]
pub fn assert_cases_pass(cases: &[Box<dyn OpCase>], seeds: std::ops::Range<u64>) {
    let ctx = test_context();
    let mut failures = Vec::new();
    for case in cases {
        for seed in seeds.clone() {
            match pollster::block_on(check(ctx, case.as_ref(), seed)) {
                Ok(report) if report.pass() => {}
                Ok(report) => failures.push(report.to_string()),
                Err(e) => failures.push(format!("{} (seed {seed}): error: {e}", case.name())),
            }
        }
    }
    assert!(
        failures.is_empty(),
        "failing cases:\n{}",
        failures.join("\n")
    );
}
