//! The model thread of `wgemma serve`: it owns the [`Session`] (GPU context, target, assistant),
//! takes jobs from a bounded queue and streams each one's text back over a channel. A job
//! whose channel is closed (its client went away) is skipped, or dropped after the step in
//! flight, which gives its KV slot back at once.
//!
//! Continuous batching: up to `--parallel` sequences decode together, one forward of M =
//! (active sequences) rows per step, each row over its own KV slot; a new request is
//! prefilled into a free slot between steps and joins the next step, a finished or
//! cancelled one leaves. With an assistant loaded, requests draft speculatively and run one
//! at a time (a round's drafts and verify are per sequence; batching rounds is not done).

use crate::serve_api::{ApiError, Parsed, Prompt};
use crate::serve_metrics::Metrics;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, SyncSender, TryRecvError};
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::mpsc::UnboundedSender;
use wgemma::session::{FinishReason, GenerateRequest, Session, Stream, TokenEvent};

/// What the model thread tells a request's handler, in order: `Started` or `Failed`, then
/// `Text` pieces, then `Done` (or `Failed`).
#[derive(Debug)]
pub enum Event {
    Started {
        prompt_tokens: usize,
    },
    Text(String),
    Done {
        finish: FinishReason,
        completion_tokens: usize,
        /// The whole text (for a non-streaming answer).
        text: String,
        /// Text never sent as a `Text` event (held back as a possible stop string's start).
        tail: String,
    },
    Failed(ApiError),
}

pub struct Job {
    pub parsed: Parsed,
    pub events: UnboundedSender<Event>,
    pub enqueued: Instant,
}

/// Runs jobs until every sender of `jobs` is gone: batched, or one at a time when the
/// session drafts with an assistant.
pub fn run(
    mut session: Session,
    jobs: Receiver<Job>,
    metrics: Arc<Metrics>,
    parallel: usize,
    draft_tokens: usize,
) {
    if session.has_assistant() {
        while let Ok(job) = jobs.recv() {
            if let Some(job) = take(job, &metrics) {
                run_job(&mut session, job, &metrics, draft_tokens);
            }
        }
        return;
    }
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
                if let Some(a) = admit(&mut session, job, &metrics) {
                    active.push(a);
                }
            }
            metrics
                .active_sequences
                .store(active.len() as u64, Ordering::Relaxed);
        }
        // Clients that went away leave now: their slots come back before the step.
        active.retain(|a| {
            let open = !a.events.is_closed();
            if !open {
                metrics.cancelled.fetch_add(1, Ordering::Relaxed);
            }
            open
        });
        metrics
            .active_sequences
            .store(active.len() as u64, Ordering::Relaxed);
        if active.is_empty() {
            continue;
        }
        metrics
            .peak_batch
            .fetch_max(active.len() as u64, Ordering::Relaxed);
        let started = Instant::now();
        let stepped = {
            let mut streams: Vec<&mut Stream> = active.iter_mut().map(|a| &mut a.stream).collect();
            pollster::block_on(session.step_streams(&mut streams))
        };
        metrics
            .busy_us
            .fetch_add(started.elapsed().as_micros() as u64, Ordering::Relaxed);
        match stepped {
            Ok(events) => {
                metrics
                    .generated_tokens
                    .fetch_add(events.len() as u64, Ordering::Relaxed);
                for (a, event) in active.iter_mut().zip(&events) {
                    a.send_text(event);
                }
            }
            Err(e) => {
                // A failed forward leaves every sequence of it in doubt: all of them end.
                for a in active.drain(..) {
                    let _ = a.events.send(Event::Failed(ApiError::internal(format!(
                        "generation failed: {e}"
                    ))));
                }
            }
        }
        active.retain_mut(|a| !a.finish_if_done());
        metrics
            .active_sequences
            .store(active.len() as u64, Ordering::Relaxed);
    }
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
    stream: Stream,
    events: UnboundedSender<Event>,
}

impl Active {
    fn send_text(&self, event: &TokenEvent) {
        if let Some(text) = event.text.as_ref().filter(|t| !t.is_empty()) {
            let _ = self.events.send(Event::Text(text.clone()));
        }
    }

