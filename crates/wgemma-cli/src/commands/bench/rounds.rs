//! The speculative rows: oracle-draft rounds (the verify's cost alone) and the same rounds
//! with the real drafter, fixed and adaptive.

use super::args::{BenchArgs, Sizes};
use super::diag::summarize_profile;
use super::plain::PlainRun;
use super::table::{samples_at, timed, TestRow};
use crate::timing::{compare, Samples};
use anyhow::{bail, Result};
use std::time::Instant;
use wgemma::formats::synthetic::SyntheticShape;
use wgemma::gpu::GpuContext;
use wgemma::model::assistant::Assistant;
use wgemma::model::state::KvState;
use wgemma::model::target::Want;

/// Speculative rounds with oracle drafts: the drafts are the target's own greedy tokens
/// from the plain run, each kept with probability `acceptance` and otherwise replaced by
/// a token the target will reject (acceptance 1.0 = every draft accepted), so the cost of
/// a verify round is measured independently of draft quality. The assistant's draft steps
/// are not included.
pub(super) struct OracleRun {
    pub(super) target_acceptance: f64,
    pub(super) tokens_per_s: f64,
    pub(super) rounds: usize,
    pub(super) accepted: usize,
    pub(super) drafted: usize,
    pub(super) ms_per_round: f64,
    pub(super) host_ms_per_round: f64,
    /// Inside `KvState::forward` (record, submit, wait, read back).
    pub(super) forward_ms_per_round: f64,
    /// The verify forwards' dispatch times, when profiling.
    pub(super) profile: Option<serde_json::Value>,
}

impl OracleRun {
    pub(super) fn json(&self, plain_tps: f64) -> serde_json::Value {
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

pub(super) fn oracle_rounds(
    ctx: &GpuContext,
    state: &mut KvState,
    prompt: &[u32],
    greedy: &[u32],
    k: usize,
    acceptance: f64,
    profiling: bool,
) -> Result<OracleRun> {
    let mut oracle =
        super::spec::FixedRateDrafts::new(acceptance, state.model().spec.config.vocab_size);
    state.reset();
    let first = pollster::block_on(state.forward(ctx, prompt, Want::NextToken))?.next[0];
    let host0 = state.host_encode_seconds();
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
        let base = state.len();
        let tf = Instant::now();
        let next = pollster::block_on(state.forward(ctx, &input, Want::AllNext))?.next;
        forward_s += tf.elapsed().as_secs_f64();
        if profiling {
            times.extend(pollster::block_on(ctx.read_profile())?);
        }
        let ok = drafts.iter().zip(&next).take_while(|(d, n)| d == n).count();
        committed.extend(&drafts[..ok]);
        committed.push(next[ok]);
        state.rollback(base + 1 + ok)?;
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
        host_ms_per_round: (state.host_encode_seconds() - host0) * 1e3 / rounds.max(1) as f64,
        forward_ms_per_round: forward_s * 1e3 / rounds.max(1) as f64,
        profile: profiling.then(|| summarize_profile(&times, k + 1, rounds)),
    })
}

/// The speculative rows: rounds after `context` that must reproduce `greedy` (the decode
/// test's tokens), timed as the decode test was.
pub(super) struct SpecRows<'a> {
    pub(super) context: &'a [u32],
    pub(super) greedy: &'a [u32],
    pub(super) k: usize,
    pub(super) acceptance: &'a [f64],
    /// Also the adaptive schedule (with the drafter).
    pub(super) adaptive: bool,
    pub(super) repetitions: usize,
    /// The plain decode test, which the rows are compared with.
    pub(super) tg: &'a Samples,
    pub(super) tg_name: &'a str,
    pub(super) depth: usize,
}

impl SpecRows<'_> {
    pub(super) fn row(&self, test: String, samples: Samples) -> TestRow {
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
    pub(super) fn oracle(
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
                let o = oracle_rounds(ctx, state, self.context, self.greedy, k, p, false)?;
                let tps = o.tokens_per_s;
                last = Some(o);
                Ok(tps)
            })?;
            let mut json = last.expect("timed runs").json(decode_tps);
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
    pub(super) fn drafter(
        &self,
        ctx: &GpuContext,
        state: &mut KvState,
        assistant: &mut Assistant,
    ) -> Result<(Vec<TestRow>, Vec<serde_json::Value>)> {
        let (k, decode_tps, repetitions) = (self.k, self.tg.mean(), self.repetitions);
        let test = format!("{} spec k={k} drafter", self.tg_name);
        eprintln!("bench: {test}: warm-up and {repetitions} timed runs ...");
        let mut runs_at = |state: &mut KvState| {
            super::spec::drafted_runs(
                ctx,
                state,
                assistant,
                super::spec::DraftedRuns {
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
        None => super::spec::assistant_shape(state.model()),
    };
    let mut assistant = match shape {
        Some(shape @ (SyntheticShape::E2b | SyntheticShape::E4b)) if k > 0 => {
            Some(super::spec::load_assistant(ctx, state, shape, args.seed)?)
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
