//! `runBench`: `wgemma bench` in the wasm package, on whatever WebGPU the JS host offers (a
//! browser, or Dawn under Node: `tools/browser/dawn/`). The same tests as the native
//! bench, through the same library runs ([`wgemma::session::bench`]): `ppN`, `tgN @ dD`,
//! speculative rounds with oracle drafts and, for the E2B / E4B shapes, with the
//! published assistant's shape drafting; the result is the native `--json` report's
//! fields (those a page can measure) plus the decode test's greedy tokens.

use crate::web::{bytes, js_error, open_context, parse_options, to_js, wgemma_error};
use js_sys::{Function, Promise};
use serde::Deserialize;
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::future_to_promise;
use wgemma::formats::synthetic::SyntheticShape;
use wgemma::gpu::{GpuContext, GpuErrors};
use wgemma::session::bench::drafted::{drafted_runs, DraftedRuns, RunsAtRate};
use wgemma::session::bench::timing::{compare, Samples, TestRow, TimedRuns};
use wgemma::session::bench::{
    assistant_shape, bench_tokens, decode_run, forward_ms, gemm_family, oracle_rounds, prefill_run,
    DecodeRun,
};
use wgemma::session::engine::{Assistant, KvState, ModelOptions, WeightFormat, MAX_DRAFT_TOKENS};
use wgemma::session::{load_assistant, load_target, AssistantFrom, LoadHooks, LoadSource};

#[wasm_bindgen(typescript_custom_section)]
const TS_BENCH: &str = r#"
/** What runBench measures (the native `wgemma bench` flags, camelCase). */
export interface BenchOptions {
  /** A synthetic model of real shapes: tiny, e2b or e4b (random weights); else pass a model artifact. */
  synthetic?: string;
  /** Seed of the synthetic weights and of the prompt's token ids (default 0). */
  seed?: number;
  /** Weights of a synthetic model: q4 (default), q4g64, q4g128, f16, f32. */
  dtype?: string;
  /** Prompt tokens of ppN (default 512; 64 for tiny). */
  nPrompt?: number;
  /** Generated tokens of tgN and the speculative rows (default 128; 32 for tiny). */
  nGen?: number;
  /** Tokens in the KV cache when the decode tests start (default 0). */
  nDepth?: number;
  /** Timed runs per test after the warm-up (default 5; 3 for tiny). */
  repetitions?: number;
  /** Rows per prefill forward (default 256). */
  prefillChunk?: number;
  /** Drafts per round of the speculative rows (default 2; 0: none). */
  draftTokens?: number;
  /** Acceptance rates of the oracle and drafter rows (default [1.0]). */
  acceptance?: number[];
}
"#;

/// The CLI's default rows per prefill forward.
const DEFAULT_PREFILL_CHUNK: usize = 256;

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
struct BenchOptions {
    synthetic: Option<String>,
    seed: u64,
    dtype: Option<String>,
    n_prompt: Option<usize>,
    n_gen: Option<usize>,
    n_depth: usize,
    repetitions: Option<usize>,
    prefill_chunk: Option<usize>,
    draft_tokens: Option<usize>,
    acceptance: Option<Vec<f64>>,
}

/// The options with every default filled in and checked.
struct Plan {
    /// The synthetic shape as given (the report's `model`).
    synthetic: Option<String>,
    shape: Option<SyntheticShape>,
    seed: u64,
    dtype: String,
    format: WeightFormat,
    prompt_len: usize,
    gen: usize,
    depth: usize,
    repetitions: usize,
    prefill_chunk: usize,
    k: usize,
    acceptance: Vec<f64>,
}