    /// Sends `Done` if the stream has ended; true if it has.
    fn finish_if_done(&mut self) -> bool {
        let Some(finish) = self.stream.finish_reason() else {
            return false;
        };
        let tail = self.stream.finish_text();
        let _ = self.events.send(Event::Done {
            finish,
            completion_tokens: self.stream.tokens().len(),
            text: self.stream.text().to_string(),
            tail,
        });
        true
    }
}

/// Checks a job's prompt and budget, prefills it into a free slot and sends its first
/// token; None when it failed or already ended.
fn admit(session: &mut Session, job: Job, metrics: &Metrics) -> Option<Active> {
    let events = job.events;
    let (request, prompt_tokens) = match prepare(session, &job.parsed, false) {
        Ok(r) => r,
        Err(e) => {
            let _ = events.send(Event::Failed(e));
            return None;
        }
    };
    if events.send(Event::Started { prompt_tokens }).is_err() {
        metrics.cancelled.fetch_add(1, Ordering::Relaxed);
        return None;
    }
    let started = Instant::now();
    let out = pollster::block_on(session.start_stream(&request));
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
    metrics
        .ttft_us
        .fetch_add(job.enqueued.elapsed().as_micros() as u64, Ordering::Relaxed);
    metrics.ttft_count.fetch_add(1, Ordering::Relaxed);
    metrics
        .prompt_tokens
        .fetch_add(prompt_tokens as u64, Ordering::Relaxed);
    metrics.generated_tokens.fetch_add(1, Ordering::Relaxed);
    let mut active = Active { stream, events };
    active.send_text(&first);
    if active.finish_if_done() {
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

/// One speculative request, start to end (the assistant drafts for the active sequence).
fn run_job(session: &mut Session, job: Job, metrics: &Metrics, draft_tokens: usize) {
    let events = job.events;
    let fail = |e: ApiError| {
        let _ = events.send(Event::Failed(e));
    };
    let (mut request, prompt_tokens) = match prepare(session, &job.parsed, true) {
        Ok(r) => r,
        Err(e) => return fail(e),
    };
    request.draft_tokens = draft_tokens;
    if events.send(Event::Started { prompt_tokens }).is_err() {
        metrics.cancelled.fetch_add(1, Ordering::Relaxed);
        return;
    }

    metrics.active_sequences.fetch_add(1, Ordering::Relaxed);
    let started = Instant::now();
    let mut first_token = true;
    let mut on_token = |t: &wgemma::session::TokenEvent| {
        if first_token {
            first_token = false;
            // From the request's arrival: under load this includes the time queued.
            let ttft = job.enqueued.elapsed().as_micros() as u64;
            metrics.ttft_us.fetch_add(ttft, Ordering::Relaxed);
            metrics.ttft_count.fetch_add(1, Ordering::Relaxed);
        }
        match &t.text {
            Some(text) if !text.is_empty() => events.send(Event::Text(text.clone())).is_ok(),
            _ => !events.is_closed(),
        }
    };
    let result = pollster::block_on(session.generate(&request, &mut on_token));
    metrics
        .busy_us
        .fetch_add(started.elapsed().as_micros() as u64, Ordering::Relaxed);
    metrics.active_sequences.fetch_sub(1, Ordering::Relaxed);
    match result {
        Ok(out) => {
            metrics
                .prompt_tokens
                .fetch_add(prompt_tokens as u64, Ordering::Relaxed);
            metrics
                .generated_tokens
                .fetch_add(out.tokens.len() as u64, Ordering::Relaxed);
            if let (Some(d), Some(a)) = (out.stats.drafted, out.stats.accepted) {
                metrics.drafted.fetch_add(d as u64, Ordering::Relaxed);
                metrics.accepted.fetch_add(a as u64, Ordering::Relaxed);
            }
            if out.finish_reason == FinishReason::Cancelled {
                metrics.cancelled.fetch_add(1, Ordering::Relaxed);
                return;
            }
            let _ = events.send(Event::Done {
                finish: out.finish_reason,
                completion_tokens: out.tokens.len(),
                text: out.text.unwrap_or_default(),
                tail: out.unstreamed_text,
            });
        }
        Err(e) => fail(ApiError::internal(format!("generation failed: {e}"))),
    }
}

/// A queue of at most `capacity` waiting jobs (a full queue refuses, it does not pile up).
pub fn queue(capacity: usize) -> (SyncSender<Job>, Receiver<Job>) {
    std::sync::mpsc::sync_channel(capacity)
}
