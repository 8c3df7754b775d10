//! Continuous batching: several requests decoding together, each in its own KV slot
//! ([`crate::model::target::Sequence`]). A request joins with [`Session::start_stream`]
//! (its prompt prefilled alone into a free slot, giving its first token) and then advances
//! one token per [`Session::step_streams`], which runs ONE forward of as many rows as there
//! are streams (`KvState::forward_batch`). Streams join and leave between steps; dropping a
//! [`Stream`] gives its KV slot back at once.
//!
//! Streams of speculative requests draft with the assistant and verify in batches too:
//! [`Session::step_rounds`] (`batch_spec`).
//!
//! Greedy tokens come from the GPU argmax; sampled ones, and any whose logits a stream
//! changes or reports ([`StreamExtras`]), from each stream's own seeded sampler over its
//! row's logits read back. Stop ids, stop strings, the token budget and streaming
//! detokenisation are per stream, as in [`Session::generate`].

use super::drafting::Drafting;
use super::text_stream;
use super::{FinishReason, GenerateRequest, Session, StopStrings, TokenEvent, TokenLogprobs, OP};
use crate::error::{Error, Result};
use crate::generate::sampling::{logprobs, LogitAdjust, Sampler, SamplingParams, TokenHistory};
use crate::generate::speculative::DraftSource;
use crate::model::target::{Sequence, Want};
use crate::text::tokenizer::{TextStream, Tokenizer};

/// Which tokens may come next (structured output: a grammar's token mask). It sees every
/// token the stream takes, stop tokens included. An error of `mask` or `accept` (or a
/// mask that allows no token) ends only its own stream, with [`FinishReason::Failed`].
pub trait TokenConstraint: Send {
    /// Sets the logits of the tokens not allowed next to -inf (one row, the vocabulary's
    /// length).
    fn mask(&mut self, logits: &mut [f32]) -> Result<()>;
    /// Advances past `token`, which the last mask allowed.
    fn accept(&mut self, token: u32) -> Result<()>;
    /// True once the text is complete and nothing may follow (the stream then ends).
    fn is_finished(&self) -> bool;
}

/// What a stream may add to a [`GenerateRequest`] (all off by default).
#[derive(Default)]
pub struct StreamExtras {
    /// Penalties and bias on the logits.
    pub adjust: LogitAdjust,
    /// Min-p truncation (0 = off).
    pub min_p: f32,
    /// Report each token's log-probability with this many alternatives.
    pub logprobs: Option<usize>,
    pub constraint: Option<Box<dyn TokenConstraint>>,
}

impl StreamExtras {
    /// True when the stream's tokens need its logits on the host.
    fn needs_logits(&self) -> bool {
        !self.adjust.is_identity()
            || self.min_p > 0.0
            || self.logprobs.is_some()
            || self.constraint.is_some()
    }
}

/// One request in a batch: its KV slot, sampler, text state and tokens so far.
pub struct Stream {
    seq: Sequence,
    sampler: Sampler,
    /// Tokens come from logits read back (sampling, or extras), not the GPU argmax.
    host: bool,
    adjust: LogitAdjust,
    history: TokenHistory,
    logprobs: Option<usize>,
    constraint: Option<Box<dyn TokenConstraint>>,
    text: TextStream,
    stops: StopStrings,
    stop_ids: Vec<u32>,
    tokens: Vec<u32>,
    prompt_tokens: usize,
    max_new_tokens: usize,
    finish: Option<FinishReason>,
    /// Why its constraint ended it ([`FinishReason::Failed`]).
    failure: Option<Error>,
    /// Its draft state when it decodes speculatively.
    pub(super) drafting: Option<Drafting>,
}