impl BenchOptions {
    fn plan(self) -> Result<Plan, String> {
        let shape = self
            .synthetic
            .as_deref()
            .map(SyntheticShape::parse)
            .transpose()
            .map_err(|e| e.to_string())?;
        let tiny = matches!(shape, Some(SyntheticShape::Tiny));
        let dtype = self.dtype.unwrap_or_else(|| "q4".to_string());
        let plan = Plan {
            synthetic: self.synthetic,
            shape,
            seed: self.seed,
            format: WeightFormat::parse(&dtype).map_err(|e| e.to_string())?,
            dtype,
            prompt_len: self.n_prompt.unwrap_or(if tiny { 64 } else { 512 }),
            gen: self.n_gen.unwrap_or(if tiny { 32 } else { 128 }),
            depth: self.n_depth,
            repetitions: self.repetitions.unwrap_or(if tiny { 3 } else { 5 }),
            prefill_chunk: self.prefill_chunk.unwrap_or(DEFAULT_PREFILL_CHUNK),
            k: self.draft_tokens.unwrap_or(2),
            acceptance: self.acceptance.unwrap_or_else(|| vec![1.0]),
        };
        let checks = [
            (
                plan.prompt_len == 0,
                "nPrompt: expected at least 1 token, found 0".into(),
            ),
            (
                plan.gen < 2,
                format!("nGen: expected at least 2 tokens, found {}", plan.gen),
            ),
            (
                plan.repetitions == 0,
                "repetitions: expected at least 1 timed run, found 0".into(),
            ),
            (
                plan.prefill_chunk == 0,
                "prefillChunk: expected at least 1 row, found 0".into(),
            ),
            (
                plan.k > MAX_DRAFT_TOKENS,
                format!(
                    "draftTokens: expected 0..={MAX_DRAFT_TOKENS}, found {}",
                    plan.k
                ),
            ),
        ];
        if let Some((_, message)) = checks.into_iter().find(|(bad, _)| *bad) {
            return Err(message);
        }
        if let Some(p) = plan.acceptance.iter().find(|p| !(0.0..=1.0).contains(*p)) {
            return Err(format!(
                "acceptance: expected rates within 0..=1, found {p}"
            ));
        }
        Ok(plan)
    }
}

impl Plan {
    /// The KV cache, prefill chunk and verify rows the tests need (as the native bench).
    fn model_options(&self) -> Result<ModelOptions, String> {
        let plan = self;
        let context_len = plan.depth.max(1);
        let max_context = context_len
            .checked_add(plan.gen)
            .and_then(|n| n.checked_add(MAX_DRAFT_TOKENS + 1))
            .map(|n| n.max(plan.prompt_len))
            .and_then(|n| n.checked_add(16))
            .ok_or_else(|| {
                format!(
                    "nPrompt {}, nDepth {} and nGen {}: expected a total that fits a KV cache",
                    plan.prompt_len, plan.depth, plan.gen
                )
            })?;
        Ok(ModelOptions {
            format: plan.format,
            max_context,
            prefill_chunk: plan
                .prefill_chunk
                .clamp(1, plan.prompt_len.max(context_len)),
            max_verify_rows: plan.k + 1,
            sequences: 1,
        })
    }
}

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

