//! Speculative streams in a batch: every stream of a [`Session::step_rounds`] drafts with
//! the one assistant for its own sequence, and the verify rows of ALL of them run in ONE
//! target forward ([`KvState::record_batch`]: stream i's [seed, d1..dk] at its own positions
//! and KV slot), so N drafting streams cost one verify forward per round, not N.
//!
//! A stream's draft state is its own: the target's hidden state of the row that produced
//! its seed (a `[1, hidden]` buffer it keeps, since the next forward overwrites the plan's),
//! and the rows of its last target forward (the assistant's view of its KV slot, HF's rule
//! as in solo rounds). The assistant itself has no cache of its own (it reads the target's),
//! so its buffers are shared: each stream's round start (view, RoPE position, seed token)
//! is copied into them on the GPU from a staging buffer written once per step, and the
//! drafts stay on the GPU (the argmax writes the token the next draft step embeds; a copy
//! puts it in the verify forward's token ids). One submit and one wait per step, for every
//! stream's drafts and the verify together.
//!
//! Acceptance is per stream and on the host: row j's token is the stream's own (the GPU
//! argmax, or drawn by its sampler keyed by the output position, after its penalties,
//! bias and grammar mask: [`Stream`]'s `choose`), and the round keeps tokens while they
//! equal the drafts, plus the first that does not (the bonus). So the output is the
//! stream's plain output token for token, whatever the drafts (greedy: the target's argmax;
//! seeded sampling: the same draws as without the assistant). Drafts are the assistant's
//! argmax for sampled streams too (solo sampling rounds draw them on the host, one wait per
//! draft): only acceptance depends on it.
//!
//! Each drafting stream drafts a fixed k (its request's `draft_tokens`, cut to its budget);
//! the adaptive schedule, which times one stream's rounds, does not apply to a batch. When
//! the rows of all streams exceed the largest forward, the largest k's shrink first.

use super::batch::{check_running, Stream};
use super::drafting::copy_row;
use super::{Session, TokenEvent, TokenLogprobs, OP};
use crate::error::{Error, Result};
use crate::gpu::{DType, GpuContext, Readback, Step, Tensor};
use crate::model::assistant::{Assistant, DraftView};
use crate::model::forward::LogitRows;
use crate::model::target::Sequence;
use crate::ops::embedding::write_token_ids;
use crate::text::tokenizer::Tokenizer;

/// Per drafting stream in the staging buffer: the RoPE position, full and sliding view
/// ends (each with the KV slot beside it, as [`Assistant::begin_round`] writes them), then
/// the seed token and a pad.
const STAGE_WORDS: usize = 8;

/// The assistant's view of a round drafting at `p` after a target forward of `m` rows
/// ending at `r` (HF's; after a one-row forward past the window, the plain-step view).
fn view_at(assistant: &Assistant, p: usize, r: usize, m: usize) -> Result<DraftView> {
    let (w_t, w_a) = (assistant.target_window(), assistant.window());
    match DraftView::hf(p, r, m, w_t, w_a) {
        Err(_) if m == 1 => Ok(DraftView::after_plain_step(p, r)),
        view => view,
    }
}

/// Drafts per stream this step: its k cut to its budget (the last token needs no draft),
/// then the largest cut by one until every row fits `limit`.
fn round_sizes(streams: &[&mut Stream], limit: usize) -> Result<Vec<usize>> {
    if streams.is_empty() || streams.len() > limit {
        return Err(Error::invalid(
            OP,
            "streams in one batched step",
            format!("1..={limit} (the rows of the largest forward)"),
            streams.len(),
        ));
    }
    let mut ks: Vec<usize> = streams
        .iter()
        .map(|s| {
            s.drafting
                .as_ref()
                .map_or(0, |d| d.k.min(s.budget_left().saturating_sub(1)))
        })
        .collect();
    let mut rows: usize = ks.iter().map(|k| k + 1).sum();
    while rows > limit {
        let (i, _) = ks
            .iter()
            .enumerate()
            .max_by_key(|&(_, k)| *k)
            .expect("at least one stream");
        ks[i] -= 1;
        rows -= 1;
    }
    Ok(ks)
}

