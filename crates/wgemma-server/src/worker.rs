//! The model thread of `wgemma serve`: it owns the [`Session`] (GPU context, target, assistant),
//! takes jobs from a bounded queue and streams each one's text back over a channel. A job
//! whose channel is closed (its client went away) is skipped, or dropped after the step in
//! flight, which gives its KV slot back at once.
//!
//! Continuous batching: up to `--parallel` sequences decode together, one forward of M =
//! (active sequences) rows per step, each row over its own KV slot; a new request is
//! prefilled into a free slot between steps and joins the next step, a finished or
//! cancelled one leaves. With an assistant loaded, every request drafts speculatively in
//! its own slot and a step is one round of every active stream: each drafts its k tokens,
//! and all their verify rows run in one forward ([`Session::step_rounds`]); a stream takes
//! one or more tokens per step, each equal to its plain run's (penalties, bias, min-p,
//! log-probabilities and grammars apply to every verified row as they would plainly).

use crate::error::ApiError;
use crate::metrics::{Metrics, SlotState};
use crate::openai::request::{Parsed, Prompt};
use crate::openai::structured::GrammarConstraint;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, SyncSender, TryRecvError};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc::UnboundedSender;
use wgemma::session::{
    FinishReason, GenerateRequest, Session, Stream, StreamExtras, TokenConstraint, TokenEvent,
    TokenLogprobs,
};

/// What the model thread tells a request's handler, in order: `Started` or `Failed`, then
/// `Token`s, then `Done` (or `Failed`).
#[derive(Debug)]
pub enum Event {
    Started {
        prompt_tokens: usize,
    },
    /// A token's new text (possibly empty) and, when asked for, its log-probabilities.
    Token {
        text: String,
        id: u32,
        logprobs: Option<TokenLogprobs>,
    },
    Done {
        finish: FinishReason,
        completion_tokens: usize,
        /// The whole text (for a non-streaming answer).
        text: String,
        /// Text never sent as a `Token` event (held back as a possible stop string's start).
        tail: String,
        /// From the request's arrival to its first token, and from there to its last.
        ttft: Duration,
        decode: Duration,
    },
    Failed(ApiError),
}

pub struct Job {
    /// The response id (also in the log line and `/slots`).
    pub id: String,
    pub parsed: Parsed,
    /// The grammar of a structured-output request or a forced tool call.
    pub constraint: Option<GrammarConstraint>,
    pub events: UnboundedSender<Event>,
    pub enqueued: Instant,
}

/// Runs jobs until every sender of `jobs` is gone, up to `parallel` at a time (drafting
/// `draft_tokens` per round when the session has an assistant).
pub fn run(
    mut session: Session,
    jobs: Receiver<Job>,
    metrics: Arc<Metrics>,
    parallel: usize,
    draft_tokens: usize,
) {
    let speculative = session.has_assistant().then_some(draft_tokens);
    let mut active: Vec<Active> = Vec::new();
    loop {
        // Admit waiting jobs into free slots; block only when nothing is decoding.
        while active.len() < parallel {
            let job = if active.is_empty() {
                match jobs.recv() {
                    Ok(job) => job,
                    Err(_) => return,
                }
            } else {
                match jobs.try_recv() {
                    Ok(job) => job,
                    Err(TryRecvError::Empty) => break,
                    // The server is stopping: finish the sequences in flight.
                    Err(TryRecvError::Disconnected) => break,
                }
            };
            if let Some(job) = take(job, &metrics) {
                if let Some(a) = admit(&mut session, job, &metrics, speculative) {
                    active.push(a);
                }
            }
            metrics
                .active_sequences
                .store(active.len() as u64, Ordering::Relaxed);
        }
        step(&mut session, &mut active, &metrics);
    }
}

