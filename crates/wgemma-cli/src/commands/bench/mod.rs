//! `wgemma bench`: prefill and decode speed of a model of real shapes (synthetic weights,
//! the same code path as a loaded model) or of a checkpoint, as llama-bench measures them:
//! each test (`pp512`, `tg128`, the speculative rows) warmed up and then timed several
//! times, printed as mean ± standard deviation in a table (or JSON), with the device's read
//! bandwidth measured in the same run for the decode roofline.

mod args;
mod parallel;
mod report;
mod table;

use args::Sizes;
pub use args::{BenchArgs, LAB_SWITCHES};

use crate::args::{check_exists, ModelArgs};
use crate::load::{load_assistant_into, load_model, load_synthetic, Loaded};
use anyhow::{bail, Context as _, Result};
use report::{Outcome, Profile};
use wgemma::formats::synthetic::SyntheticShape;
use wgemma::generate::speculative::MAX_DRAFT_TOKENS;
use wgemma::gpu::{ContextOptions, GpuContext};
use wgemma::harness;
use wgemma::model::target::ModelOptions;
use wgemma::model::weights::WeightFormat;
use wgemma::ops::attention::MAX_SEQUENCES;
use wgemma::ops::read_bandwidth::ReadBandwidthCase;
use wgemma::session::bench::lab::{compare_fusions, compare_norm_kernels};
use wgemma::session::bench::suite::run_suite;
use wgemma::session::LoadedTarget;

/// `--parallel N`: the loaded target in a session with its assistant, then
/// [`parallel::run`].
fn parallel(
    args: BenchArgs,
    sizes: Sizes,
    loaded: Loaded,
    ctx: GpuContext,
    streams: usize,
    model_name: String,
) -> Result<()> {
    let mut loaded = loaded;
    loaded.target.state.set_plan_options(args.plan_options());
    let path = args
        .model
        .clone()
        .unwrap_or_else(|| model_name.clone().into());
    let mut session = loaded.into_session(ctx, &path, None, true)?;
    match &args.model {
        None => {
            if let Some(a) = parallel::synthetic_assistant(&session, args.seed)? {
                session.install_assistant(a);
            }
        }
        Some(path) => load_assistant_into(&mut session, path, true).with_context(|| {
            format!(
                "--parallel with --model {}: expected a model artifact holding its assistant",
                path.display()
            )
        })?,
    }
    parallel::run(
        &mut session,
        &parallel::ParallelBench {
            streams,
            prompt_len: sizes.prompt_len,
            gen: sizes.gen,
            repetitions: sizes.repetitions,
            draft_tokens: args.draft_tokens,
            acceptance: &args.acceptance,
            seed: args.seed,
            model_name,
            dtype: args.dtype_label(),
            json: args.json,
        },
    )
}

pub fn run(args: BenchArgs) -> Result<()> {
    let sizes = args.sizes()?;
    let format = check_args(&args)?;
    let mut ctx = crate::gpu_args::open_context(ContextOptions {
        gemm: args.gemm.ceiling(),
        webgpu_limits: args.webgpu_limits,
        shader_checks: args.shader_checks.checks(),
        ..crate::gpu_args::context_options()
    })?;
    ctx.set_trace_barriers(args.trace_barriers);
    let loaded = load_for_bench(&args, &sizes, &ctx, format)?;
    let model_name = match (&args.synthetic, &args.model) {
        (Some(shape), _) => format!("{shape} (synthetic)"),
        (None, Some(path)) => path.file_name().map_or_else(
            || path.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        ),
        (None, None) => unreachable!("a model was loaded"),
    };
    if let Some(streams) = args.parallel {
        return parallel(args, sizes, loaded, ctx, streams, model_name);
    }
    let LoadedTarget {
        mut state, load_ms, ..
    } = loaded.target;
    state.set_plan_options(args.plan_options());
    let plan = args.suite_plan(&sizes)?;
    let mut suite = pollster::block_on(run_suite(&ctx, &mut state, plan, &|line| {
        eprintln!("{line}")
    }))?;
    let profile = if args.profile {
        ctx.enable_profiling()?;
        let assistant = suite.assistant.as_mut();
        Some(Profile::measure(
            &args,
            &ctx,
            &mut state,
            &suite.plain,
            assistant,
        )?)
    } else {
        None
    };
    let context = suite.plain.context();
    let fusions = if args.compare_fusions {
        Some(pollster::block_on(compare_fusions(
            &ctx, &mut state, context, sizes.gen,
        ))?)
    } else {
        None
    };
    let comparison = if args.compare_norm_kernels {
        Some(pollster::block_on(compare_norm_kernels(
            &ctx,
            &mut state,
            context,
            sizes.gen,
            args.draft_tokens,
        ))?)
    } else {
        None
    };
    // A small buffer on a software device (tiny is a smoke test there): the figure is
    // the cache's, and it is labelled as what it is below.
    let tiny = args.synthetic.as_deref() == Some("tiny");
    let (words, runs) = if tiny { (4 << 20, 10) } else { (64 << 20, 50) };
    let bandwidth = harness::perf(&ctx, &ReadBandwidthCase { words }, runs)?;
    let outcome = Outcome {
        model_name,
        load_ms,
        suite,
        diagnostics: fusions.into_iter().chain(comparison).collect(),
        device_read_gb_per_s: bandwidth.gb_per_s,
        profile,
    };
    if args.json {
        println!("{}", outcome.json(&args, &ctx, state.model()));
    } else {
        outcome.print(&args, &ctx, state.model());
    }
    Ok(())
}