fn no_assistant() -> Error {
    Error::invalid(
        OP,
        "speculative streams",
        "an assistant loaded (loadAssistant, --assistant, or an artifact with one)",
        "none",
    )
}

/// Where each stream's rows sit in one batched forward: stream i verifies its seed and
/// `ks[i]` drafts at rows `offsets[i]..=offsets[i] + ks[i]`.
struct RoundRows {
    ks: Vec<usize>,
    offsets: Vec<usize>,
    /// Rows of the forward, every stream's together.
    total: usize,
}

impl RoundRows {
    fn new(ks: Vec<usize>) -> RoundRows {
        let offsets: Vec<usize> = ks
            .iter()
            .scan(0, |at, k| {
                let o = *at;
                *at += k + 1;
                Some(o)
            })
            .collect();
        let total: usize = ks.iter().map(|k| k + 1).sum();
        RoundRows { ks, offsets, total }
    }

    fn drafting(&self) -> bool {
        self.ks.iter().any(|&k| k > 0)
    }

    /// The forward's token ids with each stream's seed at its offset; the drafts' places
    /// are filled on the GPU before the verify reads them.
    fn seed_tokens(&self, streams: &[&mut Stream]) -> Vec<u32> {
        let mut tokens = vec![0u32; self.total];
        for (s, &o) in streams.iter().zip(&self.offsets) {
            tokens[o] = s.last_token();
        }
        tokens
    }
}

/// What one step's staging buffer holds: each drafting stream's round start
/// ([`STAGE_WORDS`] each), then the oracle streams' drafts (benchmarks).
struct DraftStage {
    words: Vec<u32>,
    /// Each drafting stream's view, in stream order.
    views: Vec<DraftView>,
    /// Per stream: where its oracle's drafts start in `words`, if an oracle drafts for it.
    oracle_at: Vec<Option<usize>>,
}

impl DraftStage {
    fn new(
        assistant: &Assistant,
        streams: &mut [&mut Stream],
        ks: &[usize],
        vocab: usize,
    ) -> Result<DraftStage> {
        let mut stage = DraftStage {
            words: Vec::new(),
            views: Vec::new(),
            oracle_at: Vec::new(),
        };
        stage.push_round_starts(assistant, streams, ks)?;
        stage.push_oracle_drafts(streams, ks, vocab)?;
        Ok(stage)
    }

    fn push_round_starts(
        &mut self,
        assistant: &Assistant,
        streams: &[&mut Stream],
        ks: &[usize],
    ) -> Result<()> {
        for (s, &k) in streams.iter().zip(ks) {
            let Some(d) = s.drafting.as_ref().filter(|_| k > 0) else {
                continue;
            };
            let p = s.seed_position();
            let view = view_at(assistant, p, d.last_r, d.last_m)?;
            let slot = s.slot() as u32;
            self.words.extend([
                view.position as u32,
                slot,
                view.full_end as u32,
                slot,
                view.sliding_end as u32,
                slot,
                s.last_token(),
                0,
            ]);
            self.views.push(view);
        }
        Ok(())
    }

    /// An oracle stream's k drafts (see [`crate::generate::speculative::OracleDrafts`]).
    fn push_oracle_drafts(
        &mut self,
        streams: &mut [&mut Stream],
        ks: &[usize],
        vocab: usize,
    ) -> Result<()> {
        for (s, &k) in streams.iter_mut().zip(ks) {
            let committed = s.tokens().len();
            let oracle = s
                .drafting
                .as_mut()
                .filter(|_| k > 0)
                .and_then(|d| d.source.oracle());
            let at = match oracle {
                Some(oracle) => {
                    let at = self.words.len();
                    self.words.extend(oracle.round(committed, k, vocab)?.drafts);
                    Some(at)
                }
                None => None,
            };
            self.oracle_at.push(at);
        }
        Ok(())
    }

    /// Writes the words into `kept` (the session's staging buffer) when it is large
    /// enough, else into a new one sized for every stream's round start and drafts.
    fn upload(&self, ctx: &GpuContext, kept: Option<Tensor>, streams: usize) -> Result<Tensor> {
        let staging = match kept {
            Some(t) if t.numel() >= self.words.len() => t,
            _ => Tensor::zeros(
                ctx,
                "batch draft staging",
                &[streams * (STAGE_WORDS + crate::generate::speculative::MAX_DRAFT_TOKENS)],
                DType::U32,
            )?,
        };
        staging.write_bytes(ctx, bytemuck::cast_slice(&self.words));
        Ok(staging)
    }
}

