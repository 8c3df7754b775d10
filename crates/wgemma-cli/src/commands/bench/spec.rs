//! `wgemma bench`'s speculative runs with the real drafter, over the library's
//! ([`wgemma::session::bench::drafted`], which the browser package's bench runs too): the
//! assistant at the published E2B / E4B assistant shape (random weights) drafts every
//! round, so its cost is paid, while the verify reads the target's own greedy tokens as
//! drafts at the chosen acceptance (an oracle). Here: blocking on them, and `--profile`'s
//! rounds by phase and shader.

use anyhow::Result;
use std::collections::BTreeMap;
use wgemma::formats::synthetic::SyntheticShape;
use wgemma::generate::speculative::{DraftSchedule, Phase, PhaseSpan, SpeculativeOutput};
use wgemma::gpu::GpuContext;
use wgemma::gpu::MAX_PROFILE_MARKS;
use wgemma::model::assistant::Assistant;
use wgemma::model::state::KvState;
use wgemma::session::bench::drafted::{self, DraftedRun, DraftedRuns, RunSpec, RunsAtRate};
use wgemma::session::{AssistantFrom, LoadHooks};

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

/// [`drafted::speculative_run`], blocking.
pub fn speculative_run(
    ctx: &GpuContext,
    state: &mut KvState,
    assistant: &mut Assistant,
    prompt: &[u32],
    greedy: &[u32],
    run: RunSpec,
) -> Result<(DraftedRun, SpeculativeOutput)> {
    let tokens = (prompt, greedy);
    Ok(pollster::block_on(drafted::speculative_run(
        ctx, state, assistant, tokens, run,
    ))?)
}

/// [`drafted::drafted_runs`], blocking.
pub fn drafted_runs(
    ctx: &GpuContext,
    state: &mut KvState,
    assistant: &mut Assistant,
    runs: DraftedRuns<'_>,
) -> Result<Vec<RunsAtRate>> {
    Ok(pollster::block_on(drafted::drafted_runs(
        ctx, state, assistant, runs,
    ))?)
}

/// `--profile`: every dispatch of a few pipelined rounds of k drafts with the drafter
/// (acceptance 1.0), timed on the GPU and split by phase (drafter steps, verify forward,
/// commit) and by shader. The rounds are as many as the
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
        "commit_us_per_round": us("commit"),
        "decode_step_us": decode_step_us,
        "verify_ratio": us("verify") / decode_step_us.max(1e-9),
        "phases": phases,
    }))
}

fn phase_name(phase: Phase) -> &'static str {
    match phase {
        Phase::Target => "target",
        Phase::Drafter => "drafter",
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