/// Refuses what no run could measure, before the GPU opens; the weight format asked for.
fn check_args(args: &BenchArgs) -> Result<WeightFormat> {
    if let Some(p) = args.acceptance.iter().find(|p| !(0.0..=1.0).contains(*p)) {
        bail!("--acceptance: expected rates within 0..=1, found {p}");
    }
    if args.draft_tokens > MAX_DRAFT_TOKENS {
        bail!(
            "--draft-tokens: expected 0..={MAX_DRAFT_TOKENS}, found {}",
            args.draft_tokens
        );
    }
    let format = WeightFormat::parse(args.dtype.as_deref().unwrap_or("q4"))?;
    if args.prefill_chunk == 0 {
        bail!("--prefill-chunk: expected at least 1 row, found 0");
    }
    // The KvState's own sequence keeps slot 0; each stream takes one more.
    let max_parallel = MAX_SEQUENCES - 1;
    match args.parallel {
        Some(n) if !(1..=max_parallel).contains(&n) => {
            bail!("--parallel: expected 1..={max_parallel} streams, found {n}")
        }
        Some(_) if args.draft_tokens == 0 => {
            bail!("--parallel: expected --draft-tokens 1..={MAX_DRAFT_TOKENS}, found 0")
        }
        _ => {}
    }
    if let Some(path) = &args.model {
        check_exists("--model", path)?;
    }
    Ok(format)
}

/// Loads the model with a KV cache for the tests.
fn load_for_bench(
    args: &BenchArgs,
    sizes: &Sizes,
    ctx: &GpuContext,
    format: WeightFormat,
) -> Result<Loaded> {
    let (prompt_len, gen) = (sizes.prompt_len, sizes.gen);
    // The decode tests start after `depth` tokens, at least the one whose forward gives
    // the first generated token.
    // (--parallel: the streams decode after their prompts.)
    let context_len = if args.parallel.is_some() {
        prompt_len
    } else {
        args.depth.max(1)
    };
    // The KV cache holds the prompt (or the decode depth), the generated tokens and a verify
    // round's rows; the load checks that context against the device and the host before
    // allocating it.
    let max_context = context_len
        .checked_add(gen)
        .and_then(|n| n.checked_add(MAX_DRAFT_TOKENS + 1))
        .map(|n| n.max(prompt_len))
        .and_then(|n| n.checked_add(16))
        .with_context(|| {
            format!(
                "--prompt-len {prompt_len}, --depth {} and --gen {gen}: expected a total that \
                 fits a KV cache, found one past 2^64",
                args.depth
            )
        })?;
    let options = ModelOptions {
        format,
        max_context,
        prefill_chunk: args.prefill_chunk.clamp(1, prompt_len.max(context_len)),
        max_verify_rows: if args.adaptive_draft {
            MAX_DRAFT_TOKENS + 1
        } else {
            args.draft_tokens + 1
        },
        sequences: args.parallel.map_or(1, |n| n + 1),
    };
    let loaded = match (&args.synthetic, &args.model) {
        (Some(shape), None) => {
            load_synthetic(ctx, SyntheticShape::parse(shape)?, args.seed, options)?
        }
        (None, Some(dir)) => load_model(
            ctx,
            dir,
            ModelArgs {
                model: dir.clone(),
                dtype: args.dtype.clone(),
                context: options.max_context,
                prefill_chunk: Some(options.prefill_chunk),
                no_verify: false,
                allow_extra_tensors: false,
            }
            .request()?,
        )?,
        _ => bail!("expected --synthetic SHAPE or --model DIR|FILE, found neither"),
    };
    Ok(loaded)
}