/// Records every drafting stream's round: its round start copied from the staging buffer
/// into the assistant's buffers, the seed hidden state, k draft steps each copying its
/// token into the verify's ids (an oracle stream's drafts are copied from the staging
/// buffer instead; its draft steps run where the oracle says so, for their cost).
fn record_drafts(
    step: &mut Step,
    assistant: &mut Assistant,
    staging: &Tensor,
    streams: &[&mut Stream],
    rows: &RoundRows,
    ids: &Tensor,
    stage: &DraftStage,
) -> Result<()> {
    let mut drafter = 0;
    for (i, &k) in rows.ks.iter().enumerate() {
        if k == 0 {
            continue;
        }
        let base = (drafter * STAGE_WORDS * 4) as u64;
        {
            let b = assistant.gpu_round_buffers();
            let encoder = step.encoder();
            for (at, to, bytes) in [
                (0, b.rope_position, 8),
                (8, b.full_end, 8),
                (16, b.sliding_end, 8),
                (24, b.token, 4),
            ] {
                encoder.copy_buffer_to_buffer(staging.buffer(), base + at, to.buffer(), 0, bytes);
            }
        }
        assistant.begin_round_on_gpu(stage.views[drafter]);
        let d = streams[i].drafting.as_ref().expect("a drafting stream");
        assistant.record_seed_hidden(step, &d.hidden, 0)?;
        let oracle_at = stage.oracle_at[i];
        if d.source.runs_drafter() {
            for j in 0..k {
                assistant.record_step(step)?;
                if oracle_at.is_none() {
                    assistant.record_token_copy(step, ids, rows.offsets[i] + 1 + j)?;
                }
            }
        }
        if let Some(at) = oracle_at {
            step.encoder().copy_buffer_to_buffer(
                staging.buffer(),
                (at * 4) as u64,
                ids.buffer(),
                ((rows.offsets[i] + 1) * 4) as u64,
                (k * 4) as u64,
            );
        }
        drafter += 1;
    }
    Ok(())
}

/// What the host reads back after a step's submit.
struct VerifyReadout {
    /// The GPU argmax of every row.
    next: Vec<u32>,
    /// Every row's logits when a stream samples (else empty), `vocab` each.
    logits: Vec<f32>,
    vocab: usize,
    /// The verify's token ids: each stream's seed and drafts.
    row_tokens: Vec<u32>,
}

impl VerifyReadout {
    /// Stream `s`'s token for row `row`: drawn from its logits when it samples, else the
    /// argmax.
    fn choose(&mut self, s: &mut Stream, row: usize) -> Result<(u32, Option<TokenLogprobs>)> {
        if s.reads_logits() {
            s.choose(&mut self.logits[row * self.vocab..(row + 1) * self.vocab])
        } else {
            Ok((self.next[row], None))
        }
    }
}

/// Takes each stream's tokens while they equal its drafts, plus the first that does not;
/// rolls its cache back past the rejected drafts and keeps the hidden state of its new
/// seed's row (recorded in `keep_hidden`).
fn accept_rounds(
    streams: &mut [&mut Stream],
    rows: &RoundRows,
    readout: &mut VerifyReadout,
    tokenizer: Option<&Tokenizer>,
    hidden: &Tensor,
    keep_hidden: &mut Step,
) -> Result<Vec<Vec<TokenEvent>>> {
    let mut events = Vec::with_capacity(streams.len());
    for ((s, &k), &o) in streams.iter_mut().zip(&rows.ks).zip(&rows.offsets) {
        let p = s.seed_position();
        let mut taken = Vec::with_capacity(k + 1);
        let mut accepted = 0;
        for j in 0..=k {
            let (t, lp) = readout.choose(s, o + j)?;
            let matched = j < k && t == readout.row_tokens[o + 1 + j];
            accepted += matched as usize;
            taken.push(s.accept(tokenizer, t, lp)?);
            if !matched || s.finish_reason().is_some() {
                break;
            }
        }
        // Rows past the last committed token are rejected drafts (the new seed, the
        // last token, is not in the cache yet).
        let kept = taken.len();
        s.sequence_mut().rollback(p + kept)?;
        if let Some(d) = s.drafting.as_mut() {
            d.drafted += k;
            d.accepted += accepted;
            d.last_r = p + k;
            d.last_m = k + 1;
            copy_row(keep_hidden, hidden, o + kept - 1, &d.hidden);
        }
        events.push(taken);
    }
    Ok(events)
}

