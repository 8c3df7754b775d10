//! The bench's tests as one suite, run alike by `wgemma bench` (blocking on it) and the
//! browser's `runBench` (awaiting it): `ppN` and `tgN @ dD`, one forward at a time (a
//! plain step, a verify forward), speculative rounds with oracle drafts at each acceptance
//! rate and, for the E2B / E4B shapes, the same rounds with the published assistant's
//! shape drafting (random weights, its cost paid). Each test is a warm-up and timed runs
//! ([`TimedRuns`]), a table row ([`TestRow`]) and its fields of the report.

use super::drafted::{drafted_runs, DraftedRuns, RunsAtRate};
use super::timing::{compare, Samples, TestRow, TimedRuns};
use super::{
    assistant_shape, bench_tokens, decode_run, forward_ms, gemm_family, oracle_rounds, prefill_run,
    DecodeRun, OP,
};
use crate::error::{Error, Result};
use crate::formats::synthetic::SyntheticShape;
use crate::gpu::GpuContext;
use crate::model::assistant::Assistant;
use crate::model::state::KvState;
use crate::model::target::Model;
use crate::session::loader::load_assistant;
use crate::session::{AssistantFrom, LoadHooks};

/// What the suite runs.
#[derive(Debug, Clone)]
pub struct SuitePlan {
    /// Prompt tokens of `ppN`.
    pub prompt_len: usize,
    /// Generated tokens of `tgN` and the speculative rows (at least 2).
    pub gen: usize,
    /// Tokens in the KV cache when the decode tests start.
    pub depth: usize,
    /// Timed runs of each test after its warm-up (at least 1).
    pub repetitions: usize,
    /// Seed of the prompt's token ids (and of a random assistant's weights, plus one).
    pub seed: u64,
    /// Drafts per speculative round (0: no speculative rows).
    pub k: usize,
    /// Acceptance rates of the oracle and drafter rows.
    pub acceptance: Vec<f64>,
    /// Also the adaptive schedule with the drafter.
    pub adaptive: bool,
    /// The synthetic shape loaded, if any: the drafter rows run for E2B and E4B (a loaded
    /// model of one of those shapes counts as it).
    pub shape: Option<SyntheticShape>,
}

/// `bench: TEST: warm-up and N timed runs ...`, the line before a test's runs.
pub fn started(test: &str, repetitions: usize) -> String {
    format!("bench: {test}: warm-up and {repetitions} timed runs ...")
}

/// `bench: TEST: MEAN ± SD t/s`, the line after them.
pub fn finished(test: &str, samples: &Samples) -> String {
    format!("bench: {test}: {} t/s", samples.mean_sd())
}

/// `ppN` and `tgN @ dD`, and what the later tests start from.
pub struct PlainTests {
    /// Seeded tokens: the prompt is the first `prompt_len`, the decode context the first
    /// `max(depth, 1)`.
    pub tokens: Vec<u32>,
    prompt_len: usize,
    depth: usize,
    pub pp: Samples,
    pub tg: Samples,
    pub tg_name: String,
    /// The last decode run: its greedy tokens (the context forward's first) and counters.
    pub run: DecodeRun,
    /// GPU memory held by tensors after the prefill test.
    pub memory_bytes: u64,
    /// The `ppN` and `tgN` rows.
    pub rows: Vec<TestRow>,
}

impl PlainTests {
    pub fn prompt(&self) -> &[u32] {
        &self.tokens[..self.prompt_len]
    }

    /// The decode tests' context: what their forward read before the first token.
    pub fn context(&self) -> &[u32] {
        &self.tokens[..self.depth.max(1)]
    }

    /// A speculative row: its runs, compared with the decode test's.
    fn spec_row(&self, test: String, samples: Samples) -> TestRow {
        TestRow {
            test,
            n_prompt: self.depth,
            n_gen: self.run.greedy.len() - 1,
            vs_tg: Some(compare(&self.tg, &samples)),
            tokens_per_s: samples,
        }
    }
}

/// The speculative rows and each acceptance rate's JSON.
#[derive(Default)]
pub struct SpecRows {
    pub rows: Vec<TestRow>,
    /// The oracle runs at each rate.
    pub oracle: Vec<serde_json::Value>,
    /// The drafter's runs at each rate (E2B / E4B only).
    pub drafted: Vec<serde_json::Value>,
}

/// Everything the suite measured.
pub struct Suite {
    pub plan: SuitePlan,
    pub plain: PlainTests,
    /// One decode step without pipelining (submitted, waited for).
    pub unpipelined_step_ms: f64,
    /// One verify forward of k + 1 rows, alike.
    pub verify_forward_ms: Option<f64>,
    pub spec: SpecRows,
    /// The assistant the drafter rows ran (for later profiles).
    pub assistant: Option<Assistant>,
}

