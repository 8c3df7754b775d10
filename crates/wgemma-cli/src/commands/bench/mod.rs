//! `wgemma bench`: prefill and decode speed of a model of real shapes (synthetic weights,
//! the same code path as a loaded model) or of a checkpoint, as llama-bench measures them:
//! each test (`pp512`, `tg128`, the speculative rows) warmed up and then timed several
//! times, printed as mean ± standard deviation in a table (or JSON), with the device's read
//! bandwidth measured in the same run for the decode roofline.

mod args;
mod diag;
mod parallel;
mod spec;
mod table;

use args::Sizes;
pub use args::{BenchArgs, LAB_SWITCHES};

use crate::args::{check_exists, ModelArgs};
use crate::load::{load_assistant_into, load_model, load_synthetic, Loaded};
use anyhow::{bail, Context as _, Result};
use diag::{
    compare_fusions, compare_norm_kernels, print_profile, profile_forwards, summarize_profile,
};
use table::{print_table, samples_at, timed, TestRow};
use wgemma::formats::synthetic::SyntheticShape;
use wgemma::generate::speculative::MAX_DRAFT_TOKENS;
use wgemma::gpu::{ContextOptions, GpuContext};
use wgemma::harness;
use wgemma::model::assistant::Assistant;
use wgemma::model::state::KvState;
use wgemma::model::target::{ModelOptions, Want};
use wgemma::model::weights::WeightFormat;
use wgemma::ops::attention::MAX_SEQUENCES;
use wgemma::ops::read_bandwidth::ReadBandwidthCase;
use wgemma::session::bench::drafted::DraftedRuns;
use wgemma::session::bench::timing::{compare, Samples};
use wgemma::session::bench::{self, gemm_family, OracleRun};
use wgemma::session::LoadedTarget;

/// An oracle run's JSON; `profile` summarises its verify forwards' dispatches when they
/// were profiled.
fn oracle_json(run: &OracleRun, plain_tps: f64, k: usize, profiling: bool) -> serde_json::Value {
    let mut json = run.json(plain_tps);
    json["profile"] = if profiling {
        summarize_profile(&run.profile, k + 1, run.rounds)
    } else {
        serde_json::Value::Null
    };
    json
}

/// The speculative rows: rounds after `context` that must reproduce `greedy` (the decode
/// test's tokens), timed as the decode test was.
struct SpecRows<'a> {
    context: &'a [u32],
    greedy: &'a [u32],
    k: usize,
    acceptance: &'a [f64],
    /// Also the adaptive schedule (with the drafter).
    adaptive: bool,
    repetitions: usize,
    /// The plain decode test, which the rows are compared with.
    tg: &'a Samples,
    tg_name: &'a str,
    depth: usize,
}

