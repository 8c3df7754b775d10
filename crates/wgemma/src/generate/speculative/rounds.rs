//! One speculative generation's state ([`Session`]) and the rounds the host drives.
//!
//! Greedy rounds with drafts chained on the GPU run pipelined ([`super::pipeline`]); rounds
//! that sample, or that read every draft's logits back, run here one at a time, the host
//! drafting. The loop choosing between them is [`super::generation`].
//!
//! A sampled round draws output position i's token from the target's distribution with the
//! uniform keyed by i ([`crate::generate::sampling::uniform_at`]), exactly as plain sampling
//! does, and accepts drafts while they equal those draws (the draft itself is drawn from the
//! assistant's distribution with the same uniform, so a close drafter agrees often). The
//! tokens are then those of plain sampling with the same seed, whatever k each round used:
//! lossless, and reproducible with or without the assistant.

use super::schedule::{AdaptiveDrafts, DraftCosts, DraftSchedule, NextRound};
use super::{DraftRound, LastForward, Phase, PhaseSpan, SpeculativeOptions, SpeculativeOutput, OP};
use crate::error::{Error, Result};
use crate::generate::plain::GenerateOptions;
use crate::generate::sampling::Sampler;
use crate::gpu::{GpuContext, Step, Tensor};
use crate::model::assistant::{Assistant, DraftView};
use crate::model::forward::LogitRows;
use crate::model::state::KvState;
use crate::ops::embedding::write_token_ids;
use web_time::Instant;

/// One generation's state, shared by the host rounds and the pipelined ones.
pub(super) struct Session<'a> {
    pub target: &'a mut KvState,
    pub assistant: &'a mut Assistant,
    pub ctx: &'a GpuContext,
    pub options: &'a GenerateOptions,
    pub spec: &'a SpeculativeOptions,
    /// The largest k a round may use.
    pub k_cap: usize,
    pub prompt_len: usize,
    pub out: SpeculativeOutput,
    /// Committed tokens (the prefill's first included).
    pub tokens: Vec<u32>,
    /// A stop token, or the caller said stop.
    pub done: bool,
    /// The fixed / heuristic schedule's k.
    pub k: usize,
    pub adaptive: Option<AdaptiveDrafts>,
    /// The target forward the next round's view and seed hidden state derive from.
    pub last: LastForward,
    /// Seconds the host waited for round results (readbacks).
    pub wait_s: f64,
    /// The context's (dispatches, barriers) counters at the last [`Session::mark`].
    pub(super) marked: (u64, u64),
    /// The costs measured (fixed and heuristic schedules; the adaptive one keeps its own).
    pub(super) costs: DraftCosts,
    /// The last plain chunk's last token: when, tokens committed then, rounds booked then
    /// (the adaptive schedule's probe loss is measured from it to the next chunk).
    pub(super) plain_end: Option<(Instant, usize, usize)>,
    pub(super) sampler: Sampler,
}

