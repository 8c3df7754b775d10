//! The speculative tests: oracle drafts at each acceptance rate, then the same rounds with
//! the real drafter (its cost paid), fixed and adaptive, each a row compared with the plain
//! decode test. The drafter's rounds are the library's
//! ([`wgemma::session::bench::drafted`], which the browser package's bench runs too): the
//! assistant at the published E2B / E4B assistant shape (random weights) drafts every
//! round, while the verify reads the target's own greedy tokens as drafts at the chosen
//! acceptance (an oracle).

use super::args::{BenchArgs, Sizes};
use super::plain::PlainRun;
use super::table::{samples_at, timed, TestRow};
use anyhow::{bail, Result};
use wgemma::formats::synthetic::SyntheticShape;
use wgemma::gpu::GpuContext;
use wgemma::model::assistant::Assistant;
use wgemma::model::state::KvState;
use wgemma::session::bench::drafted::{drafted_runs, DraftedRuns};
use wgemma::session::bench::profile::summarize_profile;
use wgemma::session::bench::timing::{compare, Samples};
use wgemma::session::bench::{self, OracleRun};
use wgemma::session::{AssistantFrom, LoadHooks};

/// The assistant of `shape` with random weights, bound to `state`'s caches, in its model's
/// weight format.
pub(super) fn load_assistant(
    ctx: &GpuContext,
    state: &KvState,
    shape: SyntheticShape,
    seed: u64,
) -> Result<Assistant> {
    let from = AssistantFrom::Random {
        shape,
        seed: seed.wrapping_add(1),
    };
    Ok(wgemma::session::load_assistant(
        ctx,
        state,
        from,
        LoadHooks::default(),
    )?)
}

/// An oracle run's JSON; `profile` summarises its verify forwards' dispatches when they
/// were profiled.
pub(super) fn oracle_json(
    run: &OracleRun,
    plain_tps: f64,
    k: usize,
    profiling: bool,
) -> serde_json::Value {
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
            let runs = DraftedRuns {
                prompt: self.context,
                greedy: self.greedy,
                k,
                acceptance: self.acceptance,
                adaptive: self.adaptive,
            };
            pollster::block_on(drafted_runs(ctx, state, assistant, runs))
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

/// The speculative rows: oracle drafts at each acceptance, then the same rounds with the
/// real drafter (its cost paid), fixed and adaptive.
pub(super) struct SpecOutcome {
    pub(super) rows: Vec<TestRow>,
    pub(super) oracle: Vec<serde_json::Value>,
    pub(super) drafted: Vec<serde_json::Value>,
}

pub(super) fn speculative(
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
            Some(load_assistant(ctx, state, shape, args.seed)?)
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
