//! `runBench`: `wgemma bench` in the wasm package, on whatever WebGPU the JS host offers (a
//! browser, or Dawn under Node: `tools/browser/dawn/`). The same tests as the native
//! bench, through the same library runs ([`wgemma::session::bench`]): `ppN`, `tgN @ dD`,
//! speculative rounds with oracle drafts and, for the E2B / E4B shapes, with the
//! published assistant's shape drafting; the result is the native `--json` report's
//! fields (those a page can measure) plus the decode test's greedy tokens.

mod options;

use crate::web::{bytes, js_error, open_context, parse_options, to_js, wgemma_error};
use js_sys::{Function, Promise};
use options::{BenchOptions, Plan};
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::future_to_promise;
use wgemma::formats::synthetic::SyntheticShape;
use wgemma::gpu::{GpuContext, GpuErrors};
use wgemma::model::assistant::Assistant;
use wgemma::model::state::KvState;
use wgemma::session::bench::drafted::{drafted_runs, DraftedRuns, RunsAtRate};
use wgemma::session::bench::timing::{compare, Samples, TestRow, TimedRuns};
use wgemma::session::bench::{
    assistant_shape, bench_tokens, decode_run, forward_ms, gemm_family, oracle_rounds, prefill_run,
    DecodeRun,
};
use wgemma::session::{load_assistant, load_target, AssistantFrom, LoadHooks, LoadSource};

/// Runs `wgemma bench`'s tests on a synthetic model (`options.synthetic`) or on the model
/// artifact `model` (bytes, a Blob/File or a Response); `onProgress` gets a line per step.
/// Resolves with the report (the native `--json` fields a page can measure, and
/// `greedy_tokens`: the decode test's tokens, for comparison with the native run).
#[wasm_bindgen(js_name = runBench, unchecked_return_type = "Promise<any>")]
pub fn run_bench(
    #[wasm_bindgen(unchecked_param_type = "BenchOptions")] options: JsValue,
    #[wasm_bindgen(unchecked_optional_param_type = "FileSource")] model: JsValue,
    #[wasm_bindgen(unchecked_optional_param_type = "(line: string) => void")] on_progress: Option<
        Function,
    >,
) -> Promise {
    future_to_promise(async move {
        let options: BenchOptions = parse_options(&options, "bench options")?;
        let plan = options.plan().map_err(|m| js_error("WgemmaError", &m))?;
        let artifact =
            match (&plan.shape, model.is_undefined() || model.is_null()) {
                (Some(_), true) => None,
                (None, false) => Some(bytes(&model, "model artifact", false).await?),
                (Some(_), false) => {
                    return Err(js_error(
                        "WgemmaError",
                        "runBench: expected a synthetic shape or a model artifact, found both",
                    ))
                }
                (None, true) => return Err(js_error(
                    "WgemmaError",
                    "runBench: expected options.synthetic (tiny, e2b, e4b) or a model artifact, \
                     found neither",
                )),
            };
        let progress = |line: &str| {
            if let Some(f) = &on_progress {
                // A failing progress callback must not stop the measurement.
                let _ = f.call1(&JsValue::NULL, &line.into());
            }
        };
        let report = bench(&plan, artifact.as_deref(), &progress).await?;
        to_js(&report)
    })
}

