//! MTP speculative decoding: the target with the Gemma 4 assistant drafter, round by round as
//! HF's assisted decoding does it with `SinglePositionMultiTokenCandidateGenerator`
//! (transformers 5.24, `generation/utils.py::_assisted_decoding`):
//!
//! 1. The first iteration drafts nothing: the target prefills the prompt and picks the first
//!    token (HF's `get_candidates` returns no candidates when `is_first_iteration`).
//! 2. Every round drafts k' = min(k, max_new_tokens - generated - 1) tokens at the constant
//!    position P (the seed's, seed = the last token, not yet in the target's cache), from
//!    the seed and the target's final-normed hidden state of the row that produced it (the
//!    prefill's last row, then row n of the last verify); k' = 0 is a plain target step.
//! 3. The target verifies [seed, d1..dk'] in ONE forward of k' + 1 rows; greedy acceptance is
//!    the longest prefix with d_i == argmax(row i - 1), plus the bonus token argmax(row n);
//!    the tokens are cut to the budget and after the first stop token; the target's caches
//!    roll back past the rejected rows.
//! 4. k follows the [`DraftSchedule`]: constant (HF's MTP generator, which does not
//!    implement `update_candidate_strategy`), HF's heuristic schedule, or the adaptive one
//!    ([`schedule`]), which picks k in 0..=8 from the measured acceptance and round costs and
//!    runs plain pipelined decode steps ([`KvState::decode_greedy`]) when drafting does not
//!    pay. A round after plain steps drafts from the last plain step's hidden state, with
//!    [`DraftView::after_plain_step`].
//!
//! Greedy rounds run in ONE submit each and are pipelined ([`pipeline`]): the k' draft
//! passes (each draft stays on the GPU: the argmax writes the token the next step embeds,
//! and a buffer copy puts it in the verify forward's token ids), the verify pass, then the
//! `spec_commit` kernel, which computes the accepted prefix, the bonus token, the next
//! seed's position, the assistant's next view and seed hidden state on the GPU; so round
//! r + 1 is submitted before the host reads round r's record (one readback per round, read
//! one round late to stream the tokens). Rounds that sample keep the host path below.
//!
//! Temperature > 0: output position i's token is drawn from the target's distribution p_i
//! (temperature / top-k / top-p / min-p) with a uniform keyed by the seed and i, as plain
//! sampling draws it; draft d_i is drawn from the assistant's q_i with the same uniform, and
//! drafts are accepted while they equal the target's draws. The output is plain sampling's,
//! token for token, whatever k the schedule picks (a given seed reproduces with and without
//! the assistant); the price against Leviathan et al.'s min(1, p/q) rule is fewer accepted
//! drafts where p and q differ. Drafts are sampled on the host, so a sampling round waits
//! once per draft step and once for the verify, and sampling rounds are not pipelined
//! (T > 0 keeps this host path; so does `capture_draft_logits`).

mod generation;
mod oracle;
mod pipeline;
mod rounds;
pub mod schedule;

pub use oracle::{DraftSource, OracleDrafts};
pub use schedule::DraftSchedule;

use crate::error::{Error, Result};
use crate::generate::plain::{GenerateOptions, GenerateStats};
use crate::gpu::GpuContext;
use crate::model::assistant::{store_layer, Assistant};
use crate::model::config::LayerKind;
use crate::model::forward::LogitRows;
use crate::model::state::KvState;
use crate::ops::attention::KvLayout;

const OP: &str = "speculative";

/// The most drafts per round (`--draft-tokens` and the adaptive schedule).
pub const MAX_DRAFT_TOKENS: usize = 8;

/// How to draft.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpeculativeOptions {
    /// Drafts per round (HF `num_assistant_tokens`), 1..=8; default 2.
    pub draft_tokens: usize,
    /// How k moves between rounds (`draft_tokens` is the first round's k).
    pub schedule: DraftSchedule,
    /// Keep a trace of every round ([`SpeculativeOutput::rounds`]).
    pub trace: bool,
    /// Read back every draft step's logits ([`SpeculativeOutput::draft_logits`]; for parity
    /// tests). Greedy drafts then go through the host, one submit per draft step.
    pub capture_draft_logits: bool,
}