/// One batched step of every active stream (clients that went away leave first); finished
/// streams leave after it.
fn step(session: &mut Session, active: &mut Vec<Active>, metrics: &Metrics) {
    active.retain(|a| {
        let open = !a.events.is_closed();
        if !open {
            metrics.cancelled.fetch_add(1, Ordering::Relaxed);
            metrics.free_slot(a.stream.slot());
        }
        open
    });
    metrics
        .active_sequences
        .store(active.len() as u64, Ordering::Relaxed);
    if active.is_empty() {
        return;
    }
    metrics
        .peak_batch
        .fetch_max(active.len() as u64, Ordering::Relaxed);
    let started = Instant::now();
    let drafts_before = draft_counts(active);
    let stepped = {
        let mut streams: Vec<&mut Stream> = active.iter_mut().map(|a| &mut a.stream).collect();
        if session.has_assistant() {
            pollster::block_on(session.step_rounds(&mut streams))
        } else {
            pollster::block_on(session.step_streams(&mut streams))
                .map(|events| events.into_iter().map(|e| vec![e]).collect())
        }
    };
    metrics
        .busy_us
        .fetch_add(started.elapsed().as_micros() as u64, Ordering::Relaxed);
    match stepped {
        Ok(events) => {
            let (drafted, accepted) = draft_counts(active);
            metrics
                .drafted
                .fetch_add((drafted - drafts_before.0) as u64, Ordering::Relaxed);
            metrics
                .accepted
                .fetch_add((accepted - drafts_before.1) as u64, Ordering::Relaxed);
            let now = Instant::now();
            for (a, round) in active.iter_mut().zip(events) {
                metrics
                    .generated_tokens
                    .fetch_add(round.len() as u64, Ordering::Relaxed);
                // Tokens of one round arrive together: the time between them is the
                // round's, shared.
                let each = (now - a.last_token) / round.len().max(1) as u32;
                for event in round {
                    metrics.token_latency.observe(each);
                    a.send_token(event);
                }
                a.last_token = now;
                metrics.set_slot(a.slot_state());
            }
        }
        Err(e) => {
            // A failed forward leaves every sequence of it in doubt: all of them end.
            for a in active.drain(..) {
                metrics.free_slot(a.stream.slot());
                let _ = a.events.send(Event::Failed(ApiError::internal(format!(
                    "generation failed: {e}"
                ))));
            }
        }
    }
    active.retain_mut(|a| !a.finish_if_done(metrics));
    metrics
        .active_sequences
        .store(active.len() as u64, Ordering::Relaxed);
}

/// Drafts proposed and accepted so far by the active streams (for the metrics' counters).
fn draft_counts(active: &[Active]) -> (usize, usize) {
    active
        .iter()
        .filter_map(|a| a.stream.draft_counts())
        .fold((0, 0), |(d, a), (dd, aa)| (d + dd, a + aa))
}

/// A job off the queue, unless its client has gone already.
fn take(job: Job, metrics: &Metrics) -> Option<Job> {
    metrics.queue_depth.fetch_sub(1, Ordering::Relaxed);
    if job.events.is_closed() {
        metrics.cancelled.fetch_add(1, Ordering::Relaxed);
        None
    } else {
        Some(job)
    }
}

/// A request decoding in the batch.
struct Active {
    id: String,
    stream: Stream,
    events: UnboundedSender<Event>,
    /// The request asked for log-probabilities (every token is sent, text or not).
    logprobs: bool,
    /// The request's field its grammar comes from (what a grammar failure names).
    constraint_param: Option<&'static str>,
    /// Tokens (with log-probabilities) whose text is held back as a possible stop string.
    held: Vec<Event>,
    ttft: Duration,
    first_token: Instant,
    last_token: Instant,
}

