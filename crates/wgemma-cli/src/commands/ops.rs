//! `wgemma ops check|bench`: the op harness from the command line.

use clap::{Args, ValueEnum};
use wgemma::gpu::GpuContext;
use wgemma::harness::{self, rng};
use wgemma::ops;

#[derive(Args)]
pub struct OpsArgs {
    /// `check`: every op vs its CPU reference; `bench`: us/run and GB/s.
    #[arg(value_enum)]
    mode: Mode,
    /// Only cases whose name contains this text.
    #[arg(long)]
    filter: Option<String>,
    /// Random-shape cases generated from this seed.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Repetitions per timing (bench).
    #[arg(long, default_value_t = 200)]
    runs: u32,
    /// Print JSON lines instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Clone, Copy, ValueEnum)]
enum Mode {
    Check,
    Bench,
}

pub fn run(args: OpsArgs) -> anyhow::Result<()> {
    if args.runs == 0 {
        anyhow::bail!("--runs: expected at least 1 repetition per timing, found 0");
    }
    let ctx = GpuContext::new_blocking(crate::gpu_args::context_options())?;
    eprintln!("adapter: {}", ctx.describe());
    let cases: Vec<_> = match args.mode {
        Mode::Check => {
            let mut rng = rng(args.seed);
            let mut cases = ops::random_cases(&mut rng);
            // The f16 and tensor-core prefill GEMMs where this device has them.
            let caps = ops::linear::DeviceCaps::of(&ctx);
            cases.extend(ops::linear::prefill_cases(&caps, &mut rng));
            // Prefill attention at E2B shapes (the tensor-core route where the device has it).
            cases.extend(ops::attention::prefill_check_cases());
            cases.extend(ops::linear::int8_check_cases());
            // Every ggml format at E2B shapes, M = 1, 3, 8 and a prefill, the chunked lm_head.
            cases.extend(ops::ggml_linear::check_cases());
            cases
        }
        Mode::Bench => ops::bench_cases(),
    }
    .into_iter()
    .filter(|c| {
        args.filter
            .as_ref()
            .is_none_or(|f| c.name().contains(f.as_str()))
    })
    .collect();
    if cases.is_empty() {
        anyhow::bail!("no op case matches the filter {:?}", args.filter);
    }
    let mut failed = 0;
    for case in &cases {
        match args.mode {
            Mode::Check => {
                let report = pollster::block_on(harness::check(&ctx, case.as_ref(), args.seed))?;
                failed += usize::from(!report.pass());
                if args.json {
                    println!("{}", serde_json::to_string(&report)?);
                } else {
                    println!("{report}");
                }
            }
            Mode::Bench => {
                let report = match harness::perf(&ctx, case.as_ref(), args.runs) {
                    // A forced route this device lacks (e.g. the tensor-core GEMM).
                    Err(e @ wgemma::Error::NoRoute { .. }) => {
                        eprintln!("skipped {}: {e}", case.name());
                        continue;
                    }
                    other => other?,
                };
                if args.json {
                    println!("{}", serde_json::to_string(&report)?);
                } else {
                    println!("{report}");
                }
            }
        }
    }
    if failed > 0 {
        anyhow::bail!("{failed} of {} op cases failed", cases.len());
    }
    Ok(())
}
