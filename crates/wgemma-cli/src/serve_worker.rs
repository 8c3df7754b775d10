//! The model thread of `wgemma serve`: it owns the [`Session`] (GPU context, target, assistant),
//! takes jobs from a bounded queue and streams each one's text back over a channel. A job
//! whose channel is closed (its client went away) is skipped, or stopped after the token in
//! flight, which frees its sequence at once.
//!
//! Sequences run one at a time: the model holds one KV cache, so `--parallel` sequences take
//! turns at the queue rather than sharing decode steps.

use crate::serve_api::{ApiError, Parsed, Prompt};
use crate::serve_metrics::Metrics;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, SyncSender};
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::mpsc::UnboundedSender;
use wgemma::session::{FinishReason, GenerateRequest, Session};

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

/// Runs jobs until every sender of `jobs` is gone.
pub fn run(mut session: Session, jobs: Receiver<Job>, metrics: Arc<Metrics>) {
    while let Ok(job) = jobs.recv() {
        metrics.queue_depth.fetch_sub(1, Ordering::Relaxed);
        if job.events.is_closed() {
            metrics.cancelled.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        run_job(&mut session, job, &metrics);
    }
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

fn run_job(session: &mut Session, job: Job, metrics: &Metrics) {
    let events = job.events;
    let fail = |e: ApiError| {
        let _ = events.send(Event::Failed(e));
    };
    let mut request = request_of(&job.parsed, session.has_assistant());
    let prompt_param = match job.parsed.prompt {
        Prompt::Messages(_) => "messages",
        _ => "prompt",
    };
    // Tokenise here, once: a template's refusal and the context budget are the client's
    // errors (400), found before anything runs.
    let prompt = match session.prompt_ids(&request) {
        Ok(ids) => ids,
        Err(e) => {
            return fail(ApiError::invalid(
                prompt_param,
                format!("{prompt_param}: {e}"),
            ))
        }
    };
    let (context, vocab) = match session.model() {
        Ok(m) => (m.options.max_context, m.spec.config.vocab_size),
        Err(e) => return fail(ApiError::internal(e.to_string())),
    };
    if let Some((i, t)) = prompt
        .iter()
        .enumerate()
        .find(|(_, &t)| t as usize >= vocab)
    {
        return fail(ApiError::field(
            &format!("{prompt_param}[{i}]"),
            format!("a token id < {vocab} (the vocabulary size)"),
            t,
        ));
    }
    let room = context.saturating_sub(prompt.len());
    let max_new = match job.parsed.sampling.max_tokens {
        Some(m) if m > room => return fail(ApiError::field(
            "max_tokens",
            format!(
                "at most {room} (the context of {context} positions less the prompt's {} tokens)",
                prompt.len()
            ),
            m,
        )),
        Some(m) => m,
        None if room == 0 => {
            return fail(ApiError::field(
                prompt_param,
                format!("fewer than {context} tokens (the context)"),
                format!("{} tokens", prompt.len()),
            ))
        }
        None => room,
    };
    request.max_new_tokens = max_new;
    request.messages = None;
    request.prompt = None;
    let prompt_tokens = prompt.len();
    request.prompt_ids = Some(prompt);
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
