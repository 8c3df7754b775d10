//! The bench's speculative runs with the real drafter: the assistant's draft steps run
//! every round, so their cost is paid, while the verify reads an oracle's drafts
//! ([`OracleDrafts`]): the target's own greedy tokens, each kept with probability
//! `acceptance` (else a token the target rejects), so acceptance is the caller's choice
//! and the output still the plain greedy one. The same pipelined rounds without the
//! drafter (`verify_only`) give what a round costs without it.

use super::{diverged, FixedRateDrafts};
use crate::error::Result;
use crate::generate::plain::GenerateOptions;
use crate::generate::sampling::SamplingParams;
use crate::generate::speculative::{
    generate_speculative_with_oracle, DraftSchedule, OracleDrafts, SpeculativeOptions,
    SpeculativeOutput,
};
use crate::gpu::GpuContext;
use crate::model::assistant::Assistant;
use crate::model::forward::LogitRows;
use crate::model::state::KvState;

/// Builds every verify plan a schedule may use (k + 1 rows, k = 0..=cap), so that no timed
/// round builds one.
pub fn build_verify_plans(ctx: &GpuContext, state: &mut KvState) -> Result<()> {
    for m in 1..=state.model().options.max_verify_rows {
        state.plan(ctx, m, LogitRows::All)?;
    }
    Ok(())
}

/// One speculative run with the assistant drafting (or, without the drafter, the same
/// pipelined rounds with the drafts given).
pub struct DraftedRun {
    pub schedule: DraftSchedule,
    pub drafter: bool,
    pub tokens_per_s: f64,
    pub rounds: usize,
    pub plain_steps: usize,
    pub drafted: usize,
    pub accepted: usize,
    /// Decode time over rounds, when every token came from a round (no plain steps).
    pub ms_per_round: Option<f64>,
    /// The host's wait for round results, per round.
    pub host_wait_ms_per_round: f64,
}

impl DraftedRun {
    pub fn json(&self, plain_tps: f64) -> serde_json::Value {
        serde_json::json!({
            "schedule": self.schedule,
            "drafter": self.drafter,
            "tokens_per_s": self.tokens_per_s,
            "speedup": self.tokens_per_s / plain_tps,
            "rounds": self.rounds,
            "plain_steps": self.plain_steps,
            "acceptance_rate": self.accepted as f64 / self.drafted.max(1) as f64,
            "mean_draft_tokens": self.drafted as f64 / self.rounds.max(1) as f64,
            "ms_per_round": self.ms_per_round,
            "host_wait_ms_per_round": self.host_wait_ms_per_round,
        })
    }
}

/// What one speculative generation runs.
#[derive(Clone, Copy)]
pub struct RunSpec {
    /// Drafts per round (the adaptive schedule's first round).
    pub k: usize,
    pub acceptance: f64,
    pub schedule: DraftSchedule,
    /// The assistant's steps run (false: the oracle's drafts alone, see [`OracleDrafts`]).
    pub drafter: bool,
}

/// Generates `greedy` (the plain greedy continuation of `prompt`, first token included)
/// speculatively as `run` says, with the oracle's drafts the module docs describe (the same
/// random stream as the oracle rounds, so a fixed schedule replays their acceptance
/// pattern). Returns the run and the generation's output.
pub async fn speculative_run(
    ctx: &GpuContext,
    state: &mut KvState,
    assistant: &mut Assistant,
    (prompt, greedy): (&[u32], &[u32]),
    run: RunSpec,
) -> Result<(DraftedRun, SpeculativeOutput)> {
    let mut rate = FixedRateDrafts::new(run.acceptance, state.model().spec.config.vocab_size);
    let options = GenerateOptions {
        max_new_tokens: greedy.len(),
        sampling: SamplingParams::default(),
        stop_ids: Vec::new(),
    };
    let spec = SpeculativeOptions {
        draft_tokens: run.k,
        schedule: run.schedule,
        trace: false,
        capture_draft_logits: false,
    };
    let oracle = OracleDrafts {
        reference: greedy.to_vec(),
        keep: Box::new(move |k| rate.keep(k)),
        drafter: run.drafter,
    };
    let out =
        generate_speculative_with_oracle(state, assistant, ctx, prompt, &options, &spec, oracle)
            .await?;
    if out.tokens != greedy {
        return Err(diverged("speculative rounds with the assistant"));
    }
    let s = &out.stats;
    let tokens_per_s = s.base.decode_tokens_per_s;
    let decode_s = (greedy.len() - 1) as f64 / tokens_per_s.max(1e-12);
    let drafted = DraftedRun {
        schedule: run.schedule,
        drafter: run.drafter,
        tokens_per_s,
        rounds: s.rounds,
        plain_steps: s.plain_steps,
        drafted: s.drafted,
        accepted: s.accepted,
        ms_per_round: (s.plain_steps == 0 && s.rounds > 0)
            .then(|| decode_s * 1e3 / s.rounds as f64),
        host_wait_ms_per_round: s.host_wait_ms_per_round,
    };
    Ok((drafted, out))
}