/// Opens WebGPU, loads the model and runs every test: the report.
async fn bench(
    plan: &Plan,
    artifact: Option<&[u8]>,
    progress: &dyn Fn(&str),
) -> Result<serde_json::Value, JsValue> {
    let ctx = open_context().await?;
    // In a browser a validation error only reaches the console while the readbacks return
    // stale bytes: any error fails the bench.
    let gpu_errors = GpuErrors::collect(&ctx);
    progress(&format!("bench: loading on {}", ctx.describe()));
    let (mut state, load_ms, model_name) = load(&ctx, plan, artifact)?;
    progress(&format!("bench: loaded in {load_ms:.0} ms"));
    let plain = plain_tests(&ctx, &mut state, plan, progress).await?;
    let next = plain.run.greedy[0];
    let unpipelined_step_ms = forward_ms(&ctx, &mut state, next, 1)
        .await
        .map_err(wgemma_error)?;
    let verify_forward_ms = if plan.k > 0 {
        Some(
            forward_ms(&ctx, &mut state, next, plan.k + 1)
                .await
                .map_err(wgemma_error)?,
        )
    } else {
        None
    };
    let spec = speculative(&ctx, &mut state, plan, &plain, progress).await?;
    let mut report = serde_json::json!({
        "adapter": ctx.describe(),
        "model": model_name,
        "dtype": plan.dtype,
        "webgpu_limits": false,
        "activations": ctx.activations().name(),
        "features": format!("{:?}", ctx.features),
        "repetitions": plan.repetitions,
        "load_ms": load_ms,
        "prompt_len": plan.prompt_len,
        "gen": plan.gen,
        "depth": plan.depth,
        "prefill_tokens_per_s": plain.pp.mean(),
        "prefill_ms": plan.prompt_len as f64 / plain.pp.mean() * 1e3,
        "prefill_chunk": state.model().options.prefill_chunk,
        "gemm_ceiling": format!("{:?}", ctx.gemm),
        "gemm": gemm_family(&ctx),
        "coop_16x16_f16": ctx.has_coop_16x16_f16(),
        "decode_tokens_per_s": plain.tg.mean(),
        "host_ms_per_decode_step": plain.run.host_s / plan.gen as f64 * 1e3,
        "dispatches_per_token": plain.run.dispatches as f64 / plan.gen as f64,
        "barriers_per_token": plain.run.barriers as f64 / plan.gen as f64,
        "submits_per_token": plain.run.submits as f64 / plan.gen as f64,
        "unpipelined_decode_ms_per_step": unpipelined_step_ms,
        "verify_forward_ms": verify_forward_ms,
        "weight_bytes": state.model().weight_bytes(),
        "weight_bytes_read_per_token": state.model().decode_weight_bytes(),
        "gpu_tensor_bytes": plain.memory_bytes,
        "greedy_tokens": plain.run.greedy,
    });
    spec.merge_into(&mut report, plan.k);
    let rows: Vec<serde_json::Value> = plain
        .rows
        .iter()
        .chain(&spec.rows)
        .map(TestRow::json)
        .collect();
    report["tests"] = rows.into();
    gpu_errors.check().map_err(wgemma_error)?;
    Ok(report)
}

/// The target the tests run on, its load time and the report's `model`.
fn load(
    ctx: &GpuContext,
    plan: &Plan,
    artifact: Option<&[u8]>,
) -> Result<(KvState, f64, String), JsValue> {
    let options = plan
        .model_options()
        .map_err(|m| js_error("WgemmaError", &m))?;
    let (source, model_name) = match (plan.shape, artifact) {
        (Some(shape), _) => (
            LoadSource::Synthetic {
                shape,
                seed: plan.seed,
            },
            plan.synthetic.clone().unwrap_or_default(),
        ),
        (None, Some(file)) => (LoadSource::Artifact(file), "artifact".to_string()),
        (None, None) => unreachable!("run_bench checked for a source"),
    };
    let hooks = LoadHooks {
        format: plan.shape.map(|_| plan.format),
        options,
        ..LoadHooks::default()
    };
    let loaded = load_target(ctx, source, hooks).map_err(wgemma_error)?;
    Ok((loaded.state, loaded.load_ms, model_name))
}

/// `ppN` and `tgN @ dD`, and what the speculative rows start from.
struct PlainTests {
    tokens: Vec<u32>,
    pp: Samples,
    tg: Samples,
    tg_name: String,
    /// The last decode run (its greedy tokens and counters).
    run: DecodeRun,
    memory_bytes: u64,
    rows: Vec<TestRow>,
}

