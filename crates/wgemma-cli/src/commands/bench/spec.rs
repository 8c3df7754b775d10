//! `wgemma bench`'s speculative runs with the real drafter: the assistant at the published
//! E2B / E4B assistant shape (random weights) drafts every round, so its cost is paid; its
//! drafts are then replaced on the GPU by the target's own greedy tokens, each kept with
//! probability `acceptance` (else replaced by a token the target rejects), so acceptance
//! is the caller's choice and the output still the plain greedy one.

use anyhow::{bail, Result};
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use wgemma::formats::synthetic::SyntheticShape;
use wgemma::gpu::GpuContext;
use wgemma::gpu::MAX_PROFILE_MARKS;
use wgemma::session::engine::{
    generate_speculative_replacing_drafts, Assistant, DraftSchedule, GenerateOptions, KvState,
    LogitRows, Model, Phase, PhaseSpan, ReplacedDrafts, SamplingParams, SpeculativeOptions,
    SpeculativeOutput,
};
use wgemma::session::{AssistantFrom, LoadHooks};

/// The synthetic shape `model` has (a synthetic model or a `synth-checkpoint` directory),
/// among those with a published assistant.
pub fn assistant_shape(model: &Model) -> Option<SyntheticShape> {
    let c = &model.spec.config;
    [SyntheticShape::E2b, SyntheticShape::E4b]
        .into_iter()
        .find(|s| {
            let t = s.spec().config;
            (t.hidden_size, t.num_hidden_layers, t.vocab_size)
                == (c.hidden_size, c.num_hidden_layers, c.vocab_size)
        })
}