/// What [`drafted_runs`] runs.
pub struct DraftedRuns<'a> {
    pub prompt: &'a [u32],
    /// The plain greedy continuation (first token included).
    pub greedy: &'a [u32],
    /// Drafts per round (the adaptive schedule's first round).
    pub k: usize,
    pub acceptance: &'a [f64],
    /// Also run the adaptive schedule.
    pub adaptive: bool,
}

/// The runs at one acceptance rate: fixed k with the drafter, the same rounds without it
/// (drafts given), and (with `adaptive`) the adaptive schedule with the drafter.
pub struct RunsAtRate {
    pub drafted: DraftedRun,
    pub verify_only: DraftedRun,
    pub adaptive: Option<DraftedRun>,
}

impl RunsAtRate {
    /// The runs and what a round costs, all from this process: `round_ms` (drafted),
    /// `verify_round_ms` (the same pipelined rounds without the drafter),
    /// `drafter_ms_per_round` (their difference), `verify_ratio` (a round without the
    /// drafter over a pipelined plain step, `plain_step_ms`).
    pub fn json(&self, plain_tps: f64) -> serde_json::Value {
        let plain_step_ms = 1e3 / plain_tps;
        let round = self.drafted.ms_per_round;
        let verify = self.verify_only.ms_per_round;
        let mut out = serde_json::json!({
            "drafted": self.drafted.json(plain_tps),
            "verify_only": self.verify_only.json(plain_tps),
            "plain_step_ms": plain_step_ms,
            "round_ms": round,
            "verify_round_ms": verify,
            "drafter_ms_per_round": round.zip(verify).map(|(r, v)| r - v),
            "verify_ratio": verify.map(|v| v / plain_step_ms),
        });
        if let Some(a) = &self.adaptive {
            out["adaptive"] = a.json(plain_tps);
        }
        out
    }
}

/// For each acceptance rate, [`RunsAtRate`] with `assistant` drafting (after a warm-up of
/// the assistant's pipelines and the rounds' buffers).
pub async fn drafted_runs(
    ctx: &GpuContext,
    state: &mut KvState,
    assistant: &mut Assistant,
    runs: DraftedRuns<'_>,
) -> Result<Vec<RunsAtRate>> {
    build_verify_plans(ctx, state)?;
    let (prompt, greedy, k) = (runs.prompt, runs.greedy, runs.k);
    let fixed = |acceptance: f64, drafter: bool| RunSpec {
        k,
        acceptance,
        schedule: DraftSchedule::Fixed,
        drafter,
    };
    let warm = &greedy[..greedy.len().min(8)];
    for drafter in [true, false] {
        speculative_run(ctx, state, assistant, (prompt, warm), fixed(1.0, drafter)).await?;
    }
    let mut out = Vec::new();
    for &p in runs.acceptance {
        let tokens = (prompt, greedy);
        let drafted = speculative_run(ctx, state, assistant, tokens, fixed(p, true)).await?;
        let verify_only = speculative_run(ctx, state, assistant, tokens, fixed(p, false)).await?;
        let adaptive = if runs.adaptive {
            let spec = RunSpec {
                schedule: DraftSchedule::Adaptive,
                ..fixed(p, true)
            };
            Some(
                speculative_run(ctx, state, assistant, tokens, spec)
                    .await?
                    .0,
            )
        } else {
            None
        };
        out.push(RunsAtRate {
            drafted: drafted.0,
            verify_only: verify_only.0,
            adaptive,
        });
    }
    Ok(out)
}