impl Suite {
    /// Every test's row: the plain tests', then the speculative ones'.
    pub fn rows(&self) -> impl Iterator<Item = &TestRow> {
        self.plain.rows.iter().chain(&self.spec.rows)
    }

    /// The report's fields every bench writes (the CLI's `--json`, the browser's
    /// `runBench`), for the model the suite ran on, loaded in `load_ms`; the caller adds
    /// how it names the model and its weights.
    pub fn report(&self, ctx: &GpuContext, model: &Model, load_ms: f64) -> serde_json::Value {
        let (plan, plain) = (&self.plan, &self.plain);
        let per_token = |n: u64| n as f64 / plan.gen as f64;
        let mut report = serde_json::json!({
            "adapter": ctx.describe(),
            "activations": ctx.activations().name(),
            "features": format!("{:?}", ctx.features),
            "repetitions": plan.repetitions,
            "tests": self.rows().map(TestRow::json).collect::<Vec<_>>(),
            "greedy_tokens": plain.run.greedy,
            "load_ms": load_ms,
            "prompt_len": plan.prompt_len,
            "gen": plan.gen,
            "depth": plan.depth,
            "prefill_tokens_per_s": plain.pp.mean(),
            "prefill_ms": plan.prompt_len as f64 / plain.pp.mean() * 1e3,
            "prefill_chunk": model.options.prefill_chunk,
            "gemm_ceiling": format!("{:?}", ctx.gemm),
            "gemm": gemm_family(ctx),
            "coop_16x16_f16": ctx.has_coop_16x16_f16(),
            "decode_tokens_per_s": plain.tg.mean(),
            "host_ms_per_decode_step": plain.run.host_s / plan.gen as f64 * 1e3,
            "dispatches_per_token": per_token(plain.run.dispatches),
            "barriers_per_token": per_token(plain.run.barriers),
            "submits_per_token": per_token(plain.run.submits),
            "unpipelined_decode_ms_per_step": self.unpipelined_step_ms,
            "verify_forward_ms": self.verify_forward_ms,
            "weight_bytes": model.weight_bytes(),
            "weight_bytes_read_per_token": model.decode_weight_bytes(),
            "gpu_tensor_bytes": plain.memory_bytes,
        });
        self.merge_speculative(&mut report);
        report
    }

    /// The speculative fields: the oracle at acceptance 1.0 (`oracle_*`), and `speculative`,
    /// each rate's oracle runs with its drafter runs merged in.
    fn merge_speculative(&self, report: &mut serde_json::Value) {
        let spec = &self.spec;
        if let Some(o) = spec.oracle.iter().find(|o| o["target_acceptance"] == 1.0) {
            report["oracle_draft_tokens"] = self.plan.k.into();
            for key in ["tokens_per_s", "speedup", "rounds", "acceptance_rate"] {
                report[format!("oracle_{key}")] = o[key].clone();
            }
        }
        if spec.oracle.is_empty() {
            return;
        }
        report["speculative"] = spec.oracle.clone().into();
        for (i, runs) in spec.drafted.iter().enumerate() {
            let entry = &mut report["speculative"][i];
            for (key, v) in runs.as_object().into_iter().flatten() {
                entry[key] = v.clone();
            }
        }
    }
}

/// Runs the suite on `state` (loaded with room for the context, the generated tokens and
/// a verify round); `progress` gets a line before and after each test.
pub async fn run_suite(
    ctx: &GpuContext,
    state: &mut KvState,
    plan: SuitePlan,
    progress: &dyn Fn(&str),
) -> Result<Suite> {
    check(&plan)?;
    let plain = plain_tests(ctx, state, &plan, progress).await?;
    // One forward at a time at the same position: a plain step without pipelining, and a
    // verify forward of k + 1 rows.
    let next = plain.run.greedy[0];
    let unpipelined_step_ms = forward_ms(ctx, state, next, 1).await?;
    let verify_forward_ms = match plan.k {
        0 => None,
        k => Some(forward_ms(ctx, state, next, k + 1).await?),
    };
    let (spec, assistant) = speculative(ctx, state, &plan, &plain, progress).await?;
    Ok(Suite {
        plan,
        plain,
        unpipelined_step_ms,
        verify_forward_ms,
        spec,
        assistant,
    })
}

/// Refuses a plan no run could measure.
fn check(plan: &SuitePlan) -> Result<()> {
    let bad = |what: &str, expected: &str, found: String| {
        Err(Error::invalid(OP, what.to_string(), expected, found))
    };
    if plan.prompt_len == 0 {
        return bad("prompt tokens", "at least 1", "0".into());
    }
    if plan.gen < 2 {
        return bad("generated tokens", "at least 2", plan.gen.to_string());
    }
    if plan.repetitions == 0 {
        return bad("timed runs", "at least 1", "0".into());
    }
    if let Some(p) = plan.acceptance.iter().find(|p| !(0.0..=1.0).contains(*p)) {
        return bad("acceptance rates", "rates within 0..=1", p.to_string());
    }
    Ok(())
}