async fn plain_tests(
    ctx: &GpuContext,
    state: &mut KvState,
    plan: &Plan,
    progress: &dyn Fn(&str),
) -> Result<PlainTests, JsValue> {
    let context_len = plan.depth.max(1);
    let vocab = state.model().spec.config.vocab_size;
    let tokens = bench_tokens(plan.prompt_len.max(context_len), vocab, plan.seed);
    let pp_name = format!("pp{}", plan.prompt_len);
    progress(&started(&pp_name, plan.repetitions));
    let mut runs = TimedRuns::new(plan.repetitions);
    while runs.wanted() {
        let tps = prefill_run(ctx, state, &tokens[..plan.prompt_len])
            .await
            .map_err(wgemma_error)?;
        runs.record(tps);
    }
    let pp = runs.samples();
    progress(&finished(&pp_name, &pp));
    let memory_bytes = ctx
        .counters()
        .tensor_bytes
        .load(std::sync::atomic::Ordering::Relaxed);
    let tg_name = if plan.depth > 0 {
        format!("tg{} @ d{}", plan.gen, plan.depth)
    } else {
        format!("tg{}", plan.gen)
    };
    progress(&started(&tg_name, plan.repetitions));
    let mut runs = TimedRuns::new(plan.repetitions);
    let mut last = None;
    while runs.wanted() {
        let run = decode_run(ctx, state, &tokens[..context_len], plan.gen)
            .await
            .map_err(wgemma_error)?;
        runs.record(run.tokens_per_s);
        last = Some(run);
    }
    let tg = runs.samples();
    progress(&finished(&tg_name, &tg));
    let rows = vec![
        TestRow {
            test: pp_name,
            n_prompt: plan.prompt_len,
            n_gen: 0,
            tokens_per_s: pp.clone(),
            vs_tg: None,
        },
        TestRow {
            test: tg_name.clone(),
            n_prompt: plan.depth,
            n_gen: plan.gen,
            tokens_per_s: tg.clone(),
            vs_tg: None,
        },
    ];
    Ok(PlainTests {
        tokens,
        pp,
        tg,
        tg_name,
        run: last.expect("at least one decode run"),
        memory_bytes,
        rows,
    })
}

fn started(test: &str, repetitions: usize) -> String {
    format!("bench: {test}: warm-up and {repetitions} timed runs ...")
}

fn finished(test: &str, samples: &Samples) -> String {
    format!("bench: {test}: {} t/s", samples.mean_sd())
}

/// The speculative rows and their JSON.
struct SpecOutcome {
    rows: Vec<TestRow>,
    oracle: Vec<serde_json::Value>,
    drafted: Vec<serde_json::Value>,
}

impl SpecOutcome {
    /// The native report's speculative fields.
    fn merge_into(&self, report: &mut serde_json::Value, k: usize) {
        if let Some(o) = self.oracle.iter().find(|o| o["target_acceptance"] == 1.0) {
            report["oracle_draft_tokens"] = k.into();
            for key in ["tokens_per_s", "speedup", "rounds", "acceptance_rate"] {
                report[format!("oracle_{key}")] = o[key].clone();
            }
        }
        if self.oracle.is_empty() {
            return;
        }
        report["speculative"] = self.oracle.clone().into();
        for (i, runs) in self.drafted.iter().enumerate() {
            let entry = &mut report["speculative"][i];
            for (key, v) in runs.as_object().expect("an object") {
                entry[key] = v.clone();
            }
        }
    }
}

impl PlainTests {
    /// The decode tests' context (what their forward read before the first token).
    fn context(&self, plan: &Plan) -> &[u32] {
        &self.tokens[..plan.depth.max(1)]
    }

    /// A speculative row: its runs, compared with the decode test's.
    fn spec_row(&self, plan: &Plan, test: String, samples: Samples) -> TestRow {
        TestRow {
            test,
            n_prompt: plan.depth,
            n_gen: self.run.greedy.len() - 1,
            vs_tg: Some(compare(&self.tg, &samples)),
            tokens_per_s: samples,
        }
    }
}

/// The oracle rows at each acceptance rate, then (for the E2B / E4B shapes) the rows with
/// the published assistant's shape drafting.
async fn speculative(
    ctx: &GpuContext,
    state: &mut KvState,
    plan: &Plan,
    plain: &PlainTests,
    progress: &dyn Fn(&str),
) -> Result<SpecOutcome, JsValue> {
    let mut out = SpecOutcome {
        rows: Vec::new(),
        oracle: Vec::new(),
        drafted: Vec::new(),
    };
    if plan.k == 0 {
        return Ok(out);
    }
    oracle_rows(ctx, state, (plan, plain), progress, &mut out).await?;
    let shape = plan.shape.or_else(|| assistant_shape(state.model()));
    let Some(shape @ (SyntheticShape::E2b | SyntheticShape::E4b)) = shape else {
        return Ok(out);
    };
    let from = AssistantFrom::Random {
        shape,
        seed: plan.seed.wrapping_add(1),
    };
    let mut assistant: Assistant =
        load_assistant(ctx, state, from, LoadHooks::default()).map_err(wgemma_error)?;
    drafter_rows(
        ctx,
        state,
        &mut assistant,
        (plan, plain),
        progress,
        &mut out,
    )
    .await?;
    Ok(out)
}