impl Active {
    fn send_token(&mut self, event: TokenEvent) {
        // The token that ends a failed stream is no answer's token.
        if self.stream.failure().is_some() {
            return;
        }
        let text = event.text.unwrap_or_default();
        if !self.logprobs {
            if !text.is_empty() {
                let _ = self.events.send(Event::Token {
                    text,
                    id: event.id,
                    logprobs: None,
                });
            }
            return;
        }
        let token = Event::Token {
            text,
            id: event.id,
            logprobs: event.logprobs,
        };
        // A token with no text yet may be the start of a stop string: its log-probability
        // waits until text follows it (then it is the answer's) or a stop string ends the
        // stream (then it is not).
        if matches!(&token, Event::Token { text, .. } if text.is_empty()) {
            self.held.push(token);
            return;
        }
        for held in self.held.drain(..) {
            let _ = self.events.send(held);
        }
        let _ = self.events.send(token);
    }

    /// At the end: the held tokens are the answer's unless a stop string cut them off.
    fn release_held(&mut self) {
        let held = std::mem::take(&mut self.held);
        if !self.stream.stopped_by_string() {
            for token in held {
                let _ = self.events.send(token);
            }
        }
    }

    fn slot_state(&self) -> SlotState {
        SlotState {
            id: self.stream.slot(),
            request: Some(self.id.clone()),
            speculative: self.stream.is_speculative(),
            prompt_tokens: self.stream.prompt_tokens(),
            generated_tokens: self.stream.tokens().len(),
        }
    }

    /// Sends `Done` if the stream has ended (and frees its slot's record); true if it has.
    fn finish_if_done(&mut self, metrics: &Metrics) -> bool {
        let Some(finish) = self.stream.finish_reason() else {
            return false;
        };
        metrics.free_slot(self.stream.slot());
        if let Some(failure) = self.stream.failure() {
            // Its own grammar could not go on: this request's error alone (its
            // neighbours in the batch decode on), naming the field the grammar came from.
            let param = self.constraint_param.unwrap_or("response_format");
            let _ = self.events.send(Event::Failed(ApiError::invalid(
                param,
                format!(
                    "{param}: the answer's grammar could not go on after {} tokens ({failure})",
                    self.stream.tokens().len().saturating_sub(1)
                ),
            )));
            return true;
        }
        self.release_held();
        let tail = self.stream.finish_text();
        let _ = self.events.send(Event::Done {
            finish,
            completion_tokens: self.stream.tokens().len(),
            text: self.stream.text().to_string(),
            tail,
            ttft: self.ttft,
            decode: self.last_token - self.first_token,
        });
        true
    }
}

/// Checks a job's prompt and budget, prefills it into a free slot and sends its first
/// token; None when it failed or already ended. `speculative`: drafts per round.
fn admit(
    session: &mut Session,
    job: Job,
    metrics: &Metrics,
    speculative: Option<usize>,
) -> Option<Active> {
    let events = job.events;
    let (mut request, prompt_tokens) = match prepare(session, &job.parsed, speculative.is_some()) {
        Ok(r) => r,
        Err(e) => {
            let _ = events.send(Event::Failed(e));
            return None;
        }
    };
    if let Some(k) = speculative {
        request.draft_tokens = k;
    }
    if events.send(Event::Started { prompt_tokens }).is_err() {
        metrics.cancelled.fetch_add(1, Ordering::Relaxed);
        return None;
    }
    let s = &job.parsed.sampling;
    let constraint_param = job.constraint.as_ref().map(GrammarConstraint::param);
    let extras = StreamExtras {
        adjust: s.adjust.clone(),
        min_p: s.min_p,
        logprobs: s.logprobs,
        constraint: job
            .constraint
            .map(|c| Box::new(c) as Box<dyn TokenConstraint>),
    };
    let started = Instant::now();
    let out = pollster::block_on(session.start_stream_with(&request, extras));
    metrics
        .busy_us
        .fetch_add(started.elapsed().as_micros() as u64, Ordering::Relaxed);
    let (stream, first) = match out {
        Ok(out) => out,
        Err(e) => {
            let _ = events.send(Event::Failed(ApiError::internal(format!(
                "generation failed: {e}"
            ))));
            return None;
        }
    };
    // From the request's arrival: under load this includes the time queued.
    let ttft = job.enqueued.elapsed();
    metrics.ttft.observe(ttft);
    metrics
        .prompt_tokens
        .fetch_add(prompt_tokens as u64, Ordering::Relaxed);
    metrics.generated_tokens.fetch_add(1, Ordering::Relaxed);
    let now = Instant::now();
    let mut active = Active {
        id: job.id,
        stream,
        events,
        logprobs: s.logprobs.is_some(),
        constraint_param,
        held: Vec::new(),
        ttft,
        first_token: now,
        last_token: now,
    };
    active.send_token(first);
    metrics.set_slot(active.slot_state());
    if active.finish_if_done(metrics) {
        return None;
    }
    Some(active)
}