/// The loaded target and the assistant its drafter rows use (if its shape has one).
async fn bench(
    plan: &Plan,
    artifact: Option<&[u8]>,
    progress: &dyn Fn(&str),
) -> Result<serde_json::Value, JsValue> {
    let ctx = open_context().await?;
    // In a browser a validation error only reaches the console while the readbacks return
    // stale bytes: any error fails the bench.
    let gpu_errors = GpuErrors::collect(&ctx);
    let options = plan
        .model_options()
        .map_err(|m| js_error("WgemmaError", &m))?;
    let prefill_chunk = options.prefill_chunk;
    progress(&format!("bench: loading on {}", ctx.describe()));
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
    let loaded = load_target(&ctx, source, hooks).map_err(wgemma_error)?;
    let (mut state, load_ms) = (loaded.state, loaded.load_ms);
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
        "features": format!("{:?}", ctx.features),
        "repetitions": plan.repetitions,
        "load_ms": load_ms,
        "prompt_len": plan.prompt_len,
        "gen": plan.gen,
        "depth": plan.depth,
        "prefill_tokens_per_s": plain.pp.mean(),
        "prefill_ms": plan.prompt_len as f64 / plain.pp.mean() * 1e3,
        "prefill_chunk": prefill_chunk,
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
    let (k, decode_tps) = (plan.k, plain.tg.mean());
    let context = &plain.tokens[..plan.depth.max(1)];
    let greedy = &plain.run.greedy;
    let row = |test: String, samples: Samples| TestRow {
        test,
        n_prompt: plan.depth,
        n_gen: greedy.len() - 1,
        vs_tg: Some(compare(&plain.tg, &samples)),
        tokens_per_s: samples,
    };
    for &p in &plan.acceptance {
        let test = format!("{} spec k={k} p={p:.2} oracle", plain.tg_name);
        progress(&started(&test, plan.repetitions));
        let mut runs = TimedRuns::new(plan.repetitions);
        let mut last = None;
        while runs.wanted() {
            let o = oracle_rounds(ctx, state, (context, greedy), (k, p), false)
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
        out.rows.push(row(test, samples));
    }
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
    let test = format!("{} spec k={k} drafter", plain.tg_name);
    progress(&format!(
        "bench: {test}: warm-up and {} timed runs ...",
        plan.repetitions
    ));
    let mut reps: Vec<Vec<RunsAtRate>> = Vec::with_capacity(plan.repetitions);
    for rep in 0..=plan.repetitions {
        let runs = DraftedRuns {
            prompt: context,
            greedy,
            k,
            acceptance: &plan.acceptance,
            adaptive: false,
        };
        let at_rates = drafted_runs(ctx, state, &mut assistant, runs)
            .await
            .map_err(wgemma_error)?;
        // The first set warms the assistant's pipelines up.
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
        out.rows.push(row(test, fixed));
        out.drafted.push(json);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(json: &str) -> Result<Plan, String> {
        serde_json::from_str::<BenchOptions>(json)
            .map_err(|e| e.to_string())?
            .plan()
    }

    #[test]
    fn defaults_are_the_native_bench_ones() {
        let p = plan(r#"{"synthetic": "e2b"}"#).unwrap();
        assert_eq!(
            (p.prompt_len, p.gen, p.depth, p.repetitions),
            (512, 128, 0, 5)
        );
        assert_eq!(
            (p.k, p.prefill_chunk, p.acceptance.clone()),
            (2, 256, vec![1.0])
        );
        let p = plan(r#"{"synthetic": "tiny", "nDepth": 3}"#).unwrap();
        assert_eq!(
            (p.prompt_len, p.gen, p.depth, p.repetitions),
            (64, 32, 3, 3)
        );
        let options = p.model_options().unwrap();
        // The decode context, the generated tokens, a verify round and a margin.
        assert_eq!(options.max_context, 64 + 16);
        assert_eq!((options.max_verify_rows, options.prefill_chunk), (3, 64));
    }

    #[test]
    fn bad_options_say_what_was_expected() {
        let cases = [
            (r#"{"synthetic": "e3b"}"#, "tiny, e2b, e4b or 31b"),
            (
                r#"{"synthetic": "tiny", "nGen": 1}"#,
                "nGen: expected at least 2 tokens, found 1",
            ),
            (
                r#"{"synthetic": "tiny", "nPrompt": 0}"#,
                "nPrompt: expected at least 1 token",
            ),
            (
                r#"{"synthetic": "tiny", "repetitions": 0}"#,
                "repetitions: expected at least 1",
            ),
            (
                r#"{"synthetic": "tiny", "draftTokens": 9}"#,
                "draftTokens: expected 0..=8, found 9",
            ),
            (
                r#"{"synthetic": "tiny", "acceptance": [1.5]}"#,
                "within 0..=1, found 1.5",
            ),
            (r#"{"synthetic": "tiny", "dtype": "q3"}"#, "q3"),
            (
                r#"{"synthetic": "tiny", "nPromt": 5}"#,
                "unknown field `nPromt`",
            ),
        ];
        for (json, want) in cases {
            let e = plan(json)
                .err()
                .unwrap_or_else(|| panic!("{json}: accepted"));
            assert!(e.contains(want), "{json}: {e}");
        }
    }
}
