//! `wgemma bench --profile`: where a forward's or a speculative round's GPU time goes, by
//! shader and by dispatch, from the timestamps of a context with profiling enabled
//! ([`GpuContext::enable_profiling`]).

use super::drafted::{speculative_run, RunSpec};
use crate::error::Result;
use crate::generate::speculative::{DraftSchedule, Phase, PhaseSpan};
use crate::gpu::{DispatchTime, GpuContext, MAX_PROFILE_MARKS};
use crate::model::assistant::Assistant;
use crate::model::state::KvState;
use crate::model::target::Want;
use std::collections::{BTreeMap, BTreeSet};

/// Per-shader totals of `forwards` profiled forwards of `rows` rows at the model's
/// position, each feeding the previous one's token (the first: `first`) and rolled back.
pub async fn profile_forwards(
    ctx: &GpuContext,
    state: &mut KvState,
    first: u32,
    rows: usize,
    forwards: usize,
) -> Result<serde_json::Value> {
    let mut times = Vec::new();
    let mut token = first;
    let want = if rows == 1 {
        Want::NextToken
    } else {
        Want::AllNext
    };
    for _ in 0..forwards {
        let input = vec![token; rows];
        let base = state.len();
        token = state.forward(ctx, &input, want).await?.next[0];
        // Every profiled forward runs at the same position (the context stays as timed).
        state.rollback(base)?;
        times.extend(ctx.read_profile().await?);
    }
    Ok(summarize_profile(&times, rows, forwards))
}

/// Per-shader and per-dispatch totals of `forwards` profiled forwards of `rows` rows:
/// `gpu_us_per_forward`, and `by_shader` / `by_dispatch` ranked by time.
pub fn summarize_profile(
    times: &[DispatchTime],
    rows: usize,
    forwards: usize,
) -> serde_json::Value {
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
        let e = by_shader.entry(shader_of(label)).or_default();
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

/// A dispatch label's shader: `shader[workgroups]` without its workgroups.
fn shader_of(label: &str) -> String {
    label.split('[').next().unwrap_or(label).to_string()
}

/// Every dispatch of a few pipelined rounds of `k` drafts with the drafter (acceptance
/// 1.0), timed on the GPU and split by phase (drafter steps, verify forward, commit) and
/// by shader. The rounds are as many as the profiler's timestamps hold after the
/// prefill; the first round (seeded by the host) and the last one (run ahead of the end)
/// are left out. `decode_step_us`: a one-row decode step's GPU time from the same
/// process, for `verify_ratio`. Where the rounds do not fit the timestamps the answer is
/// `{"skipped": why}`.
pub async fn profile_rounds(
    ctx: &GpuContext,
    state: &mut KvState,
    assistant: &mut Assistant,
    (prompt, greedy): (&[u32], &[u32]),
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
    let (_, out) = speculative_run(ctx, state, assistant, (prompt, probe), spec).await?;
    if let Err(e) = ctx.read_profile().await {
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
    let (_, out) =
        speculative_run(ctx, state, assistant, (prompt, &greedy[..tokens]), spec).await?;
    let times = ctx.read_profile().await?;
    let total: u64 = out.phases.iter().map(|p| p.dispatches).sum();
    if total != times.len() as u64 {
        return Ok(serde_json::json!({
            "skipped": format!(
                "profiled {} dispatches, the rounds' phases count {total}",
                times.len()
            ),
        }));
    }
    Ok(rounds_by_phase(&out.phases, &times, k, decode_step_us))
}

/// [`profile_rounds`]' report from the rounds' phases and their dispatch times.
fn rounds_by_phase(
    phases: &[PhaseSpan],
    times: &[DispatchTime],
    k: usize,
    decode_step_us: f64,
) -> serde_json::Value {
    // Rounds 1.. of k drafts that were read (the last submitted one ran ahead).
    let last = phases.iter().map(|p| p.round).max().unwrap_or(0);
    let counted = |p: &PhaseSpan| p.phase != Phase::Target && p.round >= 1 && p.round < last;
    let mut by_phase: BTreeMap<&str, PhaseTotals> = BTreeMap::new();
    let mut rounds_seen = BTreeSet::new();
    let mut at = 0;
    for p in phases {
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
            let s = e.by_shader.entry(shader_of(&t.label)).or_default();
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
    serde_json::json!({
        "draft_tokens": k,
        "rounds": rounds_seen.len(),
        "gpu_us_per_round": round_us,
        "drafter_us_per_round": us("drafter"),
        "verify_us_per_round": us("verify"),
        "commit_us_per_round": us("commit"),
        "decode_step_us": decode_step_us,
        "verify_ratio": us("verify") / decode_step_us.max(1e-9),
        "phases": phases,
    })
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

#[cfg(test)]
mod tests {
    use super::*;

    fn time(label: &str, nanos: f64) -> DispatchTime {
        DispatchTime {
            label: label.to_string(),
            nanos,
        }
    }

    #[test]
    fn profiles_add_up_by_shader_and_by_dispatch() {
        // Two forwards: a matvec at two shapes and a norm.
        let times = [
            time("matvec[4]", 3000.0),
            time("matvec[8]", 5000.0),
            time("norm[1]", 1000.0),
            time("matvec[4]", 3000.0),
            time("matvec[8]", 5000.0),
            time("norm[1]", 1000.0),
        ];
        let p = summarize_profile(&times, 1, 2);
        assert_eq!(p["gpu_us_per_forward"], 9.0);
        let shaders = p["by_shader"].as_array().unwrap();
        assert_eq!(shaders[0]["shader"], "matvec");
        assert_eq!(shaders[0]["dispatches_per_forward"], 2.0);
        assert_eq!(shaders[0]["us_per_forward"], 8.0);
        assert_eq!(shaders[0]["us_per_dispatch"], 4.0);
        assert_eq!(shaders[1]["shader"], "norm");
        let dispatches = p["by_dispatch"].as_array().unwrap();
        assert_eq!(dispatches.len(), 3);
        assert_eq!(dispatches[0]["dispatch"], "matvec[8]");
    }

    #[test]
    fn rounds_count_only_the_whole_rounds_of_k_drafts() {
        let span = |phase, round, dispatches| PhaseSpan {
            phase,
            round,
            drafts: 2,
            dispatches,
            barriers: dispatches,
        };
        // The prefill, rounds 1 and 2, and round 3 run ahead of the end (left out).
        let phases = [
            span(Phase::Target, 0, 1),
            span(Phase::Drafter, 1, 2),
            span(Phase::Verify, 1, 1),
            span(Phase::Drafter, 2, 2),
            span(Phase::Verify, 2, 1),
            span(Phase::Verify, 3, 1),
        ];
        let times: Vec<_> = [1.0, 1000.0, 1000.0, 4000.0, 1000.0, 1000.0, 4000.0, 9.0]
            .iter()
            .map(|&ns| time("s[1]", ns))
            .collect();
        let r = rounds_by_phase(&phases, &times, 2, 2.0);
        assert_eq!(r["rounds"], 2);
        assert_eq!(r["drafter_us_per_round"], 2.0);
        assert_eq!(r["verify_us_per_round"], 4.0);
        assert_eq!(r["gpu_us_per_round"], 6.0);
        assert_eq!(r["verify_ratio"], 2.0);
        assert_eq!(r["phases"]["drafter"]["dispatches_per_round"], 2.0);
    }
}