impl Session<'_> {
    /// Books the dispatches recorded since the last mark as `phase` of round `round`
    /// ([`SpeculativeOutput::phases`]).
    pub fn mark(&mut self, phase: Phase, round: usize, drafts: usize) {
        let counters = self.ctx.counters();
        let now = (counters.snapshot().0, counters.barriers());
        let (dispatches, barriers) = (now.0 - self.marked.0, now.1 - self.marked.1);
        self.marked = now;
        if dispatches == 0 {
            return;
        }
        let phases = &mut self.out.phases;
        match phases.last_mut() {
            Some(last) if (last.phase, last.round) == (phase, round) => {
                last.dispatches += dispatches;
                last.barriers += barriers;
            }
            _ => phases.push(PhaseSpan {
                phase,
                round,
                drafts,
                dispatches,
                barriers,
            }),
        }
    }

    pub fn budget(&self) -> usize {
        self.options.max_new_tokens - self.tokens.len()
    }

    /// The position of the next round's seed (the last committed token, not yet in the
    /// target's cache).
    pub fn seed_position(&self) -> usize {
        self.prompt_len + self.tokens.len() - 1
    }

    /// What the schedule runs next with `budget` tokens left (>= 1).
    pub fn next_round(&mut self, budget: usize) -> NextRound {
        match self.adaptive.as_mut() {
            Some(schedule) => schedule.next(budget),
            None => NextRound::Draft(self.k),
        }
    }

    /// The view of a round drafting at the seed after `self.last` (HF's; after a one-row
    /// forward past the window, the plain-step view HF never needs).
    pub fn host_view(&self) -> Result<DraftView> {
        let last = self.last;
        let p = self.seed_position();
        let (w_t, w_a) = (self.assistant.target_window(), self.assistant.window());
        match DraftView::hf(p, last.r, last.m, w_t, w_a) {
            Err(_) if last.m == 1 => Ok(DraftView::after_plain_step(p, last.r)),
            view => view,
        }
    }

    /// The final-normed hidden states of the last target forward (the seed's row is
    /// `self.last.row`).
    pub fn seed_hidden(&self) -> Result<Tensor> {
        self.target
            .built_plan(self.last.plan.0, self.last.plan.1)
            .and_then(|plan| plan.head.as_ref())
            .map(|head| head.hidden.clone())
            .ok_or_else(|| {
                Error::invalid(
                    OP,
                    "hidden states of the last target forward",
                    "kept",
                    "none",
                )
            })
    }

    /// Cuts a round's tokens (`valid`: the accepted drafts, then the bonus) to the budget
    /// and after the first stop token.
    pub fn cut(&self, valid: &mut Vec<u32>) {
        valid.truncate(self.budget());
        if let Some(i) = valid.iter().position(|t| self.options.stop_ids.contains(t)) {
            valid.truncate(i + 1);
        }
    }

    /// Books a verified round: stats, trace, the schedule (`accepted`: drafts accepted
    /// before the cut; `seconds`: its cost when representative), then streams `valid`.
    pub fn book_round(
        &mut self,
        drafts: Vec<u32>,
        accepted: usize,
        valid: Vec<u32>,
        seconds: Option<f64>,
        on_token: &mut dyn FnMut(u32) -> bool,
    ) {
        let (kk, n) = (drafts.len(), valid.len() - 1);
        let s = &mut self.out.stats;
        s.rounds += 1;
        s.drafted += kk;
        s.accepted += n;
        if self.spec.trace {
            self.out.rounds.push(DraftRound {
                committed: self.tokens.len(),
                drafts,
                accepted: n,
            });
        }
        match (self.spec.schedule, self.adaptive.as_mut()) {
            (_, Some(schedule)) if kk == 0 => schedule.record_plain(seconds),
            (_, Some(schedule)) => schedule.record_round(kk, accepted, seconds),
            (DraftSchedule::Heuristic, None) if kk > 0 => {
                self.costs.record_round(kk, seconds);
                self.k = if n == kk {
                    (self.k + 2).min(self.k_cap)
                } else {
                    self.k.saturating_sub(1).max(1)
                };
            }
            (_, None) => self.costs.record_round(kk, seconds),
        }
        self.stream(valid, on_token);
    }

    pub(super) fn stream(&mut self, valid: Vec<u32>, on_token: &mut dyn FnMut(u32) -> bool) {
        for t in valid {
            self.tokens.push(t);
            if !on_token(t) || self.options.stop_ids.contains(&t) {
                self.done = true;
                break;
            }
        }
    }

    /// Greedy: up to `n` plain pipelined steps after the last token (the seed, not yet in
    /// the cache), booked as plain steps.
    pub async fn plain_chunk(
        &mut self,
        n: usize,
        on_token: &mut dyn FnMut(u32) -> bool,
    ) -> Result<()> {
        let committed = self.tokens.len();
        let seed = *self.tokens.last().expect("one token at least");
        // A chunk that builds the decode plan is not a measure of what steps cost.
        let timed = self.target.built_plan(1, LogitRows::Last).is_some();
        let stop_ids = &self.options.stop_ids;
        let mut stamps = Vec::with_capacity(n);
        let mut stopped = false;
        let rest = self
            .target
            .decode_greedy(self.ctx, seed, n.min(self.budget()), &mut |t| {
                stamps.push(Instant::now());
                let go = on_token(t) && !stop_ids.contains(&t);
                stopped |= !go;
                go
            })
            .await?;
        self.tokens.extend(&rest);
        self.done = stopped;
        let seconds = match (timed, stamps.first(), stamps.last()) {
            (true, Some(a), Some(b)) if stamps.len() >= 2 => {
                Some(b.duration_since(*a).as_secs_f64() / (stamps.len() - 1) as f64)
            }
            _ => None,
        };
        self.out.stats.plain_steps += self.tokens.len() - committed;
        // A probe between two chunks: what it cost over plain steps, from the last token of
        // the chunk before to the first of this one.
        let rounds = self.out.stats.rounds;
        if let (Some((end, tokens, booked)), Some(first), Some(schedule)) = (
            self.plain_end.take(),
            stamps.first(),
            self.adaptive.as_mut(),
        ) {
            if let (true, Some(step)) = (booked + 1 == rounds, schedule.costs.plain_step_s()) {
                let produced = (committed + 1 - tokens) as f64;
                schedule
                    .costs
                    .record_probe_loss(first.duration_since(end).as_secs_f64() - produced * step);
            }
        }
        self.plain_end = stamps.last().map(|&last| (last, self.tokens.len(), rounds));
        if self.spec.trace {
            self.out
                .rounds
                .extend((committed..self.tokens.len()).map(|c| DraftRound {
                    committed: c,
                    drafts: Vec::new(),
                    accepted: 0,
                }));
        }
        if let Some(schedule) = self.adaptive.as_mut() {
            schedule.record_plain(seconds);
        }
        self.last = LastForward {
            r: self.target.len() - 1,
            m: 1,
            plan: (1, LogitRows::Last),
            row: 0,
        };
        Ok(())
    }

    /// One round drafted through the host (sampling, or the draft logits read back):
    /// `kk` drafts, each its own submit and wait, then the verify forward.
    async fn host_round(&mut self, kk: usize, on_token: &mut dyn FnMut(u32) -> bool) -> Result<()> {
        let (ctx, vocab) = (self.ctx, self.target.model().spec.config.vocab_size);
        let greedy = self.options.sampling.is_greedy();
        let round_start = Instant::now();
        let seed = *self.tokens.last().expect("one token at least");
        let p = self.seed_position();
        let m = kk + 1;
        // A round that builds its verify plan is not a measure of what rounds cost.
        let timed = self.target.built_plan(m, LogitRows::All).is_some();
        let seed_hidden = self.seed_hidden()?;
        let plan = self.target.plan(ctx, m, LogitRows::All)?;
        let mut drafts = Vec::with_capacity(kk);
        // Output position of the verify forward's first row (the token after the seed).
        let position = self.tokens.len() as u64;
        let mut step = Step::new(ctx);
        if kk > 0 {
            let view = self.host_view()?;
            let slot = self.target.sequence_slot();
            self.assistant.begin_round(ctx, view, slot);
            self.assistant.write_token(ctx, seed)?;
            self.assistant
                .record_seed_hidden(&mut step, &seed_hidden, self.last.row)?;
            for i in 0..kk {
                if i > 0 {
                    self.assistant.write_token(ctx, drafts[i - 1])?;
                }
                self.assistant.record_step(&mut step)?;
                self.assistant.record_readback(&mut step, true)?;
                std::mem::replace(&mut step, Step::new(ctx)).submit();
                let wait = Instant::now();
                let logits = self.assistant.read_logits(ctx).await?;
                let d = if greedy {
                    self.assistant.read_token(ctx).await?
                } else {
                    let q = self.sampler.distribution(&logits);
                    self.sampler.draw(&q, position + i as u64)
                };
                self.wait_s += wait.elapsed().as_secs_f64();
                if self.spec.capture_draft_logits {
                    self.out.draft_logits.push(logits);
                }
                drafts.push(d);
            }
        }
        let mut all = Vec::with_capacity(m);
        all.push(seed);
        all.extend(&drafts);
        write_token_ids(ctx, &plan.ids, &all, vocab)?;
        self.target.record_forward(ctx, &mut step, &plan)?;
        let head = plan.head_for("every verify row")?;
        step.copy_to_readback(&head.next, &head.next_readback)?;
        if !greedy {
            step.copy_to_readback(&head.logits, &head.logits_readback)?;
        }
        step.submit();
        let wait = Instant::now();
        let next_ids = head.next_readback.read_u32(ctx).await?;
        let targets = if greedy {
            next_ids
        } else {
            let logits = head.logits_readback.read_f32(ctx).await?;
            logits
                .chunks(vocab)
                .enumerate()
                .map(|(i, row)| {
                    let p = self.sampler.distribution(row);
                    self.sampler.draw(&p, position + i as u64)
                })
                .collect()
        };
        let accepted = drafts
            .iter()
            .zip(&targets)
            .take_while(|(d, t)| d == t)
            .count();
        let mut valid = targets[..=accepted].to_vec();
        self.wait_s += wait.elapsed().as_secs_f64();
        let seconds = timed.then(|| round_start.elapsed().as_secs_f64());
        self.cut(&mut valid);
        let n = valid.len() - 1;
        self.target.rollback(p + n + 1)?;
        self.last = LastForward {
            r: p + kk,
            m,
            plan: (m, LogitRows::All),
            row: n,
        };
        self.book_round(drafts, accepted, valid, seconds, on_token);
        Ok(())
    }

    /// Rounds one at a time, drafted through the host.
    pub(super) async fn host_rounds(
        &mut self,
        on_token: &mut dyn FnMut(u32) -> bool,
    ) -> Result<()> {
        let greedy = self.options.sampling.is_greedy();
        while !self.done && self.tokens.len() < self.options.max_new_tokens {
            let budget = self.budget();
            let kk = match self.next_round(budget) {
                NextRound::Plain(n) if greedy => {
                    self.plain_chunk(n, on_token).await?;
                    continue;
                }
                NextRound::Draft(k) => k.min(budget - 1),
                NextRound::Plain(_) => 0,
            };
            self.host_round(kk, on_token).await?;
        }
        Ok(())
    }
}