/// The assistant of `shape` with random weights, bound to `state`'s caches, in its model's
/// weight format.
pub fn load_assistant(
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

/// Builds every verify plan a schedule may use (k + 1 rows, k = 0..=cap), so that no timed
/// round builds one.
pub fn build_verify_plans(ctx: &GpuContext, state: &mut KvState) -> Result<()> {
    for m in 1..=state.model().options.max_verify_rows {
        state.plan(ctx, m, LogitRows::All)?;
    }
    Ok(())
}

/// Drafts at a fixed acceptance rate: each of the target's own greedy tokens kept with
/// probability `acceptance`, else replaced by a token the target rejects. One random
/// stream (seed 7) for every run, so runs at one rate see the same pattern.
pub struct FixedRateDrafts {
    rng: rand_chacha::ChaCha8Rng,
    acceptance: f64,
    vocab: u32,
}

impl FixedRateDrafts {
    pub fn new(acceptance: f64, vocab: usize) -> FixedRateDrafts {
        FixedRateDrafts {
            rng: rand_chacha::ChaCha8Rng::seed_from_u64(7),
            acceptance,
            vocab: vocab as u32,
        }
    }

    /// Which of the next `k` drafts keep the target's token.
    pub fn keep(&mut self, k: usize) -> Vec<bool> {
        (0..k)
            .map(|_| self.rng.random_bool(self.acceptance))
            .collect()
    }

    /// The drafts standing for `greedy` (the target's tokens at those positions).
    pub fn drafts(&mut self, greedy: &[u32]) -> Vec<u32> {
        let keep = self.keep(greedy.len());
        greedy
            .iter()
            .zip(keep)
            .map(|(&t, kept)| if kept { t } else { (t + 1) % self.vocab })
            .collect()
    }
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
    /// The assistant's steps run (false: the drafts are given, see [`ReplacedDrafts`]).
    pub drafter: bool,
}

/// Generates `greedy` (the plain greedy continuation of `prompt`, first token included)
/// speculatively as `run` says, its drafts replaced as the module docs say (the same
/// random stream as the host-drafted oracle rounds, so a fixed schedule replays their
/// acceptance pattern). Returns the run and the generation's output.
pub fn speculative_run(
    ctx: &GpuContext,
    state: &mut KvState,
    assistant: &mut Assistant,
    prompt: &[u32],
    greedy: &[u32],
    run: RunSpec,
) -> Result<(DraftedRun, SpeculativeOutput)> {
    let mut oracle = FixedRateDrafts::new(run.acceptance, state.model().spec.config.vocab_size);
    let mut keep = |k: usize| oracle.keep(k);
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
    let out = pollster::block_on(generate_speculative_replacing_drafts(
        state,
        assistant,
        ctx,
        prompt,
        &options,
        &spec,
        ReplacedDrafts {
            reference: greedy,
            keep: &mut keep,
            drafter: run.drafter,
        },
    ))?;
    if out.tokens != greedy {
        bail!("speculative rounds with the assistant diverged from the plain greedy tokens");
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

/// For each acceptance rate, [`RunsAtRate`] with `assistant` drafting.
pub fn drafted_runs(
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
    // Warm-up: the assistant's pipelines and the rounds' buffers.
    let warm = &greedy[..greedy.len().min(8)];
    for drafter in [true, false] {
        speculative_run(ctx, state, assistant, prompt, warm, fixed(1.0, drafter))?;
    }
    let mut out = Vec::new();
    for &p in runs.acceptance {
        let mut run = |spec: RunSpec| -> Result<DraftedRun> {
            Ok(speculative_run(ctx, state, assistant, prompt, greedy, spec)?.0)
        };
        let drafted = run(fixed(p, true))?;
        let verify_only = run(fixed(p, false))?;
        let adaptive = if runs.adaptive {
            Some(run(RunSpec {
                schedule: DraftSchedule::Adaptive,
                ..fixed(p, true)
            })?)
        } else {
            None
        };
        out.push(RunsAtRate {
            drafted,
            verify_only,
            adaptive,
        });
    }
    Ok(out)
}

/// `--profile`: every dispatch of a few pipelined rounds of k drafts with the drafter
/// (acceptance 1.0), timed on the GPU and split by phase (drafter steps, draft
/// replacement, verify forward, commit) and by shader. The rounds are as many as the
/// profiler's timestamps hold after the prefill; the first round (seeded by the host) and
/// the last one (run ahead of the end) are left out. `decode_step_us`: a one-row decode
/// step's GPU time from the same process, for `verify_ratio`.
pub fn profile_rounds(
    ctx: &GpuContext,
    state: &mut KvState,
    assistant: &mut Assistant,
    prompt: &[u32],
    greedy: &[u32],
    k: usize,
    decode_step_us: f64,
) -> Result<serde_json::Value> {
    let spec = RunSpec {
        k,
        acceptance: 1.0,
        schedule: DraftSchedule::Fixed,
        drafter: true,
    };
    // A short run sizes the profiled one: its phases count the prefill's and a round's
    // dispatches (every round of k drafts records the same ones).
    let probe = &greedy[..greedy.len().min(2 * (k + 1) + 1)];
    let (_, out) = speculative_run(ctx, state, assistant, prompt, probe, spec)?;
    if let Err(e) = pollster::block_on(ctx.read_profile()) {
        // The prefill and two rounds overflow the timestamps (a long prompt).
        return Ok(serde_json::json!({ "skipped": e.to_string() }));
    }
    let prefill: u64 = out
        .phases
        .iter()
        .take_while(|p| p.phase == Phase::Target)
        .map(|p| p.dispatches)
        .sum();
    // Each pass also writes a timestamp: a round has k + 3 of them.
    let per_round: u64 = out
        .phases
        .iter()
        .filter(|p| p.phase != Phase::Target && p.round == 1)
        .map(|p| p.dispatches)
        .sum::<u64>()
        + k as u64
        + 4;
    let room = u64::from(MAX_PROFILE_MARKS).saturating_sub(prefill + 64);
    // One round more runs ahead of the end.
    let rounds = (room / per_round.max(1)).saturating_sub(1) as usize;
    if rounds < 3 {
        return Ok(serde_json::json!({
            "skipped": format!(
                "{rounds} rounds of {per_round} dispatches fit the profiler's \
                 {MAX_PROFILE_MARKS} timestamps after a prefill of {prefill}"
            ),
        }));
    }
    let tokens = (1 + rounds * (k + 1)).min(greedy.len());
    let (_, out) = speculative_run(ctx, state, assistant, prompt, &greedy[..tokens], spec)?;
    let times = pollster::block_on(ctx.read_profile())?;
    let total: u64 = out.phases.iter().map(|p| p.dispatches).sum();
    if total != times.len() as u64 {
        return Ok(serde_json::json!({
            "skipped": format!(
                "profiled {} dispatches, the rounds' phases count {total}",
                times.len()
            ),
        }));
    }
    // Rounds 1.. of k drafts that were read (the last submitted one ran ahead).
    let last = out.phases.iter().map(|p| p.round).max().unwrap_or(0);
    let counted = |p: &PhaseSpan| p.phase != Phase::Target && p.round >= 1 && p.round < last;
    let mut by_phase: BTreeMap<&str, PhaseTotals> = BTreeMap::new();
    let mut rounds_seen = std::collections::BTreeSet::new();
    let mut at = 0;
    for p in &out.phases {
        let span = &times[at..at + p.dispatches as usize];
        at += p.dispatches as usize;
        if !counted(p) || p.drafts != k {
            continue;
        }
        rounds_seen.insert(p.round);
        let e = by_phase.entry(phase_name(p.phase)).or_default();
        e.dispatches += p.dispatches;
        e.barriers += p.barriers;
        for t in span {
            e.ns += t.nanos;
            let shader = t.label.split('[').next().unwrap_or(&t.label).to_string();
            let s = e.by_shader.entry(shader).or_default();
            s.0 += 1;
            s.1 += t.nanos;
        }
    }
    let n = rounds_seen.len().max(1) as f64;
    let us = |name: &str| by_phase.get(name).map_or(0.0, |e| e.ns / n / 1e3);
    let phases: serde_json::Map<String, serde_json::Value> = by_phase
        .iter()
        .map(|(name, e)| (name.to_string(), e.json(n)))
        .collect();
    let round_us: f64 = by_phase.values().map(|e| e.ns).sum::<f64>() / n / 1e3;
    Ok(serde_json::json!({
        "draft_tokens": k,
        "rounds": rounds_seen.len(),
        "gpu_us_per_round": round_us,
        "drafter_us_per_round": us("drafter"),
        "verify_us_per_round": us("verify"),
        "commit_us_per_round": us("commit") + us("replace"),
        "decode_step_us": decode_step_us,
        "verify_ratio": us("verify") / decode_step_us.max(1e-9),
        "phases": phases,
    }))
}

fn phase_name(phase: Phase) -> &'static str {
    match phase {
        Phase::Target => "target",
        Phase::Drafter => "drafter",
        Phase::Replace => "replace",
        Phase::Verify => "verify",
        Phase::Commit => "commit",
    }
}

/// A phase's profiled dispatches over the rounds counted.
#[derive(Default)]
struct PhaseTotals {
    dispatches: u64,
    barriers: u64,
    ns: f64,
    /// Shader -> (dispatches, ns).
    by_shader: BTreeMap<String, (u64, f64)>,
}

impl PhaseTotals {
    fn json(&self, rounds: f64) -> serde_json::Value {
        let mut shaders: Vec<_> = self.by_shader.iter().collect();
        shaders.sort_by(|a, b| b.1 .1.total_cmp(&a.1 .1));
        serde_json::json!({
            "us_per_round": self.ns / rounds / 1e3,
            "dispatches_per_round": self.dispatches as f64 / rounds,
            "barriers_per_round": self.barriers as f64 / rounds,
            "by_shader": shaders
                .into_iter()
                .map(|(name, (count, ns))| serde_json::json!({
                    "shader": name,
                    "dispatches_per_round": *count as f64 / rounds,
                    "us_per_round": ns / rounds / 1e3,
                    "us_per_dispatch": ns / *count as f64 / 1e3,
                }))
                .collect::<Vec<_>>(),
        })
    }
}