/// The readback of the verify's token ids: `kept` (the session's) when large enough for
/// `ids`, else a new one for the largest forward's `max_rows`.
fn verify_ids_readback(
    ctx: &GpuContext,
    kept: Option<Readback>,
    ids: &Tensor,
    max_rows: usize,
) -> Readback {
    match kept {
        Some(r) if r.capacity() >= ids.byte_size() => r,
        _ => Readback::new(ctx, "batch verify ids", (max_rows * 4) as u64),
    }
}

impl Session {
    /// Advances every stream of `streams` (none finished) by one round in ONE target
    /// forward: each drafting stream ([`GenerateRequest::speculative`]) drafts its k tokens
    /// and verifies them, each plain one takes one token. Returns each stream's new tokens'
    /// events (one or more each), in order. The tokens equal each stream's run alone (see
    /// the module's notes).
    ///
    /// [`GenerateRequest::speculative`]: super::GenerateRequest::speculative
    pub async fn step_rounds(
        &mut self,
        streams: &mut [&mut Stream],
    ) -> Result<Vec<Vec<TokenEvent>>> {
        self.check_gpu_errors()?;
        check_running(streams)?;
        let target = self.target.as_mut().ok_or_else(super::no_model)?;
        let ctx = &self.ctx;
        let state = &mut target.state;
        let vocab = state.model().spec.config.vocab_size;
        let rows = RoundRows::new(round_sizes(streams, state.model().max_batch_rows())?);
        let drafting = rows.drafting();
        let plan = state.plan(ctx, rows.total, LogitRows::All)?;
        let head = plan.head_for("every row")?;
        let (ids, hidden) = (&plan.ids, &head.hidden);
        let tokens = rows.seed_tokens(streams);
        write_token_ids(ctx, ids, &tokens, vocab)?;
        let mut step = Step::new(ctx);
        if drafting {
            let assistant = self.assistant.as_mut().ok_or_else(no_assistant)?;
            let stage = DraftStage::new(assistant, streams, &rows.ks, vocab)?;
            let staging = stage.upload(ctx, self.draft_staging.take(), streams.len())?;
            record_drafts(&mut step, assistant, &staging, streams, &rows, ids, &stage)?;
            self.draft_staging = Some(staging);
        }
        {
            let mut spans: Vec<(&mut Sequence, usize)> = streams
                .iter_mut()
                .zip(&rows.ks)
                .map(|(s, &k)| (s.sequence_mut(), k + 1))
                .collect();
            state.record_batch(ctx, &mut step, &plan, &mut spans)?;
        }
        let host = streams.iter().any(|s| s.reads_logits());
        step.copy_to_readback(&head.next, &head.next_readback)?;
        if host {
            step.copy_to_readback(&head.logits, &head.logits_readback)?;
        }
        let kept = self.draft_readback.take();
        let ids_readback = verify_ids_readback(ctx, kept, ids, state.model().max_batch_rows());
        if drafting {
            step.copy_to_readback(ids, &ids_readback)?;
        }
        step.submit();
        let next = head.next_readback.read_u32(ctx).await?;
        let logits = if host {
            head.logits_readback.read_f32(ctx).await?
        } else {
            Vec::new()
        };
        let row_tokens = if drafting {
            ids_readback.read_u32(ctx).await?
        } else {
            tokens
        };
        self.draft_readback = Some(ids_readback);
        let mut readout = VerifyReadout {
            next,
            logits,
            vocab,
            row_tokens,
        };
        let tokenizer = target.text.tokenizer.as_deref();
        let mut keep_hidden = Step::new(ctx);
        let events = accept_rounds(
            streams,
            &rows,
            &mut readout,
            tokenizer,
            hidden,
            &mut keep_hidden,
        )?;
        keep_hidden.submit();
        self.check_gpu_errors()?;
        Ok(events)
    }
}