impl SpecRows<'_> {
    fn row(&self, test: String, samples: Samples) -> TestRow {
        TestRow {
            test,
            n_prompt: self.depth,
            n_gen: self.greedy.len() - 1,
            vs_tg: Some(compare(self.tg, &samples)),
            tokens_per_s: samples,
        }
    }

    /// Oracle drafts at each acceptance rate: a row each, and each rate's JSON (the last
    /// run's details, the runs' mean).
    fn oracle(
        &self,
        ctx: &GpuContext,
        state: &mut KvState,
    ) -> Result<(Vec<TestRow>, Vec<serde_json::Value>)> {
        let (k, decode_tps) = (self.k, self.tg.mean());
        let (mut rows, mut out) = (Vec::new(), Vec::new());
        for &p in self.acceptance {
            let test = format!("{} spec k={k} p={p:.2} oracle", self.tg_name);
            let mut last = None;
            let samples = timed(&test, self.repetitions, || {
                let tokens = (self.context, self.greedy);
                let o =
                    pollster::block_on(bench::oracle_rounds(ctx, state, tokens, (k, p), false))?;
                let tps = o.tokens_per_s;
                last = Some(o);
                Ok(tps)
            })?;
            let mut json = oracle_json(&last.expect("timed runs"), decode_tps, k, false);
            json["tokens_per_s"] = samples.mean().into();
            json["speedup"] = (samples.mean() / decode_tps).into();
            json["tokens_per_s_runs"] = samples.json();
            out.push(json);
            rows.push(self.row(test, samples));
        }
        Ok((rows, out))
    }

    /// The real drafter's rounds at each acceptance rate (fixed k, and adaptive when asked):
    /// a warm-up and `repetitions` timed sets; rows, and each rate's JSON.
    fn drafter(
        &self,
        ctx: &GpuContext,
        state: &mut KvState,
        assistant: &mut Assistant,
    ) -> Result<(Vec<TestRow>, Vec<serde_json::Value>)> {
        let (k, decode_tps, repetitions) = (self.k, self.tg.mean(), self.repetitions);
        let test = format!("{} spec k={k} drafter", self.tg_name);
        eprintln!("bench: {test}: warm-up and {repetitions} timed runs ...");
        let mut runs_at = |state: &mut KvState| {
            spec::drafted_runs(
                ctx,
                state,
                assistant,
                DraftedRuns {
                    prompt: self.context,
                    greedy: self.greedy,
                    k,
                    acceptance: self.acceptance,
                    adaptive: self.adaptive,
                },
            )
        };
        runs_at(state)?;
        let mut reps = Vec::with_capacity(repetitions);
        for _ in 0..repetitions {
            reps.push(runs_at(state)?);
        }
        let (mut rows, mut out) = (Vec::new(), Vec::new());
        for (i, &p) in self.acceptance.iter().enumerate() {
            let fixed = samples_at(&reps, i, |r| Some(r.drafted.tokens_per_s));
            let verify_only = samples_at(&reps, i, |r| Some(r.verify_only.tokens_per_s));
            let adaptive = samples_at(&reps, i, |r| r.adaptive.as_ref().map(|a| a.tokens_per_s));
            let (Some(fixed), Some(verify_only)) = (fixed, verify_only) else {
                bail!("the drafter's runs at acceptance {p}: expected {repetitions} timed runs, found none");
            };
            let mut json = reps[repetitions - 1][i].json(decode_tps);
            json["drafted"]["tokens_per_s"] = fixed.mean().into();
            json["drafted"]["speedup"] = (fixed.mean() / decode_tps).into();
            json["drafted"]["tokens_per_s_runs"] = fixed.json();
            json["verify_only"]["tokens_per_s"] = verify_only.mean().into();
            json["verify_only"]["tokens_per_s_runs"] = verify_only.json();
            rows.push(self.row(
                format!("{} spec k={k} p={p:.2} drafter", self.tg_name),
                fixed,
            ));
            if let Some(a) = adaptive {
                json["adaptive"]["tokens_per_s"] = a.mean().into();
                json["adaptive"]["speedup"] = (a.mean() / decode_tps).into();
                json["adaptive"]["tokens_per_s_runs"] = a.json();
                rows.push(self.row(
                    format!("{} spec adaptive p={p:.2} drafter", self.tg_name),
                    a,
                ));
            }
            out.push(json);
        }
        eprintln!("bench: {test}: done");
        Ok((rows, out))
    }
}

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
            dtype: dtype_label(&args),
            json: args.json,
        },
    )
}

