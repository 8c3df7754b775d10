//! `wgemma bench`'s speculative runs with the real drafter: the assistant at the published
//! E2B / E4B assistant shape (random weights) drafts every round, so its cost is paid; its
//! drafts are then replaced on the GPU by the target's own greedy tokens, each kept with
//! probability `acceptance` (else replaced by a token the target rejects), so acceptance
//! is the caller's choice and the output still the plain greedy one.

use anyhow::{bail, Result};
use rand::{Rng, SeedableRng};
use wgemma::gpu::GpuContext;
use wgemma::model::assistant::{parse_assistant_config, Assistant, AssistantOptions};
use wgemma::model::forward::LogitRows;
use wgemma::model::generate::GenerateOptions;
use wgemma::model::sampling::SamplingParams;
use wgemma::model::speculative::{
    generate_speculative_replacing_drafts, DraftSchedule, ReplacedDrafts, SpeculativeOptions,
};
use wgemma::model::synthetic::{RandomAssistant, SyntheticShape};
use wgemma::model::target::Model;
use wgemma::ops::opset::OpSet;

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

/// The assistant of `shape` with random weights, bound to `model`, in its weight format.
pub fn load_assistant(
    ctx: &GpuContext,
    model: &Model,
    shape: SyntheticShape,
    seed: u64,
) -> Result<Assistant> {
    let source = RandomAssistant::new(shape, seed.wrapping_add(1))?;
    Ok(Assistant::load(
        ctx,
        &source,
        parse_assistant_config(&source.config_json())?,
        model,
        &OpSet::with_mtp(),
        AssistantOptions {
            format: model.options.format,
        },
    )?)
}

/// Builds every verify plan a schedule may use (k + 1 rows, k = 0..=cap), so that no timed
/// round builds one.
pub fn build_verify_plans(ctx: &GpuContext, model: &mut Model) -> Result<()> {
    for m in 1..=model.options.max_verify_rows {
        model.plan(ctx, m, LogitRows::All)?;
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

/// One speculative run with the assistant drafting.
pub struct DraftedRun {
    pub schedule: DraftSchedule,
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

/// Generates `greedy` (the plain greedy continuation of `prompt`, first token included)
/// speculatively under `schedule` (first round k = `k`), the assistant drafting and its
/// drafts replaced as the module docs say (the same random stream as the host-drafted
/// oracle rounds, so a fixed schedule replays their acceptance pattern).
#[allow(clippy::too_many_arguments)]
pub fn drafted_run(
    ctx: &GpuContext,
    model: &mut Model,
    assistant: &mut Assistant,
    prompt: &[u32],
    greedy: &[u32],
    k: usize,
    acceptance: f64,
    schedule: DraftSchedule,
) -> Result<DraftedRun> {
    let mut oracle = FixedRateDrafts::new(acceptance, model.spec.config.vocab_size);
    let mut keep = |k: usize| oracle.keep(k);
    let options = GenerateOptions {
        max_new_tokens: greedy.len(),
        sampling: SamplingParams::default(),
        stop_ids: Vec::new(),
    };
    let spec = SpeculativeOptions {
        draft_tokens: k,
        schedule,
        trace: false,
        capture_draft_logits: false,
    };
    let out = pollster::block_on(generate_speculative_replacing_drafts(
        model,
        assistant,
        ctx,
        prompt,
        &options,
        &spec,
        ReplacedDrafts {
            reference: greedy,
            keep: &mut keep,
        },
    ))?;
    if out.tokens != greedy {
        bail!("speculative rounds with the assistant diverged from the plain greedy tokens");
    }
    let s = &out.stats;
    let tokens_per_s = s.base.decode_tokens_per_s;
    let decode_s = (greedy.len() - 1) as f64 / tokens_per_s.max(1e-12);
    Ok(DraftedRun {
        schedule,
        tokens_per_s,
        rounds: s.rounds,
        plain_steps: s.plain_steps,
        drafted: s.drafted,
        accepted: s.accepted,
        ms_per_round: (s.plain_steps == 0 && s.rounds > 0)
            .then(|| decode_s * 1e3 / s.rounds as f64),
        host_wait_ms_per_round: s.host_wait_ms_per_round,
    })
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
    pub seed: u64,
}

/// For each acceptance rate, the fixed-k run and (with `adaptive`) the adaptive one, with
/// the assistant of `shape` drafting; none for a shape without a published assistant.
pub fn drafted_runs(
    ctx: &GpuContext,
    model: &mut Model,
    shape: SyntheticShape,
    runs: DraftedRuns<'_>,
) -> Result<Vec<Vec<DraftedRun>>> {
    if !matches!(shape, SyntheticShape::E2b | SyntheticShape::E4b) {
        return Ok(Vec::new());
    }
    let mut assistant = load_assistant(ctx, model, shape, runs.seed)?;
    build_verify_plans(ctx, model)?;
    let mut schedules = vec![DraftSchedule::Fixed];
    if runs.adaptive {
        schedules.push(DraftSchedule::Adaptive);
    }
    let (prompt, greedy, k) = (runs.prompt, runs.greedy, runs.k);
    // Warm-up: the assistant's pipelines and the rounds' buffers.
    let warm = &greedy[..greedy.len().min(8)];
    drafted_run(
        ctx,
        model,
        &mut assistant,
        prompt,
        warm,
        k,
        1.0,
        DraftSchedule::Fixed,
    )?;
    let mut out = Vec::new();
    for &p in runs.acceptance {
        let at_p = schedules
            .iter()
            .map(|&s| drafted_run(ctx, model, &mut assistant, prompt, greedy, k, p, s))
            .collect::<Result<Vec<_>>>()?;
        out.push(at_p);
    }
    Ok(out)
}