impl Stream {
    /// Why it ended (None while it still decodes).
    pub fn finish_reason(&self) -> Option<FinishReason> {
        self.finish
    }

    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }

    /// Whether a stop string ended it (its text is cut before the string; the tokens
    /// that spelled it are no part of the answer).
    pub fn stopped_by_string(&self) -> bool {
        self.stops.stopped()
    }

    /// Why its token constraint ended it, when it did ([`FinishReason::Failed`]).
    pub fn failure(&self) -> Option<&Error> {
        self.failure.as_ref()
    }

    pub fn prompt_tokens(&self) -> usize {
        self.prompt_tokens
    }

    /// The KV slot it holds.
    pub fn slot(&self) -> usize {
        self.seq.slot()
    }

    /// The text shown so far (cut before a stop string).
    pub fn text(&self) -> &str {
        self.stops.text()
    }

    /// Ends the stream's text: releases what was held back as a possible start of a stop
    /// string that never completed (the caller sends it last).
    pub fn finish_text(&mut self) -> String {
        self.stops.finish()
    }

    /// Whether it drafts with the assistant ([`Session::step_rounds`]).
    pub fn is_speculative(&self) -> bool {
        self.drafting.is_some()
    }

    /// Drafts proposed and accepted so far (None when it does not draft).
    pub fn draft_counts(&self) -> Option<(usize, usize)> {
        self.drafting.as_ref().map(|d| (d.drafted, d.accepted))
    }

    /// Where its drafts come from: the assistant (the default), or (benchmarks) an oracle
    /// whose drafts set the acceptance at a chosen rate (the output stays the target's).
    /// Fails for a stream that does not draft.
    pub fn set_draft_source(&mut self, source: DraftSource) -> Result<()> {
        match self.drafting.as_mut() {
            Some(d) => {
                d.set_source(source);
                Ok(())
            }
            None => Err(Error::invalid(
                OP,
                "stream whose draft source to set",
                "a speculative stream",
                "a plain one",
            )),
        }
    }

    /// Tokens it may still take.
    pub(super) fn budget_left(&self) -> usize {
        self.max_new_tokens - self.tokens.len()
    }

    /// Its last token: the next forward's input (the seed of a round).
    pub(super) fn last_token(&self) -> u32 {
        *self
            .tokens
            .last()
            .expect("a started stream has its first token")
    }

    /// The position of its last token (not yet in its KV slot).
    pub(super) fn seed_position(&self) -> usize {
        self.prompt_tokens + self.tokens.len() - 1
    }

    /// Its tokens come from logits read back, not the GPU argmax.
    pub(super) fn reads_logits(&self) -> bool {
        self.host
    }

    pub(super) fn sequence_mut(&mut self) -> &mut Sequence {
        &mut self.seq
    }

    /// The next token from its row of logits (changed in place): adjusted, masked, drawn
    /// for its output position; with its log-probabilities when asked.
    pub(super) fn choose(&mut self, row: &mut [f32]) -> Result<(u32, Option<TokenLogprobs>)> {
        self.history.apply(&self.adjust, row);
        if let Some(c) = self.constraint.as_mut() {
            if let Err(e) = c.mask(row).and_then(|()| check_any_allowed(row)) {
                return self.end_failed(e).map(|stop| (stop, None));
            }
        }
        let id = self.sampler.sample(row, self.tokens.len() as u64);
        let lp = self.logprobs.map(|top| {
            let (logprob, top) = logprobs(row, id, top);
            TokenLogprobs { logprob, top }
        });
        Ok((id, lp))
    }

    /// Takes token `id`: its text piece, and whether the stream ends with it.
    pub(super) fn accept(
        &mut self,
        tokenizer: Option<&Tokenizer>,
        id: u32,
        logprobs: Option<TokenLogprobs>,
    ) -> Result<TokenEvent> {
        let index = self.tokens.len();
        self.tokens.push(id);
        self.history.push(id);
        let mut finished = false;
        if let Some(c) = self.constraint.as_mut().filter(|_| self.failure.is_none()) {
            match c.accept(id) {
                Ok(()) => finished = c.is_finished(),
                Err(e) => self.failure = Some(constraint_failure(e, index)),
            }
        }
        let text = match tokenizer {
            Some(t) => self.text.push(t, id)?.map(|piece| self.stops.push(&piece)),
            None => None,
        };
        if self.failure.is_some() {
            self.finish = Some(FinishReason::Failed);
        } else if self.stop_ids.contains(&id) || self.stops.stopped() || finished {
            self.finish = Some(FinishReason::Stop);
        } else if self.tokens.len() >= self.max_new_tokens {
            self.finish = Some(FinishReason::Length);
        }
        Ok(TokenEvent {
            index,
            id,
            text,
            logprobs,
        })
    }
}