pub fn run(args: BenchArgs) -> Result<()> {
    let sizes = args.sizes()?;
    let format = check_args(&args)?;
    let mut ctx = GpuContext::new_blocking(ContextOptions {
        gemm: args.gemm.ceiling(),
        webgpu_limits: args.webgpu_limits,
        ..crate::gpu_args::context_options()
    })?;
    ctx.set_trace_barriers(args.trace_barriers);
    let (loaded, context_len, prefill_chunk) = load_for_bench(&args, &sizes, &ctx, format)?;
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
    let mut plain = PlainRun::measure(&args, &sizes, &ctx, &mut state, context_len)?;
    let next = plain.greedy[0];
    // One forward at a time at the same position: a plain step without pipelining, and a
    // verify forward of k + 1 rows.
    let unpipelined_step_ms = forward_ms(&ctx, &mut state, next, 1)?;
    let verify_forward_ms = if args.draft_tokens > 0 {
        Some(forward_ms(&ctx, &mut state, next, args.draft_tokens + 1)?)
    } else {
        None
    };
    let (mut spec, mut assistant) = speculative(&args, &sizes, &ctx, &mut state, &plain)?;
    let mut rows = std::mem::take(&mut plain.rows);
    rows.append(&mut spec.rows);
    let profile = if args.profile {
        ctx.enable_profiling()?;
        Some(Profile::measure(
            &args,
            &ctx,
            &mut state,
            &plain,
            assistant.as_mut(),
        )?)
    } else {
        None
    };
    let context = plain.context(context_len);
    let fusions = if args.compare_fusions {
        Some(compare_fusions(&ctx, &mut state, context, sizes.gen)?)
    } else {
        None
    };
    let comparison = if args.compare_norm_kernels {
        Some(compare_norm_kernels(
            &ctx,
            &mut state,
            context,
            sizes.gen,
            args.draft_tokens,
        )?)
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
        prefill_chunk,
        unpipelined_step_ms,
        verify_forward_ms,
        diagnostics: fusions.into_iter().chain(comparison).collect(),
        device_read_gb_per_s: bandwidth.gb_per_s,
        weight_bytes: state.model().weight_bytes(),
        bytes_per_token: state.model().decode_weight_bytes(),
        rows,
        plain,
        spec,
        profile,
    };
    if args.json {
        println!("{}", outcome.json(&args, &sizes, &ctx));
    } else {
        outcome.print(&args, &sizes, &ctx);
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

/// Loads the model with a KV cache for the tests; also the decode tests' context length
/// and the prefill chunk the model took.
fn load_for_bench(
    args: &BenchArgs,
    sizes: &Sizes,
    ctx: &GpuContext,
    format: WeightFormat,
) -> Result<(Loaded, usize, usize)> {
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
    let prefill_chunk = options.prefill_chunk;
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
    Ok((loaded, context_len, prefill_chunk))
}

/// The plain tests (`ppN`, `tgN`) and what the later tests start from.
struct PlainRun {
    /// Seeded tokens: the prompt is the first `prompt_len`, the decode context the first
    /// `context_len`.
    tokens: Vec<u32>,
    prompt_len: usize,
    pp: Samples,
    tg: Samples,
    tg_name: String,
    /// The last decode run's greedy tokens (the first from the context's forward).
    greedy: Vec<u32>,
    /// The last decode run's counters: (dispatches, submits, barriers), host encode time.
    counts: (u64, u64, u64),
    host_s: f64,
    /// GPU memory held by tensors after the prefill test.
    memory_bytes: u64,
    /// The `ppN` and `tgN` rows (taken into the outcome's table).
    rows: Vec<TestRow>,
}

impl PlainRun {
    fn measure(
        args: &BenchArgs,
        sizes: &Sizes,
        ctx: &GpuContext,
        state: &mut KvState,
        context_len: usize,
    ) -> Result<PlainRun> {
        let (prompt_len, gen, repetitions) = (sizes.prompt_len, sizes.gen, sizes.repetitions);
        let vocab = state.model().spec.config.vocab_size;
        let tokens = bench::bench_tokens(prompt_len.max(context_len), vocab, args.seed);
        let prompt = &tokens[..prompt_len];
        let context = &tokens[..context_len];

        let pp_name = format!("pp{prompt_len}");
        let pp = timed(&pp_name, repetitions, || {
            Ok(pollster::block_on(bench::prefill_run(ctx, state, prompt))?)
        })?;
        let memory_bytes = ctx
            .counters()
            .tensor_bytes
            .load(std::sync::atomic::Ordering::Relaxed);

        let tg_name = if args.depth > 0 {
            format!("tg{gen} @ d{}", args.depth)
        } else {
            format!("tg{gen}")
        };
        let mut greedy = Vec::new();
        let (mut counts, mut host_s) = ((0, 0, 0), 0.0);
        let tg = timed(&tg_name, repetitions, || {
            let run = pollster::block_on(bench::decode_run(ctx, state, context, gen))?;
            counts = (run.dispatches, run.submits, run.barriers);
            host_s = run.host_s;
            greedy = run.greedy;
            Ok(run.tokens_per_s)
        })?;
        let rows = vec![
            TestRow {
                test: pp_name,
                n_prompt: prompt_len,
                n_gen: 0,
                tokens_per_s: pp.clone(),
                vs_tg: None,
            },
            TestRow {
                test: tg_name.clone(),
                n_prompt: args.depth,
                n_gen: gen,
                tokens_per_s: tg.clone(),
                vs_tg: None,
            },
        ];
        Ok(PlainRun {
            tokens,
            prompt_len,
            pp,
            tg,
            tg_name,
            greedy,
            counts,
            host_s,
            memory_bytes,
            rows,
        })
    }

    fn prompt(&self) -> &[u32] {
        &self.tokens[..self.prompt_len]
    }

    fn context(&self, context_len: usize) -> &[u32] {
        &self.tokens[..context_len]
    }

    /// The decode context: what the tg test's forward read before its first token.
    fn decode_context(&self, depth: usize) -> &[u32] {
        self.context(depth.max(1))
    }
}

/// [`bench::forward_ms`]: one forward of `rows` rows at the model's position, unpipelined.
fn forward_ms(ctx: &GpuContext, state: &mut KvState, token: u32, rows: usize) -> Result<f64> {
    Ok(pollster::block_on(bench::forward_ms(
        ctx, state, token, rows,
    ))?)
}

/// The speculative rows: oracle drafts at each acceptance, then the same rounds with the
/// real drafter (its cost paid), fixed and adaptive.
struct SpecOutcome {
    rows: Vec<TestRow>,
    oracle: Vec<serde_json::Value>,
    drafted: Vec<serde_json::Value>,
}

fn speculative(
    args: &BenchArgs,
    sizes: &Sizes,
    ctx: &GpuContext,
    state: &mut KvState,
    plain: &PlainRun,
) -> Result<(SpecOutcome, Option<Assistant>)> {
    let k = args.draft_tokens;
    let spec = SpecRows {
        context: plain.decode_context(args.depth),
        greedy: &plain.greedy,
        k,
        acceptance: &args.acceptance,
        adaptive: args.adaptive_draft,
        repetitions: sizes.repetitions,
        tg: &plain.tg,
        tg_name: &plain.tg_name,
        depth: args.depth,
    };
    let mut out = SpecOutcome {
        rows: Vec::new(),
        oracle: Vec::new(),
        drafted: Vec::new(),
    };
    if k > 0 {
        (out.rows, out.oracle) = spec.oracle(ctx, state)?;
    }
    let shape = match &args.synthetic {
        Some(name) => Some(SyntheticShape::parse(name)?),
        None => bench::assistant_shape(state.model()),
    };
    let mut assistant = match shape {
        Some(shape @ (SyntheticShape::E2b | SyntheticShape::E4b)) if k > 0 => {
            Some(spec::load_assistant(ctx, state, shape, args.seed)?)
        }
        _ => None,
    };
    if let Some(assistant) = assistant.as_mut() {
        let (drafter_rows, json) = spec.drafter(ctx, state, assistant)?;
        out.rows.extend(drafter_rows);
        out.drafted = json;
    }
    Ok((out, assistant))
}

/// `--profile`: GPU timestamps per dispatch of the prompt's forwards, decode and verify
/// forwards, oracle rounds and the pipelined rounds with the drafter.
struct Profile {
    prefill: Option<serde_json::Value>,
    decode: serde_json::Value,
    verify: Option<serde_json::Value>,
    oracle_rounds: Option<serde_json::Value>,
    rounds: Option<serde_json::Value>,
}

impl Profile {
    fn measure(
        args: &BenchArgs,
        ctx: &GpuContext,
        state: &mut KvState,
        plain: &PlainRun,
        assistant: Option<&mut Assistant>,
    ) -> Result<Profile> {
        let k = args.draft_tokens;
        let prompt = plain.prompt();
        let context = plain.decode_context(args.depth);
        state.reset();
        let first = pollster::block_on(state.forward(ctx, prompt, Want::NextToken))?.next[0];
        // The prompt's forwards, where their dispatches fit the profiler's timestamps.
        let prefill = pollster::block_on(ctx.read_profile())
            .ok()
            .map(|t| summarize_profile(&t, prompt.len(), 1));
        let decode = profile_forwards(ctx, state, first, 1, 16)?;
        let verify = if k > 0 {
            Some(profile_forwards(ctx, state, first, k + 1, 8)?)
        } else {
            None
        };
        // The pipelined rounds with the drafter, by phase and shader.
        let decode_us = decode["gpu_us_per_forward"].as_f64().unwrap_or(0.0);
        let rounds = assistant.map(|assistant| {
            spec::profile_rounds(ctx, state, assistant, context, &plain.greedy, k, decode_us)
                .unwrap_or_else(|e| serde_json::json!({ "error": e.to_string() }))
        });
        let oracle_rounds = if k > 0 {
            let tokens = (context, &plain.greedy[..]);
            let o = pollster::block_on(bench::oracle_rounds(ctx, state, tokens, (k, 1.0), true))?;
            Some(oracle_json(&o, plain.tg.mean(), k, true))
        } else {
            None
        };
        Ok(Profile {
            prefill,
            decode,
            verify,
            oracle_rounds,
            rounds,
        })
    }
}

/// Everything one `wgemma bench` run measured, for the table or the JSON report.
struct Outcome {
    model_name: String,
    load_ms: f64,
    prefill_chunk: usize,
    /// Every test's row: the plain tests', then the speculative ones'.
    rows: Vec<TestRow>,
    plain: PlainRun,
    unpipelined_step_ms: f64,
    verify_forward_ms: Option<f64>,
    spec: SpecOutcome,
    profile: Option<Profile>,
    /// `--compare-fusions` and `--compare-norm-kernels` objects, merged into the report.
    diagnostics: Vec<serde_json::Value>,
    device_read_gb_per_s: f64,
    weight_bytes: u64,
    bytes_per_token: u64,
}

impl Outcome {
    fn per_token(&self, n: u64, sizes: &Sizes) -> f64 {
        n as f64 / sizes.gen as f64
    }

    fn roofline_tps(&self) -> f64 {
        self.device_read_gb_per_s * 1e9 / self.bytes_per_token as f64
    }

    fn json(&self, args: &BenchArgs, sizes: &Sizes, ctx: &GpuContext) -> serde_json::Value {
        let (plain, k) = (&self.plain, args.draft_tokens);
        let (dispatches, submits, barriers) = plain.counts;
        let decode_tps = plain.tg.mean();
        let mut report = serde_json::json!({
            "adapter": ctx.describe(),
            "model": args.synthetic.clone().unwrap_or_else(|| args.model.as_ref().expect("a model").display().to_string()),
            "dtype": dtype_label(args),
            "webgpu_limits": args.webgpu_limits,
            "activations": ctx.activations().name(),
            "features": format!("{:?}", ctx.features),
            "repetitions": sizes.repetitions,
            "tests": self.rows.iter().map(TestRow::json).collect::<Vec<_>>(),
            "greedy_tokens": plain.greedy,
            "load_ms": self.load_ms,
            "peak_rss_mb": crate::progress::peak_rss_mb(),
            "prompt_len": sizes.prompt_len,
            "gen": sizes.gen,
            "depth": args.depth,
            "prefill_tokens_per_s": plain.pp.mean(),
            "prefill_ms": sizes.prompt_len as f64 / plain.pp.mean() * 1e3,
            "prefill_chunk": self.prefill_chunk,
            "gemm_ceiling": format!("{:?}", ctx.gemm),
            "gemm": gemm_family(ctx),
            "coop_16x16_f16": ctx.has_coop_16x16_f16(),
            "decode_tokens_per_s": decode_tps,
            "host_ms_per_decode_step": plain.host_s / sizes.gen as f64 * 1e3,
            "dispatches_per_token": self.per_token(dispatches, sizes),
            "barriers_per_token": self.per_token(barriers, sizes),
            "submits_per_token": self.per_token(submits, sizes),
            "unpipelined_decode_ms_per_step": self.unpipelined_step_ms,
            "verify_forward_ms": self.verify_forward_ms,
            "weight_bytes": self.weight_bytes,
            "weight_bytes_read_per_token": self.bytes_per_token,
            "gpu_tensor_bytes": plain.memory_bytes,
            "device_read_gb_per_s": self.device_read_gb_per_s,
            "roofline_tokens_per_s": self.roofline_tps(),
            "roofline_fraction": decode_tps / self.roofline_tps(),
        });
        let oracle = &self.spec.oracle;
        if let Some(o) = oracle.iter().find(|o| o["target_acceptance"] == 1.0) {
            report["oracle_draft_tokens"] = k.into();
            report["oracle_tokens_per_s"] = o["tokens_per_s"].clone();
            report["oracle_speedup"] = o["speedup"].clone();
            report["oracle_rounds"] = o["rounds"].clone();
            report["oracle_acceptance_rate"] = o["acceptance_rate"].clone();
        }
        for c in &self.diagnostics {
            for (key, v) in c.as_object().expect("object") {
                report[key] = v.clone();
            }
        }
        if !oracle.is_empty() {
            report["speculative"] = oracle.clone().into();
            for (i, runs) in self.spec.drafted.iter().enumerate() {
                let entry = &mut report["speculative"][i];
                for (key, v) in runs.as_object().expect("object") {
                    entry[key] = v.clone();
                }
            }
        }
        if let Some(p) = &self.profile {
            report["profile_prefill"] = p.prefill.clone().unwrap_or_default();
            report["profile_decode"] = p.decode.clone();
            report["profile_verify"] = p.verify.clone().unwrap_or_default();
            report["profile_oracle_rounds"] = p.oracle_rounds.clone().unwrap_or_default();
            report["profile_rounds"] = p.rounds.clone().unwrap_or_default();
        }
        report
    }

    fn print(&self, args: &BenchArgs, sizes: &Sizes, ctx: &GpuContext) {
        let (dispatches, _, barriers) = self.plain.counts;
        println!(
            "wgemma bench on {}{}, {} activations: {} timed runs per test after a warm-up",
            ctx.describe(),
            if args.webgpu_limits {
                ", limited to what desktop Chrome grants a page"
            } else {
                ""
            },
            ctx.activations().name(),
            sizes.repetitions,
        );
        println!();
        print_table(
            &self.model_name,
            &dtype_label(args),
            &self.rows,
            &self.plain.tg_name,
        );
        println!();
        println!(
            "load {:.0} ms | prefill chunk {}, {} | {:.1} dispatches, {:.1} barriers \
             per decode token",
            self.load_ms,
            self.prefill_chunk,
            gemm_family(ctx),
            self.per_token(dispatches, sizes),
            self.per_token(barriers, sizes),
        );
        let tiny = args.synthetic.as_deref() == Some("tiny");
        println!(
            "device read {:.1} GB/s{}: decode roofline {:.0} t/s, {:.0}% reached",
            self.device_read_gb_per_s,
            if tiny {
                " (a small buffer: tiny is a smoke test)"
            } else {
                ""
            },
            self.roofline_tps(),
            100.0 * self.plain.tg.mean() / self.roofline_tps()
        );
        if let Some(p) = &self.profile {
            if let Some(prefill) = &p.prefill {
                print_profile("prefill", prefill);
            }
            print_profile("decode", &p.decode);
            if let Some(v) = &p.verify {
                print_profile("verify", v);
            }
            if let Some(r) = &p.oracle_rounds {
                println!("\nprofiled oracle rounds: {r}");
            }
            if let Some(r) = &p.rounds {
                println!("\nprofiled pipelined rounds: {r}");
            }
        }
    }
}

/// The weight format as the bench reports it: `--dtype` as given, else `q4` (a GGUF
/// file: `stored`, its own types).
fn dtype_label(args: &BenchArgs) -> String {
    match (&args.dtype, &args.model) {
        (Some(d), _) => d.clone(),
        (None, Some(m)) if crate::files::is_gguf(m) => "stored".to_string(),
        (None, _) => "q4".to_string(),
    }
}