impl Default for SpeculativeOptions {
    fn default() -> Self {
        SpeculativeOptions {
            draft_tokens: 2,
            schedule: DraftSchedule::Fixed,
            trace: false,
            capture_draft_logits: false,
        }
    }
}

/// One round after the prefill.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct DraftRound {
    /// Tokens generated before the round.
    pub committed: usize,
    /// The assistant's drafts (empty: a plain target step).
    pub drafts: Vec<u32>,
    /// Drafts accepted (the round commits `accepted + 1` tokens, fewer at the end).
    pub accepted: usize,
}

/// [`GenerateStats`] plus the speculative counts.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct SpeculativeStats {
    #[serde(flatten)]
    pub base: GenerateStats,
    /// Target forwards after the prefill that verified a round (drafts or none).
    pub rounds: usize,
    /// Tokens decoded by plain pipelined steps (the adaptive schedule's k = 0).
    pub plain_steps: usize,
    /// Drafts proposed.
    pub drafted: usize,
    /// Drafts accepted.
    pub accepted: usize,
    /// accepted / drafted (0 when nothing was drafted).
    pub acceptance_rate: f64,
    /// Tokens committed per round: (generated - 1 - plain_steps) / rounds (the first token
    /// comes from the prefill).
    pub tokens_per_round: f64,
    /// Rounds recorded and submitted before the host read the round before them.
    pub pipelined_rounds: usize,
    /// Milliseconds the host waited for round results, per round (pipelined greedy rounds
    /// wait while the next round runs; host-drafted rounds wait for each draft too).
    pub host_wait_ms_per_round: f64,
}

impl SpeculativeStats {
    /// `GenerateStats::summary` plus `| 31 rounds, 1.94 tok/round, acceptance 0.47 (29/62)`.
    pub fn summary(&self) -> String {
        format!(
            "{} | {} rounds, {:.2} tok/round, acceptance {:.2} ({}/{})",
            self.base.summary(),
            self.rounds,
            self.tokens_per_round,
            self.acceptance_rate,
            self.accepted,
            self.drafted
        )
    }
}

/// What [`generate_speculative`] returns.
#[derive(Debug, Clone, Default)]
pub struct SpeculativeOutput {
    pub tokens: Vec<u32>,
    pub stats: SpeculativeStats,
    /// Every round after the prefill (with [`SpeculativeOptions::trace`]).
    pub rounds: Vec<DraftRound>,
    /// Every draft step's logits, in call order (with
    /// [`SpeculativeOptions::capture_draft_logits`]).
    pub draft_logits: Vec<Vec<f32>>,
    /// What every dispatch recorded by the generation belongs to, in recording order (the
    /// order of [`GpuContext::read_profile`]'s times): benchmarks split a profiled run's
    /// GPU time into the drafter's steps, the verify forward and the commit with it. Read
    /// from the context's dispatch counters, so it is exact only while nothing else records
    /// on the context.
    pub phases: Vec<PhaseSpan>,
}

/// What a stretch of recorded dispatches computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// The target outside GPU-resident rounds: the prefill, plain steps, host rounds.
    Target,
    /// A GPU-resident round's draft steps (the assistant).
    Drafter,
    /// A GPU-resident round's verify forward (k + 1 rows, logits and argmax of each).
    Verify,
    /// The `spec_commit` kernel.
    Commit,
}

/// `dispatches` dispatches (`barriers` of them after a barrier) recorded in a row for
/// `phase` of GPU-resident round `round` (numbered in submission order; rounds run ahead
/// of the end included), which drafts `drafts` tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct PhaseSpan {
    pub phase: Phase,
    pub round: usize,
    pub drafts: usize,
    pub dispatches: u64,
    pub barriers: u64,
}