impl Stream {
    /// Records why its constraint cannot go on and gives the token that ends it (its first
    /// stop id): the failure stays this stream's, its neighbours in the batch go on. A
    /// model without stop ids has no such token: then the error ends the step.
    fn end_failed(&mut self, e: Error) -> Result<u32> {
        let Some(&stop) = self.stop_ids.first() else {
            return Err(e);
        };
        self.failure = Some(constraint_failure(e, self.tokens.len()));
        Ok(stop)
    }
}

/// A constraint's error, said to come from the output position it stopped at.
fn constraint_failure(e: Error, position: usize) -> Error {
    e.within(format!("the token constraint at output token {position}"))
}

/// Fails when a masked row allows no token at all (every logit -inf or NaN): sampling from
/// it would pick an arbitrary token the constraint forbids.
fn check_any_allowed(row: &[f32]) -> Result<()> {
    if row.iter().any(|l| *l > f32::NEG_INFINITY) {
        return Ok(());
    }
    Err(Error::invalid(
        OP,
        "constraint's mask",
        "at least one token allowed next",
        "none (the grammar cannot continue)",
    ))
}

impl Session {
    /// Rows one batched step may hold (the model's largest plan).
    pub fn max_batch(&self) -> Result<usize> {
        let o = &self.model()?.options;
        Ok(o.prefill_chunk.max(o.max_verify_rows))
    }

    /// Starts `request` in a free KV slot: checks its budget, prefills its prompt (alone)
    /// and takes the first token. Fails when every slot is held. A speculative request
    /// ([`GenerateRequest::speculative`]) needs the assistant and drafts
    /// `draft_tokens` per round (fixed: the adaptive schedule is for one stream alone);
    /// advance such streams with [`Session::step_rounds`].
    pub async fn start_stream(
        &mut self,
        request: &GenerateRequest,
    ) -> Result<(Stream, TokenEvent)> {
        self.start_stream_with(request, StreamExtras::default())
            .await
    }