async fn oracle_rows(
    ctx: &GpuContext,
    state: &mut KvState,
    (plan, plain): (&Plan, &PlainTests),
    progress: &dyn Fn(&str),
    out: &mut SpecOutcome,
) -> Result<(), JsValue> {
    let (k, decode_tps) = (plan.k, plain.tg.mean());
    let tokens = (plain.context(plan), &plain.run.greedy[..]);
    for &p in &plan.acceptance {
        let test = format!("{} spec k={k} p={p:.2} oracle", plain.tg_name);
        progress(&started(&test, plan.repetitions));
        let mut runs = TimedRuns::new(plan.repetitions);
        let mut last = None;
        while runs.wanted() {
            let o = oracle_rounds(ctx, state, tokens, (k, p), false)
                .await
                .map_err(wgemma_error)?;
            runs.record(o.tokens_per_s);
            last = Some(o);
        }
        let samples = runs.samples();
        progress(&finished(&test, &samples));
        let mut json = last.expect("timed runs").json(decode_tps);
        json["tokens_per_s"] = samples.mean().into();
        json["speedup"] = (samples.mean() / decode_tps).into();
        json["tokens_per_s_runs"] = samples.json();
        out.oracle.push(json);
        out.rows.push(plain.spec_row(plan, test, samples));
    }
    Ok(())
}

/// A warm-up set and `repetitions` timed sets of the drafter's runs at every acceptance
/// rate (as the native bench takes them).
async fn drafter_rows(
    ctx: &GpuContext,
    state: &mut KvState,
    assistant: &mut Assistant,
    (plan, plain): (&Plan, &PlainTests),
    progress: &dyn Fn(&str),
    out: &mut SpecOutcome,
) -> Result<(), JsValue> {
    let (k, decode_tps) = (plan.k, plain.tg.mean());
    let test = format!("{} spec k={k} drafter", plain.tg_name);
    progress(&started(&test, plan.repetitions));
    let mut reps: Vec<Vec<RunsAtRate>> = Vec::with_capacity(plan.repetitions);
    for rep in 0..=plan.repetitions {
        let runs = DraftedRuns {
            prompt: plain.context(plan),
            greedy: &plain.run.greedy,
            k,
            acceptance: &plan.acceptance,
            adaptive: false,
        };
        let at_rates = drafted_runs(ctx, state, assistant, runs)
            .await
            .map_err(wgemma_error)?;
        if rep > 0 {
            reps.push(at_rates);
        }
    }
    for (i, &p) in plan.acceptance.iter().enumerate() {
        let pick = |f: fn(&RunsAtRate) -> f64| Samples {
            values: reps.iter().map(|r| f(&r[i])).collect(),
        };
        let fixed = pick(|r| r.drafted.tokens_per_s);
        let verify_only = pick(|r| r.verify_only.tokens_per_s);
        let mut json = reps[plan.repetitions - 1][i].json(decode_tps);
        json["drafted"]["tokens_per_s"] = fixed.mean().into();
        json["drafted"]["speedup"] = (fixed.mean() / decode_tps).into();
        json["drafted"]["tokens_per_s_runs"] = fixed.json();
        json["verify_only"]["tokens_per_s"] = verify_only.mean().into();
        json["verify_only"]["tokens_per_s_runs"] = verify_only.json();
        let test = format!("{} spec k={k} p={p:.2} drafter", plain.tg_name);
        progress(&finished(&test, &fixed));
        out.rows.push(plain.spec_row(plan, test, fixed));
        out.drafted.push(json);
    }
    Ok(())
}