/// The session request of a parsed body, with the prompt still to be tokenised.
fn request_of(parsed: &Parsed, speculative: bool) -> GenerateRequest {
    let s = &parsed.sampling;
    let mut request = GenerateRequest {
        temperature: s.temperature,
        top_p: s.top_p,
        top_k: s.top_k,
        seed: s.seed,
        stop: s.stop.clone(),
        speculative,
        keep_tool_markers: s.declares_tools(),
        ..GenerateRequest::default()
    };
    match &parsed.prompt {
        Prompt::Messages(m) => request.messages = Some(m.clone()),
        Prompt::Text(t) => request.prompt = Some(t.clone()),
        Prompt::Ids(ids) => request.prompt_ids = Some(ids.clone()),
    }
    request
}

/// The session request of a job with its prompt tokenised once and checked: a template's
/// refusal, a token outside the vocabulary and a budget beyond the context are the
/// client's errors (400), found before anything runs. Returns it with the prompt's length.
fn prepare(
    session: &Session,
    parsed: &Parsed,
    speculative: bool,
) -> Result<(GenerateRequest, usize), ApiError> {
    let mut request = request_of(parsed, speculative);
    let prompt_param = match parsed.prompt {
        Prompt::Messages(_) => "messages",
        _ => "prompt",
    };
    let prompt = session
        .prompt_ids(&request)
        .map_err(|e| ApiError::invalid(prompt_param, format!("{prompt_param}: {e}")))?;
    let model = session
        .model()
        .map_err(|e| ApiError::internal(e.to_string()))?;
    let (context, vocab) = (model.options.max_context, model.spec.config.vocab_size);
    if let Some((i, t)) = prompt
        .iter()
        .enumerate()
        .find(|(_, &t)| t as usize >= vocab)
    {
        return Err(ApiError::field(
            &format!("{prompt_param}[{i}]"),
            format!("a token id < {vocab} (the vocabulary size)"),
            t,
        ));
    }
    if let Some(&(id, _)) = parsed
        .sampling
        .adjust
        .logit_bias
        .iter()
        .find(|(id, _)| *id as usize >= vocab)
    {
        return Err(ApiError::field(
            "logit_bias",
            format!("token ids < {vocab} (the vocabulary size)"),
            id,
        ));
    }
    let room = context.saturating_sub(prompt.len());
    if room == 0 {
        // The prompt alone fills the context: its fault, whatever max_tokens says.
        return Err(ApiError::field(
            prompt_param,
            format!("fewer than {context} tokens (the context)"),
            format!("{} tokens", prompt.len()),
        ));
    }
    let max_new = match parsed.sampling.max_tokens {
        Some(m) if m > room => {
            return Err(ApiError::field(
                "max_tokens",
                format!(
                "at most {room} (the context of {context} positions less the prompt's {} tokens)",
                prompt.len()
            ),
                m,
            ))
        }
        Some(m) => m,
        None => room,
    };
    request.max_new_tokens = max_new;
    request.messages = None;
    request.prompt = None;
    let prompt_tokens = prompt.len();
    request.prompt_ids = Some(prompt);
    Ok((request, prompt_tokens))
}

/// A queue of at most `capacity` waiting jobs (a full queue refuses, it does not pile up).
pub fn queue(capacity: usize) -> (SyncSender<Job>, Receiver<Job>) {
    std::sync::mpsc::sync_channel(capacity)
}
