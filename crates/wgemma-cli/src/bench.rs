//! `wgemma bench`: prefill and decode speed of a model of real shapes (synthetic weights,
//! the same code path as a loaded model) or of a checkpoint, against the device's read
//! bandwidth measured in the same run.

use crate::generate::ModelArgs;
use crate::load::{load_model, load_synthetic, Loaded};
use anyhow::{bail, Context as _, Result};
use clap::Args;
use std::path::PathBuf;
use std::time::Instant;
use wgemma::gpu::{ContextOptions, GemmCeiling, GpuContext};
use wgemma::harness;
use wgemma::model::speculative::MAX_DRAFT_TOKENS;
use wgemma::model::synthetic::SyntheticShape;
use wgemma::model::target::{ModelOptions, Want};
use wgemma::model::weights::WeightFormat;
use wgemma::ops::read_bandwidth::ReadBandwidthCase;

#[derive(Args)]
pub struct BenchArgs {
    /// A synthetic model of real shapes: e2b, e4b, 31b (or tiny).
    #[arg(long, conflicts_with = "model")]
    synthetic: Option<String>,
    /// A Hugging Face checkpoint directory, a model artifact or a llama.cpp GGUF file
    /// instead.
    #[arg(long, value_name = "DIR|FILE")]
    model: Option<PathBuf>,
    /// Weight format: q4, q4g64, q4g128, f16, f32.
    #[arg(long, default_value = "q4")]
    quant: String,
    #[arg(long, default_value_t = 512)]
    prompt_len: usize,
    #[arg(long, default_value_t = 256)]
    gen: usize,
    #[arg(long, default_value_t = 256)]
    prefill_chunk: usize,
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Acceptance rates of the oracle speculative runs (1.0 = the target's own greedy
    /// tokens; lower = each draft replaced by a rejected token with probability 1 - p).
    #[arg(long, value_delimiter = ',', default_value = "1.0")]
    acceptance: Vec<f64>,
    /// Drafts per round of the oracle speculative run (0 = skip it). The runs with the real
    /// drafter (E2B / E4B shapes: the published assistant's, random weights) report, beside
    /// each acceptance rate, `drafted` (pipelined rounds, drafter included), `verify_only`
    /// (the same rounds without the drafter), `round_ms`, `verify_round_ms`,
    /// `drafter_ms_per_round` (their difference) and `verify_ratio` (over a plain step).
    #[arg(long, default_value_t = 2)]
    draft_tokens: usize,
    /// Also run the adaptive schedule with the real drafter at each acceptance rate (k in
    /// 0..=8 from the measured acceptance and costs; plain steps when drafting does not pay).
    #[arg(long)]
    adaptive_draft: bool,
    /// Also time every dispatch of a few decode steps and one verify forward (GPU
    /// timestamps) and report where the time goes, by shader.
    #[arg(long)]
    profile: bool,
    /// Forwards of at most N rows run their RMSNorms as the prologue of the matvec that
    /// consumes them; larger ones (and N = 0: all) as kernels of their own.
    #[arg(long, value_name = "N", default_value_t = wgemma::model::target::DEFAULT_NORM_PROLOGUE_ROWS)]
    norm_prologue_rows: usize,
    /// Also measure, in this run, decode and a verify forward with every norm a kernel
    /// (`norm_kernels_*` fields) and a verify forward with norm prologues
    /// (`norm_prologue_verify_forward_ms`): the fusion's before/after on one load.
    #[arg(long)]
    compare_norm_kernels: bool,
    /// Append new K/V rows with the kv_append kernel instead of inside norm_rope (the
    /// fold's before, for a before/after in one device call).
    #[arg(long)]
    no_fold_kv_append: bool,
    /// Run decode attention as one dispatch (the last workgroup merges the splits) where
    /// the device has coherent storage, instead of partial + combine.
    #[arg(long)]
    fused_attention: bool,
    /// Also measure, in this run, decode with the K/V append kernel and partial + combine
    /// attention (`unfused_*`), with the append folded (`fold_only_*`), and with the append
    /// folded and one-dispatch attention (`fold_and_fused_*`): those fusions' before/after
    /// on one load.
    #[arg(long)]
    compare_fusions: bool,
    /// The fastest GEMM family prefill may use: coop (tensor cores where offered), f16
    /// (f16-tile vector GEMM), f32.
    #[arg(long, value_enum, default_value_t = GemmArg::Coop)]
    gemm: GemmArg,
    #[arg(long)]
    json: bool,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum GemmArg {
    Coop,
    F16,
    F32,
}

impl GemmArg {
    fn ceiling(self) -> GemmCeiling {
        match self {
            GemmArg::Coop => GemmCeiling::CooperativeMatrix,
            GemmArg::F16 => GemmCeiling::F16,
            GemmArg::F32 => GemmCeiling::F32,
        }
    }
}

/// Per-shader totals of profiled forwards.
fn profile_forwards(
    ctx: &GpuContext,
    model: &mut wgemma::model::target::Model,
    first: u32,
    rows: usize,
    forwards: usize,
) -> Result<serde_json::Value> {
    let mut times = Vec::new();
    // Each forward feeds the previous one's token, at the same position.
    let mut token = first;
    for _ in 0..forwards {
        let input = vec![token; rows];
        let want = if rows == 1 {
            Want::NextToken
        } else {
            Want::AllNext
        };
        let base = model.len();
        token = pollster::block_on(model.forward(ctx, &input, want))?.next[0];
        // Every profiled forward runs at the same position (the context stays as timed).
        model.rollback(base)?;
        times.extend(pollster::block_on(ctx.read_profile())?);
    }
    Ok(summarize_profile(&times, rows, forwards))
}

/// Per-shader and per-dispatch totals of `forwards` profiled forwards.
fn summarize_profile(
    times: &[wgemma::gpu::DispatchTime],
    rows: usize,
    forwards: usize,
) -> serde_json::Value {
    use std::collections::BTreeMap;
    let mut by_label: BTreeMap<String, (u64, f64)> = BTreeMap::new();
    let mut total_ns = 0.0;
    for t in times {
        let e = by_label.entry(t.label.clone()).or_default();
        e.0 += 1;
        e.1 += t.nanos;
        total_ns += t.nanos;
    }
    let per = forwards as f64;
    let mut by_shader: BTreeMap<String, (u64, f64)> = BTreeMap::new();
    for (label, (n, ns)) in &by_label {
        let shader = label.split('[').next().unwrap_or(label).to_string();
        let e = by_shader.entry(shader).or_default();
        e.0 += n;
        e.1 += ns;
    }
    let rank = |m: BTreeMap<String, (u64, f64)>, key: &str| {
        let mut v: Vec<_> = m.into_iter().collect();
        v.sort_by(|a, b| b.1 .1.total_cmp(&a.1 .1));
        v.into_iter()
            .map(|(name, (n, ns))| {
                serde_json::json!({
                    key: name,
                    "dispatches_per_forward": n as f64 / per,
                    "us_per_forward": ns / per / 1e3,
                    "us_per_dispatch": ns / n as f64 / 1e3,
                })
            })
            .collect::<Vec<_>>()
    };
    serde_json::json!({
        "rows": rows,
        "forwards": forwards,
        "gpu_us_per_forward": total_ns / per / 1e3,
        "by_shader": rank(by_shader, "shader"),
        "by_dispatch": rank(by_label, "dispatch"),
    })
}

/// Speculative rounds with oracle drafts: the drafts are the target's own greedy tokens
/// from the plain run, each kept with probability `acceptance` and otherwise replaced by
/// a token the target will reject (acceptance 1.0 = every draft accepted), so the cost of
/// a verify round is measured independently of draft quality. The assistant's draft steps
/// are not included.
struct OracleRun {
    target_acceptance: f64,
    tokens_per_s: f64,
    rounds: usize,
    accepted: usize,
    drafted: usize,
    ms_per_round: f64,
    host_ms_per_round: f64,
    /// Inside `Model::forward` (record, submit, wait, read back).
    forward_ms_per_round: f64,
    /// The verify forwards' dispatch times, when profiling.
    profile: Option<serde_json::Value>,
}

impl OracleRun {
    fn json(&self, plain_tps: f64) -> serde_json::Value {
        serde_json::json!({
            "target_acceptance": self.target_acceptance,
            "tokens_per_s": self.tokens_per_s,
            "speedup": self.tokens_per_s / plain_tps,
            "rounds": self.rounds,
            "acceptance_rate": self.accepted as f64 / self.drafted.max(1) as f64,
            "tokens_per_round": (self.accepted + self.rounds) as f64 / self.rounds.max(1) as f64,
            "ms_per_round": self.ms_per_round,
            "host_ms_per_round": self.host_ms_per_round,
            "forward_ms_per_round": self.forward_ms_per_round,
            "profile": self.profile,
        })
    }
}

fn oracle_rounds(
    ctx: &GpuContext,
    model: &mut wgemma::model::target::Model,
    prompt: &[u32],
    greedy: &[u32],
    k: usize,
    acceptance: f64,
    profiling: bool,
) -> Result<OracleRun> {
    let mut oracle =
        crate::bench_spec::FixedRateDrafts::new(acceptance, model.spec.config.vocab_size);
    model.reset();
    let first = pollster::block_on(model.forward(ctx, prompt, Want::NextToken))?.next[0];
    let host0 = model.host_encode_seconds();
    let t0 = Instant::now();
    let mut committed = vec![first];
    let (mut rounds, mut accepted, mut drafted) = (0, 0, 0);
    let mut forward_s = 0.0;
    let mut times = Vec::new();
    pollster::block_on(ctx.read_profile())?;
    while committed.len() < greedy.len() {
        let seed = *committed.last().expect("at least the first token");
        let at = committed.len();
        let drafts = oracle.drafts(&greedy[at..(at + k).min(greedy.len())]);
        let mut input = vec![seed];
        input.extend(&drafts);
        let base = model.len();
        let tf = Instant::now();
        let next = pollster::block_on(model.forward(ctx, &input, Want::AllNext))?.next;
        forward_s += tf.elapsed().as_secs_f64();
        if profiling {
            times.extend(pollster::block_on(ctx.read_profile())?);
        }
        let ok = drafts.iter().zip(&next).take_while(|(d, n)| d == n).count();
        committed.extend(&drafts[..ok]);
        committed.push(next[ok]);
        model.rollback(base + 1 + ok)?;
        rounds += 1;
        accepted += ok;
        drafted += drafts.len();
    }
    if committed[..greedy.len()] != *greedy {
        bail!("speculative rounds diverged from the plain greedy tokens");
    }
    let elapsed = t0.elapsed().as_secs_f64();
    let generated = committed.len() - 1;
    Ok(OracleRun {
        target_acceptance: acceptance,
        tokens_per_s: generated as f64 / elapsed,
        rounds,
        accepted,
        drafted,
        ms_per_round: elapsed * 1e3 / rounds.max(1) as f64,
        host_ms_per_round: (model.host_encode_seconds() - host0) * 1e3 / rounds.max(1) as f64,
        forward_ms_per_round: forward_s * 1e3 / rounds.max(1) as f64,
        profile: profiling.then(|| summarize_profile(&times, k + 1, rounds)),
    })
}

pub fn run(args: BenchArgs) -> Result<()> {
    if args.prompt_len == 0 || args.gen < 2 {
        bail!("--prompt-len must be >= 1 and --gen >= 2");
    }
    if args.prefill_chunk == 0 {
        bail!("--prefill-chunk: expected at least 1 row, found 0");
    }
    // The KV cache holds the prompt, the generated tokens and a verify round's rows; the
    // load checks that context against the device and the host before allocating it.
    let max_context = args
        .prompt_len
        .checked_add(args.gen)
        .and_then(|n| n.checked_add(16))
        .with_context(|| {
            format!(
                "--prompt-len {} + --gen {}: expected a total that fits a KV cache, found one \
                 past 2^64",
                args.prompt_len, args.gen
            )
        })?;
    if let Some(p) = args.acceptance.iter().find(|p| !(0.0..=1.0).contains(*p)) {
        bail!("--acceptance rates must be within 0..=1, found {p}");
    }
    let mut ctx = GpuContext::new_blocking(ContextOptions {
        gemm: args.gemm.ceiling(),
        ..Default::default()
    })?;
    if args.draft_tokens > 8 {
        bail!("--draft-tokens must be 0..=8, found {}", args.draft_tokens);
    }
    let options = ModelOptions {
        format: WeightFormat::parse(&args.quant)?,
        max_context,
        prefill_chunk: args.prefill_chunk.min(args.prompt_len),
        max_verify_rows: if args.adaptive_draft {
            MAX_DRAFT_TOKENS + 1
        } else {
            args.draft_tokens + 1
        },
        sequences: 1,
    };
    let prefill_chunk = options.prefill_chunk;
    let Loaded {
        mut model, load_ms, ..
    } = match (&args.synthetic, &args.model) {
        (Some(shape), None) => {
            load_synthetic(&ctx, SyntheticShape::parse(shape)?, args.seed, options)?
        }
        (None, Some(dir)) => load_model(
            &ctx,
            dir,
            ModelArgs {
                model: dir.clone(),
                dtype: Some(args.quant.clone()),
                context: options.max_context,
                prefill_chunk: Some(options.prefill_chunk),
                no_verify: false,
                allow_extra_tensors: false,
            }
            .request()?,
        )?,
        _ => bail!("give --synthetic SHAPE or --model DIR|FILE"),
    };
    model.set_norm_prologue_rows(args.norm_prologue_rows);
    model.set_fold_kv_append(!args.no_fold_kv_append);
    model.set_fused_attention(args.fused_attention);
    let vocab = model.spec.config.vocab_size as u64;
    let prompt: Vec<u32> = (0..args.prompt_len as u64)
        .map(|i| ((i.wrapping_mul(2654435761) ^ args.seed) % vocab) as u32)
        .collect();

    // Warm up: builds every plan (pipelines, bind groups) the timed run uses.
    let mut next = pollster::block_on(model.forward(&ctx, &prompt, Want::NextToken))?.next[0];
    for _ in 0..2 {
        next = pollster::block_on(model.forward(&ctx, &[next], Want::NextToken))?.next[0];
    }
    model.reset();
    let memory_bytes = ctx
        .counters()
        .tensor_bytes
        .load(std::sync::atomic::Ordering::Relaxed);

    let t0 = Instant::now();
    let next = pollster::block_on(model.forward(&ctx, &prompt, Want::NextToken))?.next[0];
    let prefill_s = t0.elapsed().as_secs_f64();

    let (d0, s0, _) = ctx.counters().snapshot();
    let b0 = ctx.counters().barriers();
    let host0 = model.host_encode_seconds();
    let t1 = Instant::now();
    let steps = args.gen - 1;
    let mut greedy = vec![next];
    greedy.extend(pollster::block_on(model.decode_greedy(
        &ctx,
        next,
        steps,
        &mut |_| true,
    ))?);
    let decode_s = t1.elapsed().as_secs_f64();
    let (d1, s1, _) = ctx.counters().snapshot();
    let b1 = ctx.counters().barriers();
    let host_s = model.host_encode_seconds() - host0;

    // One forward at a time (submit, wait, read), at the same position: the cost of a
    // plain step without pipelining, and of a verify forward of k + 1 rows.
    let mut forward_ms = |rows: usize| -> Result<f64> {
        let tokens = vec![next; rows];
        let want = if rows == 1 {
            Want::NextToken
        } else {
            Want::AllNext
        };
        let base = model.len();
        pollster::block_on(model.forward(&ctx, &tokens, want))?;
        model.rollback(base)?;
        let t = Instant::now();
        for _ in 0..32 {
            pollster::block_on(model.forward(&ctx, &tokens, want))?;
            model.rollback(base)?;
        }
        Ok(t.elapsed().as_secs_f64() * 1e3 / 32.0)
    };
    let unpipelined_step_ms = forward_ms(1)?;
    let verify_forward_ms = if args.draft_tokens > 0 {
        Some(forward_ms(args.draft_tokens + 1)?)
    } else {
        None
    };

    let mut oracle = Vec::new();
    if args.draft_tokens > 0 {
        // Warm the verify plan, then measure each acceptance rate.
        oracle_rounds(
            &ctx,
            &mut model,
            &prompt,
            &greedy[..greedy.len().min(8)],
            args.draft_tokens,
            1.0,
            false,
        )?;
        for &p in &args.acceptance {
            oracle.push(oracle_rounds(
                &ctx,
                &mut model,
                &prompt,
                &greedy,
                args.draft_tokens,
                p,
                false,
            )?);
        }
    }

    // The same rounds with the real drafter (its cost paid), fixed and adaptive.
    let shape = match &args.synthetic {
        Some(name) => Some(SyntheticShape::parse(name)?),
        None => crate::bench_spec::assistant_shape(&model),
    };
    let mut assistant = match shape {
        Some(shape @ (SyntheticShape::E2b | SyntheticShape::E4b)) if args.draft_tokens > 0 => Some(
            crate::bench_spec::load_assistant(&ctx, &model, shape, args.seed)?,
        ),
        _ => None,
    };
    let drafted = match assistant.as_mut() {
        Some(assistant) => crate::bench_spec::drafted_runs(
            &ctx,
            &mut model,
            assistant,
            crate::bench_spec::DraftedRuns {
                prompt: &prompt,
                greedy: &greedy,
                k: args.draft_tokens,
                acceptance: &args.acceptance,
                adaptive: args.adaptive_draft,
            },
        )?,
        None => Vec::new(),
    };

    let profile = if args.profile {
        ctx.enable_profiling()?;
        model.reset();
        let first = pollster::block_on(model.forward(&ctx, &prompt, Want::NextToken))?.next[0];
        // The prompt's forwards, where their dispatches fit the profiler's timestamps.
        let prefill = pollster::block_on(ctx.read_profile())
            .ok()
            .map(|t| summarize_profile(&t, prompt.len(), 1));
        let decode = profile_forwards(&ctx, &mut model, first, 1, 16)?;
        let verify = if args.draft_tokens > 0 {
            Some(profile_forwards(
                &ctx,
                &mut model,
                first,
                args.draft_tokens + 1,
                8,
            )?)
        } else {
            None
        };
        // The pipelined rounds with the drafter, by phase and shader.
        let round_profile = match assistant.as_mut() {
            Some(assistant) => Some(
                crate::bench_spec::profile_rounds(
                    &ctx,
                    &mut model,
                    assistant,
                    &prompt,
                    &greedy,
                    args.draft_tokens,
                    decode["gpu_us_per_forward"].as_f64().unwrap_or(0.0),
                )
                .unwrap_or_else(|e| serde_json::json!({ "error": e.to_string() })),
            ),
            None => None,
        };
        let rounds = if args.draft_tokens > 0 {
            let o = oracle_rounds(
                &ctx,
                &mut model,
                &prompt,
                &greedy,
                args.draft_tokens,
                1.0,
                true,
            )?;
            Some(o.json(steps as f64 / decode_s))
        } else {
            None
        };
        Some((decode, verify, rounds, prefill, round_profile))
    } else {
        None
    };

    let fusions = if args.compare_fusions {
        Some(compare_fusions(&ctx, &mut model, &prompt, steps)?)
    } else {
        None
    };
    let comparison = if args.compare_norm_kernels {
        Some(compare_norm_kernels(
            &ctx,
            &mut model,
            &prompt,
            steps,
            args.draft_tokens,
        )?)
    } else {
        None
    };

    let bandwidth = harness::perf(&ctx, &ReadBandwidthCase { words: 64 << 20 }, 50)?;
    let bytes_per_token = model.decode_weight_bytes();
    let decode_tps = steps as f64 / decode_s;
    let roofline_tps = bandwidth.gb_per_s * 1e9 / bytes_per_token as f64;
    let mut report = serde_json::json!({
        "adapter": ctx.describe(),
        "model": args.synthetic.clone().unwrap_or_else(|| args.model.as_ref().unwrap().display().to_string()),
        "quant": args.quant,
        "load_ms": load_ms,
        "peak_rss_mb": crate::artifact_file::peak_rss_mb(),
        "prompt_len": args.prompt_len,
        "gen": args.gen,
        "prefill_tokens_per_s": args.prompt_len as f64 / prefill_s,
        "prefill_ms": prefill_s * 1e3,
        "prefill_chunk": prefill_chunk,
        "gemm_ceiling": format!("{:?}", ctx.gemm),
        "coop_16x16_f16": ctx.has_coop_16x16_f16(),
        "decode_tokens_per_s": decode_tps,
        "host_ms_per_decode_step": host_s / steps as f64 * 1e3,
        "dispatches_per_token": (d1 - d0) as f64 / steps as f64,
        "barriers_per_token": (b1 - b0) as f64 / steps as f64,
        "submits_per_token": (s1 - s0) as f64 / steps as f64,
        "unpipelined_decode_ms_per_step": unpipelined_step_ms,
        "verify_forward_ms": verify_forward_ms,
        "weight_bytes": model.weight_bytes(),
        "weight_bytes_read_per_token": bytes_per_token,
        "gpu_tensor_bytes": memory_bytes,
        "device_read_gb_per_s": bandwidth.gb_per_s,
        "roofline_tokens_per_s": roofline_tps,
        "roofline_fraction": decode_tps / roofline_tps,
    });
    if let Some(o) = oracle.iter().find(|o| o.target_acceptance == 1.0) {
        report["oracle_draft_tokens"] = args.draft_tokens.into();
        report["oracle_tokens_per_s"] = o.tokens_per_s.into();
        report["oracle_speedup"] = (o.tokens_per_s / decode_tps).into();
        report["oracle_rounds"] = o.rounds.into();
        report["oracle_acceptance_rate"] = (o.accepted as f64 / o.drafted.max(1) as f64).into();
    }
    for c in fusions.iter().chain(&comparison) {
        for (k, v) in c.as_object().expect("object") {
            report[k] = v.clone();
        }
    }
    if !oracle.is_empty() {
        report["speculative"] = oracle.iter().map(|o| o.json(decode_tps)).collect();
        for (i, runs) in drafted.iter().enumerate() {
            let entry = &mut report["speculative"][i];
            for (k, v) in runs.json(decode_tps).as_object().expect("object") {
                entry[k] = v.clone();
            }
        }
    }
    if args.json {
        if let Some((decode, verify, rounds, prefill, round_profile)) = profile {
            report["profile_prefill"] = prefill.unwrap_or_default();
            report["profile_decode"] = decode;
            report["profile_verify"] = verify.unwrap_or_default();
            report["profile_oracle_rounds"] = rounds.unwrap_or_default();
            report["profile_rounds"] = round_profile.unwrap_or_default();
        }
        println!("{report}");
    } else {
        for (k, v) in report.as_object().expect("object") {
            println!("{k:<28} {v}");
        }
        if let Some((decode, verify, rounds, prefill, round_profile)) = profile {
            if let Some(p) = prefill {
                print_profile("prefill", &p);
            }
            print_profile("decode", &decode);
            if let Some(v) = verify {
                print_profile("verify", &v);
            }
            if let Some(r) = rounds {
                println!("\nprofiled oracle rounds: {r}");
            }
            if let Some(r) = round_profile {
                println!("\nprofiled pipelined rounds: {r}");
            }
        }
    }
    Ok(())
}

/// Decode tokens/s, dispatches per token and a verify forward with every RMSNorm a kernel,
/// and a verify forward with norm prologues, on the loaded model (then back to the default).
/// Greedy decode of `steps` tokens after `prompt` with the model's current plan settings:
/// (tokens/s, dispatches per token, barriers per token).
fn measure_decode(
    ctx: &GpuContext,
    model: &mut wgemma::model::target::Model,
    prompt: &[u32],
    steps: usize,
) -> Result<(f64, f64, f64)> {
    model.reset();
    let next = pollster::block_on(model.forward(ctx, prompt, Want::NextToken))?.next[0];
    // Warm-up: builds the decode plan.
    pollster::block_on(model.decode_greedy(ctx, next, 2, &mut |_| true))?;
    model.reset();
    let next = pollster::block_on(model.forward(ctx, prompt, Want::NextToken))?.next[0];
    let (d0, _, _) = ctx.counters().snapshot();
    let b0 = ctx.counters().barriers();
    let t = Instant::now();
    pollster::block_on(model.decode_greedy(ctx, next, steps, &mut |_| true))?;
    let seconds = t.elapsed().as_secs_f64();
    let (d1, _, _) = ctx.counters().snapshot();
    let b1 = ctx.counters().barriers();
    let per = |n: u64| n as f64 / steps as f64;
    Ok((steps as f64 / seconds, per(d1 - d0), per(b1 - b0)))
}

/// `--compare-fusions`: see its help.
fn compare_fusions(
    ctx: &GpuContext,
    model: &mut wgemma::model::target::Model,
    prompt: &[u32],
    steps: usize,
) -> Result<serde_json::Value> {
    let (fold, fused) = (model.fold_kv_append(), model.fused_attention());
    let mut out = serde_json::json!({});
    for (name, fold_now, fused_now) in [
        ("unfused", false, false),
        ("fold_only", true, false),
        ("fold_and_fused", true, true),
    ] {
        model.set_fold_kv_append(fold_now);
        model.set_fused_attention(fused_now);
        let (tps, dispatches, barriers) = measure_decode(ctx, model, prompt, steps)?;
        out[format!("{name}_decode_tokens_per_s")] = tps.into();
        out[format!("{name}_dispatches_per_token")] = dispatches.into();
        out[format!("{name}_barriers_per_token")] = barriers.into();
    }
    model.set_fold_kv_append(fold);
    model.set_fused_attention(fused);
    model.reset();
    Ok(out)
}

fn compare_norm_kernels(
    ctx: &GpuContext,
    model: &mut wgemma::model::target::Model,
    prompt: &[u32],
    steps: usize,
    draft_tokens: usize,
) -> Result<serde_json::Value> {
    let time_forward = |model: &mut wgemma::model::target::Model, rows: usize| -> Result<f64> {
        let tokens = vec![1u32; rows];
        let base = model.len();
        pollster::block_on(model.forward(ctx, &tokens, Want::AllNext))?;
        model.rollback(base)?;
        let t = Instant::now();
        for _ in 0..32 {
            pollster::block_on(model.forward(ctx, &tokens, Want::AllNext))?;
            model.rollback(base)?;
        }
        Ok(t.elapsed().as_secs_f64() * 1e3 / 32.0)
    };
    let default_rows = model.norm_prologue_rows();
    model.set_norm_prologue_rows(0);
    let (tps, dispatches, barriers) = measure_decode(ctx, model, prompt, steps)?;
    let mut out = serde_json::json!({
        "norm_kernels_decode_tokens_per_s": tps,
        "norm_kernels_dispatches_per_token": dispatches,
        "norm_kernels_barriers_per_token": barriers,
    });
    if draft_tokens > 0 {
        out["norm_kernels_verify_forward_ms"] = time_forward(model, draft_tokens + 1)?.into();
        model.set_norm_prologue_rows(draft_tokens + 1);
        out["norm_prologue_verify_forward_ms"] = time_forward(model, draft_tokens + 1)?.into();
    }
    model.set_norm_prologue_rows(default_rows);
    model.reset();
    Ok(out)
}

fn print_profile(what: &str, p: &serde_json::Value) {
    println!(
        "\nprofile: {what} forward of {} rows, GPU {:.1} us per forward (mean of {})",
        p["rows"],
        p["gpu_us_per_forward"].as_f64().unwrap_or(0.0),
        p["forwards"]
    );
    println!(
        "{:<28} {:>10} {:>12} {:>12}",
        "shader", "dispatches", "us/forward", "us/dispatch"
    );
    for row in p["by_shader"].as_array().into_iter().flatten() {
        println!(
            "{:<28} {:>10.1} {:>12.1} {:>12.2}",
            row["shader"].as_str().unwrap_or(""),
            row["dispatches_per_forward"].as_f64().unwrap_or(0.0),
            row["us_per_forward"].as_f64().unwrap_or(0.0),
            row["us_per_dispatch"].as_f64().unwrap_or(0.0)
        );
    }
}