async fn plain_tests(
    ctx: &GpuContext,
    state: &mut KvState,
    plan: &SuitePlan,
    progress: &dyn Fn(&str),
) -> Result<PlainTests> {
    let (prompt_len, context_len) = (plan.prompt_len, plan.depth.max(1));
    let vocab = state.model().spec.config.vocab_size;
    let tokens = bench_tokens(prompt_len.max(context_len), vocab, plan.seed);
    let pp_name = format!("pp{prompt_len}");
    progress(&started(&pp_name, plan.repetitions));
    let mut runs = TimedRuns::new(plan.repetitions);
    while runs.wanted() {
        runs.record(prefill_run(ctx, state, &tokens[..prompt_len]).await?);
    }
    let pp = runs.samples();
    progress(&finished(&pp_name, &pp));
    let memory_bytes = ctx
        .counters()
        .tensor_bytes
        .load(std::sync::atomic::Ordering::Relaxed);
    let tg_name = match plan.depth {
        0 => format!("tg{}", plan.gen),
        depth => format!("tg{} @ d{depth}", plan.gen),
    };
    progress(&started(&tg_name, plan.repetitions));
    let mut runs = TimedRuns::new(plan.repetitions);
    let mut last = None;
    while runs.wanted() {
        let run = decode_run(ctx, state, &tokens[..context_len], plan.gen).await?;
        runs.record(run.tokens_per_s);
        last = Some(run);
    }
    let tg = runs.samples();
    progress(&finished(&tg_name, &tg));
    let row = |test: &str, n_prompt, n_gen, samples: &Samples| TestRow {
        test: test.to_string(),
        n_prompt,
        n_gen,
        tokens_per_s: samples.clone(),
        vs_tg: None,
    };
    let rows = vec![
        row(&pp_name, prompt_len, 0, &pp),
        row(&tg_name, plan.depth, plan.gen, &tg),
    ];
    Ok(PlainTests {
        tokens,
        prompt_len,
        depth: plan.depth,
        pp,
        tg,
        tg_name,
        run: last.expect("TimedRuns runs at least once"),
        memory_bytes,
        rows,
    })
}

/// The assistant of `shape` with random weights (seeded `seed + 1`), bound to `state`'s
/// caches, in its model's weight format: the published assistant's cost without its
/// weights.
pub fn random_assistant(
    ctx: &GpuContext,
    state: &KvState,
    shape: SyntheticShape,
    seed: u64,
) -> Result<Assistant> {
    let from = AssistantFrom::Random {
        shape,
        seed: seed.wrapping_add(1),
    };
    load_assistant(ctx, state, from, LoadHooks::default())
}

/// The oracle rows at each acceptance rate, then (for the E2B / E4B shapes) the rows with
/// the published assistant's shape drafting; that assistant too.
async fn speculative(
    ctx: &GpuContext,
    state: &mut KvState,
    plan: &SuitePlan,
    plain: &PlainTests,
    progress: &dyn Fn(&str),
) -> Result<(SpecRows, Option<Assistant>)> {
    let mut out = SpecRows::default();
    if plan.k == 0 {
        return Ok((out, None));
    }
    oracle_rows(ctx, state, (plan, plain), progress, &mut out).await?;
    let shape = plan.shape.or_else(|| assistant_shape(state.model()));
    let Some(shape @ (SyntheticShape::E2b | SyntheticShape::E4b)) = shape else {
        return Ok((out, None));
    };
    let mut assistant = random_assistant(ctx, state, shape, plan.seed)?;
    drafter_rows(
        ctx,
        state,
        &mut assistant,
        (plan, plain),
        progress,
        &mut out,
    )
    .await?;
    Ok((out, Some(assistant)))
}

async fn oracle_rows(
    ctx: &GpuContext,
    state: &mut KvState,
    (plan, plain): (&SuitePlan, &PlainTests),
    progress: &dyn Fn(&str),
    out: &mut SpecRows,
) -> Result<()> {
    let (k, decode_tps) = (plan.k, plain.tg.mean());
    let tokens = (plain.context(), &plain.run.greedy[..]);
    for &p in &plan.acceptance {
        let test = format!("{} spec k={k} p={p:.2} oracle", plain.tg_name);
        progress(&started(&test, plan.repetitions));
        let mut runs = TimedRuns::new(plan.repetitions);
        let mut last = None;
        while runs.wanted() {
            let o = oracle_rounds(ctx, state, tokens, (k, p), false).await?;
            runs.record(o.tokens_per_s);
            last = Some(o);
        }
        let samples = runs.samples();
        progress(&finished(&test, &samples));
        let mut json = last.expect("TimedRuns runs at least once").json(decode_tps);
        json["tokens_per_s"] = samples.mean().into();
        json["speedup"] = (samples.mean() / decode_tps).into();
        json["tokens_per_s_runs"] = samples.json();
        out.oracle.push(json);
        out.rows.push(plain.spec_row(test, samples));
    }
    Ok(())
}