    /// [`Session::start_stream`] with penalties, bias, min-p, log-probabilities or a
    /// token constraint.
    pub async fn start_stream_with(
        &mut self,
        request: &GenerateRequest,
        mut extras: StreamExtras,
    ) -> Result<(Stream, TokenEvent)> {
        self.check_gpu_errors()?;
        if request.speculative && self.assistant.is_none() {
            return Err(Error::invalid(
                OP,
                "speculative decoding",
                "an assistant loaded (loadAssistant, --assistant, or an artifact with one)",
                "none",
            ));
        }
        let prompt = self.prompt_ids(request)?;
        let sampling = SamplingParams {
            temperature: request.temperature,
            top_k: request.top_k,
            top_p: request.top_p,
            seed: request.seed,
            repeat_penalty: request.repeat_penalty,
        };
        sampling.validate()?;
        // The request's repetition penalty is the adjustment's (one implementation, in
        // `TokenHistory::apply`); the two may not disagree.
        let repeat = sampling.adjust().repetition_penalty;
        if repeat != 1.0 {
            let given = extras.adjust.repetition_penalty;
            if given != 1.0 && given != repeat {
                return Err(Error::invalid(
                    OP,
                    "repetition penalty",
                    format!("one value (the request's repeat_penalty is {repeat})"),
                    format!("the stream's repetition_penalty {given}"),
                ));
            }
            extras.adjust.repetition_penalty = repeat;
        }
        let sampler = Sampler::new(sampling)?.with_min_p(extras.min_p)?;
        let host = !sampling.is_greedy() || extras.needs_logits();
        let target = self.target.as_mut().ok_or_else(super::no_model)?;
        extras
            .adjust
            .validate(target.state.model().spec.config.vocab_size)?;
        super::check_budget(
            prompt.len(),
            request.max_new_tokens,
            target.state.model().options.max_context,
        )?;
        if request.max_new_tokens == 0 {
            return Err(Error::invalid(
                OP,
                "max new tokens of a stream",
                "at least 1",
                0,
            ));
        }
        let mut seq = target.state.new_sequence()?;
        let want = if host {
            Want::LastLogits
        } else {
            Want::NextToken
        };
        // The model prefills its active sequence: lend it this one, and take it back
        // whatever the forward did.
        target.state.swap_sequence(&mut seq)?;
        let out = target.state.forward(&self.ctx, &prompt, want).await;
        target.state.swap_sequence(&mut seq)?;
        let mut out = out?;
        let drafting = match self.assistant.as_ref().filter(|_| request.speculative) {
            Some(assistant) => Some(Drafting::after_prefill(
                &self.ctx,
                &target.state,
                assistant,
                request.draft_tokens,
                prompt.len(),
            )?),
            None => None,
        };
        let mut stream = Stream {
            seq,
            sampler,
            host,
            adjust: extras.adjust,
            history: TokenHistory::new(&prompt),
            logprobs: extras.logprobs,
            constraint: extras.constraint,
            text: text_stream(target.text.tokenizer.as_deref(), request),
            stops: StopStrings::new(&request.stop),
            stop_ids: target.stop_ids.clone(),
            tokens: Vec::new(),
            prompt_tokens: prompt.len(),
            max_new_tokens: request.max_new_tokens,
            finish: None,
            failure: None,
            drafting,
        };
        let (first, logprobs) = if host {
            stream.choose(&mut out.logits)?
        } else {
            (out.next[0], None)
        };
        let event = stream.accept(target.text.tokenizer.as_deref(), first, logprobs)?;
        self.check_gpu_errors()?;
        Ok((stream, event))
    }

    /// Advances every stream of `streams` (none finished) by one token in ONE forward of
    /// `streams.len()` rows; returns each one's event, in order.
    pub async fn step_streams(&mut self, streams: &mut [&mut Stream]) -> Result<Vec<TokenEvent>> {
        self.check_gpu_errors()?;
        check_running(streams)?;
        if let Some(i) = streams.iter().position(|s| s.drafting.is_some()) {
            return Err(Error::invalid(
                OP,
                format!("stream {i} of a plain batched step"),
                "a plain stream (speculative ones advance with step_rounds)",
                "a speculative stream",
            ));
        }
        let target = self.target.as_mut().ok_or_else(super::no_model)?;
        let vocab = target.state.model().spec.config.vocab_size;
        let want = if streams.iter().any(|s| s.host) {
            Want::AllLogits
        } else {
            Want::AllNext
        };
        let mut out = {
            let mut rows: Vec<(&mut Sequence, u32)> = streams
                .iter_mut()
                .map(|s| {
                    let last = *s
                        .tokens
                        .last()
                        .expect("a started stream has its first token");
                    (&mut s.seq, last)
                })
                .collect();
            target
                .state
                .forward_batch(&self.ctx, &mut rows, want)
                .await?
        };
        let tokenizer = target.text.tokenizer.as_deref();
        let events = streams
            .iter_mut()
            .enumerate()
            .map(|(i, s)| {
                let (id, logprobs) = if s.host {
                    s.choose(&mut out.logits[i * vocab..(i + 1) * vocab])?
                } else {
                    (out.next[i], None)
                };
                s.accept(tokenizer, id, logprobs)
            })
            .collect::<Result<Vec<_>>>()?;
        self.check_gpu_errors()?;
        Ok(events)
    }
}

/// Refuses a batched step over a finished stream.
pub(super) fn check_running(streams: &[&mut Stream]) -> Result<()> {
    match streams.iter().position(|s| s.finish.is_some()) {
        Some(i) => Err(Error::invalid(
            OP,
            format!("stream {i} of a batched step"),
            "one still decoding",
            "a finished stream",
        )),
        None => Ok(()),
    }
}