/// The target forward the next round's view derives from.
#[derive(Debug, Clone, Copy)]
pub(super) struct LastForward {
    /// Last row written (R) and rows (M).
    r: usize,
    m: usize,
    /// The plan holding its hidden states, and the seed's row in it.
    plan: (usize, LogitRows),
    row: usize,
}

/// Checks what a session needs before the first round: the assistant is bound to this
/// target, k fits the verify plans, and the target's sliding rings keep every row of the
/// assistant's view. Returns the largest k a round may use.
pub(crate) fn check_session(
    target: &KvState,
    assistant: &Assistant,
    spec: &SpeculativeOptions,
) -> Result<usize> {
    if !(1..=MAX_DRAFT_TOKENS).contains(&spec.draft_tokens) {
        return Err(Error::invalid(
            OP,
            "draft tokens per round (--draft-tokens)",
            format!("1..={MAX_DRAFT_TOKENS}"),
            spec.draft_tokens,
        ));
    }
    let verify = target.model().options.max_verify_rows;
    if spec.draft_tokens + 1 > verify {
        return Err(Error::invalid(
            OP,
            "draft tokens per round",
            format!(
                "<= {} (the target's max_verify_rows - 1)",
                verify.saturating_sub(1)
            ),
            spec.draft_tokens,
        ));
    }
    let k_cap = if spec.schedule != DraftSchedule::Fixed {
        MAX_DRAFT_TOKENS.min(verify - 1)
    } else {
        spec.draft_tokens
    };
    if !assistant.is_bound_to(target) {
        return Err(Error::invalid(
            OP,
            "assistant",
            "loaded for this target (its attention reads the target's caches)",
            "an assistant loaded for another model instance",
        ));
    }
    let w_a = assistant.window();
    if let Some(cache) =
        store_layer(&target.model().spec, LayerKind::Sliding).and_then(|l| target.kv_cache(l))
    {
        if let KvLayout::Sliding { .. } = cache.config().layout {
            let need = w_a.saturating_add(k_cap.max(1));
            if cache.slots() < need {
                return Err(Error::invalid(
                    OP,
                    "slots of the target's sliding KV ring",
                    format!(
                        ">= {need} (the assistant's window {w_a} + {} drafts: raise the prefill \
                         chunk or the verify rows)",
                        k_cap.max(1)
                    ),
                    cache.slots(),
                ));
            }
        }
    }
    Ok(k_cap)
}

/// Generates after `prompt` with `assistant` drafting for `target` (the target is reset
/// first). Greedy output is token-identical to [`crate::generate::plain::generate`]'s; sampled
/// output has the same distribution. `on_token` sees each committed token and may return
/// `false` to stop.
pub async fn generate_speculative(
    target: &mut KvState,
    assistant: &mut Assistant,
    ctx: &GpuContext,
    prompt: &[u32],
    options: &GenerateOptions,
    spec: &SpeculativeOptions,
    on_token: &mut dyn FnMut(u32) -> bool,
) -> Result<SpeculativeOutput> {
    let request = generation::Request {
        prompt,
        options,
        spec,
    };
    let source = DraftSource::Assistant;
    generation::run(target, assistant, ctx, request, source, on_token).await
}

/// [`generate_speculative`] for benchmarks (greedy, drafts chained on the GPU) with an
/// oracle's drafts ([`OracleDrafts`]: the target's own tokens, or tokens it rejects, per the
/// caller's keep flags), so that acceptance follows the caller's choice; the assistant's
/// draft steps still run where the oracle says so (their cost is paid). The output is
/// still the target's greedy continuation.
pub async fn generate_speculative_with_oracle(
    target: &mut KvState,
    assistant: &mut Assistant,
    ctx: &GpuContext,
    prompt: &[u32],
    options: &GenerateOptions,
    spec: &SpeculativeOptions,
    oracle: OracleDrafts,
) -> Result<SpeculativeOutput> {
    let request = generation::Request {
        prompt,
        options,
        spec,
    };
    let source = DraftSource::Oracle(oracle);
    generation::run(target, assistant, ctx, request, source, &mut |_| true).await
}