/// A warm-up set and `repetitions` timed sets of the drafter's runs at every acceptance
/// rate (fixed k, and the adaptive schedule when the plan asks for it).
async fn drafter_rows(
    ctx: &GpuContext,
    state: &mut KvState,
    assistant: &mut Assistant,
    (plan, plain): (&SuitePlan, &PlainTests),
    progress: &dyn Fn(&str),
    out: &mut SpecRows,
) -> Result<()> {
    let (k, decode_tps) = (plan.k, plain.tg.mean());
    progress(&started(
        &format!("{} spec k={k} drafter", plain.tg_name),
        plan.repetitions,
    ));
    let mut reps: Vec<Vec<RunsAtRate>> = Vec::with_capacity(plan.repetitions);
    for rep in 0..=plan.repetitions {
        let runs = DraftedRuns {
            prompt: plain.context(),
            greedy: &plain.run.greedy,
            k,
            acceptance: &plan.acceptance,
            adaptive: plan.adaptive,
        };
        let at_rates = drafted_runs(ctx, state, assistant, runs).await?;
        // The first set is the warm-up.
        if rep > 0 {
            reps.push(at_rates);
        }
    }
    for (i, &p) in plan.acceptance.iter().enumerate() {
        let pick = |f: &dyn Fn(&RunsAtRate) -> Option<f64>| Samples {
            values: reps.iter().filter_map(|r| f(&r[i])).collect(),
        };
        let fixed = pick(&|r| Some(r.drafted.tokens_per_s));
        let verify_only = pick(&|r| Some(r.verify_only.tokens_per_s));
        let adaptive = pick(&|r| r.adaptive.as_ref().map(|a| a.tokens_per_s));
        let mut json = reps[plan.repetitions - 1][i].json(decode_tps);
        for (key, samples, speedup) in [
            ("drafted", &fixed, true),
            ("verify_only", &verify_only, false),
            ("adaptive", &adaptive, true),
        ] {
            if samples.values.is_empty() {
                continue;
            }
            json[key]["tokens_per_s"] = samples.mean().into();
            if speedup {
                json[key]["speedup"] = (samples.mean() / decode_tps).into();
            }
            json[key]["tokens_per_s_runs"] = samples.json();
        }
        out.drafted.push(json);
        let test = format!("{} spec k={k} p={p:.2} drafter", plain.tg_name);
        progress(&finished(&test, &fixed));
        out.rows.push(plain.spec_row(test, fixed));
        if !adaptive.values.is_empty() {
            let test = format!("{} spec adaptive p={p:.2} drafter", plain.tg_name);
            progress(&finished(&test, &adaptive));
            out.rows.push(plain.spec_row(test, adaptive));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan() -> SuitePlan {
        SuitePlan {
            prompt_len: 8,
            gen: 4,
            depth: 0,
            repetitions: 1,
            seed: 0,
            k: 2,
            acceptance: vec![1.0],
            adaptive: false,
            shape: None,
        }
    }

    #[test]
    fn plans_no_run_could_measure_are_refused_by_name() {
        assert!(check(&plan()).is_ok());
        let cases = [
            (
                SuitePlan {
                    prompt_len: 0,
                    ..plan()
                },
                "prompt tokens",
            ),
            (SuitePlan { gen: 1, ..plan() }, "generated tokens"),
            (
                SuitePlan {
                    repetitions: 0,
                    ..plan()
                },
                "timed runs",
            ),
            (
                SuitePlan {
                    acceptance: vec![1.0, 1.5],
                    ..plan()
                },
                "acceptance rates",
            ),
        ];
        for (bad, what) in cases {
            let e = check(&bad).unwrap_err().to_string();
            assert!(e.contains(what), "{e}");
        }
    }

    #[test]
    fn the_progress_lines_name_the_test_and_its_runs() {
        assert_eq!(
            started("pp64", 3),
            "bench: pp64: warm-up and 3 timed runs ..."
        );
        let samples = Samples {
            values: vec![1.0, 3.0],
        };
        assert_eq!(finished("tg32", &samples), "bench: tg32: 2.00 ± 1.41 t/s");
    }
}
