//! The completions' answers in `wgemma serve`: a parsed request queued for the model
//! thread, its events relayed as one JSON answer or as server-sent events (with
//! log-probabilities when asked), the `x-request-id` and `x-wgemma-seed` headers, and the
//! request's one log line (id, prompt and completion tokens, time to first token, tokens/s,
//! finish reason), written when the answer is complete.

use crate::app::{unix_now, App, Logged, REQUEST_ID};
use crate::error::{clip, ApiError};
use crate::handlers::prompt;
use crate::openai::request::Parsed;
use crate::openai::response::AnswerHeader;
use crate::openai::response::{self, Endpoint, TokenLogprob};
use crate::openai::response_format::ResponseFormat;
use crate::openai::sampling::Sampling;
use crate::openai::structured::GrammarConstraint;
use crate::openai::tool_reply;
use crate::openai::tool_stream::{self, ToolStream};
use crate::worker::{Event, Job};
use axum::http::HeaderValue;
use axum::response::sse::{Event as SseEvent, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::atomic::Ordering;
use std::sync::mpsc::TrySendError;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc::UnboundedReceiver;
use wgemma::session::{TextTools, TokenLogprobs};

/// One request's log line, written when its answer is complete.
struct RequestLog {
    id: String,
    endpoint: Endpoint,
    user: Option<String>,
    prompt_tokens: usize,
}

/// Characters of a client's field (`user`, `safety_identifier`) a log line keeps: one
/// request's line stays a line, whatever the client sends.
pub const MAX_LOG_FIELD_CHARS: usize = 128;

impl RequestLog {
    fn done(&self, completion_tokens: usize, finish: &str, ttft: Duration, decode: Duration) {
        eprintln!(
            "{}",
            self.done_line(completion_tokens, finish, ttft, decode)
        );
    }

    fn done_line(
        &self,
        completion_tokens: usize,
        finish: &str,
        ttft: Duration,
        decode: Duration,
    ) -> String {
        let tok_s = if completion_tokens > 1 && decode > Duration::ZERO {
            (completion_tokens - 1) as f64 / decode.as_secs_f64()
        } else {
            0.0
        };
        format!(
            "wgemma serve: {} POST {} 200 prompt {} tok, completion {} tok, ttft {:.1} ms, \
             {tok_s:.1} tok/s, finish {finish}{}",
            self.id,
            self.endpoint.path(),
            self.prompt_tokens,
            completion_tokens,
            ttft.as_secs_f64() * 1e3,
            self.user_part(),
        )
    }

    fn failed(&self, e: &ApiError) {
        eprintln!("{}", self.failed_line(e));
    }

    fn failed_line(&self, e: &ApiError) -> String {
        format!(
            "wgemma serve: {} POST {} {} {}{}",
            self.id,
            self.endpoint.path(),
            e.status.as_u16(),
            clip(&e.message, MAX_LOG_FIELD_CHARS * 4),
            self.user_part(),
        )
    }

    fn user_part(&self) -> String {
        self.user.as_ref().map_or(String::new(), |u| {
            format!(", user {:?}", clip(u, MAX_LOG_FIELD_CHARS))
        })
    }
}

pub async fn answer(
    app: Arc<App>,
    endpoint: Endpoint,
    parsed: Result<Parsed, ApiError>,
) -> Response {
    let id = endpoint.new_id();
    let mut log = RequestLog {
        id: id.clone(),
        endpoint,
        user: None,
        prompt_tokens: 0,
    };
    // Text prompts become token ids here, on a blocking thread (the guard's byte-length
    // refusal first), never on the model thread.
    let parsed = match parsed {
        Ok(parsed) => match app.ready() {
            Ok(ready) => prompt::encode_prompt(&ready.encoder, parsed).await,
            Err(e) => Err(e),
        },
        Err(e) => Err(e),
    };
    let seed = parsed.as_ref().ok().map(|p| p.sampling.seed);
    let mut response = match parsed {
        Ok(parsed) => {
            log.user = parsed.sampling.user.clone();
            generate(&app, endpoint, parsed, &mut log)
                .await
                .unwrap_or_else(|e| {
                    log.failed(&e);
                    e.into_response()
                })
        }
        Err(e) => {
            log.failed(&e);
            e.into_response()
        }
    };
    app.metrics
        .count_request(endpoint.label(), response.status().as_u16());
    let headers = response.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&id) {
        headers.insert(REQUEST_ID, v);
    }
    if let Some(seed) = seed {
        headers.insert("x-wgemma-seed", HeaderValue::from(seed));
    }
    response.extensions_mut().insert(Logged);
    response
}

/// A token's log-probabilities with their text.
fn token_logprob(text: &TextTools, id: u32, lp: &TokenLogprobs) -> TokenLogprob {
    let piece = |id: u32| {
        text.tokenizer
            .as_deref()
            .and_then(|t| t.decode(&[id]).ok())
            .unwrap_or_else(|| format!("<{id}>"))
    };
    TokenLogprob {
        token: piece(id),
        logprob: lp.logprob,
        top: lp.top.iter().map(|&(t, l)| (piece(t), l)).collect(),
    }
}

/// Queues the job, waits for its start, then streams or collects its text.
async fn generate(
    app: &Arc<App>,
    endpoint: Endpoint,
    parsed: Parsed,
    log: &mut RequestLog,
) -> Result<Response, ApiError> {
    let constraint = compile_constraint(app, &parsed.sampling).await?;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let s = &parsed.sampling;
    let (stream, include_usage, want_logprobs) = (s.stream, s.include_usage, s.logprobs.is_some());
    let reads_calls = endpoint == Endpoint::Chat && s.declares_tools();
    app.metrics.queue_depth.fetch_add(1, Ordering::Relaxed);
    let job = Job {
        id: log.id.clone(),
        parsed,
        constraint,
        events: tx,
        enqueued: Instant::now(),
    };
    enqueue(app, job)?;
    let prompt_tokens = started(&mut rx).await?;
    log.prompt_tokens = prompt_tokens;
    let text_tools = app.ready()?.text.clone();
    let created = unix_now();
    if !stream {
        let mut logprobs = Vec::new();
        loop {
            match rx.recv().await {
                Some(Event::Token {
                    id, logprobs: lp, ..
                }) => {
                    if let Some(lp) = lp {
                        logprobs.push(token_logprob(&text_tools, id, &lp));
                    }
                }
                Some(Event::Done {
                    finish,
                    completion_tokens,
                    text,
                    ttft,
                    decode,
                    ..
                }) => {
                    let usage = response::usage(prompt_tokens, completion_tokens);
                    let mut finish = response::finish_reason(finish);
                    let header = AnswerHeader {
                        id: &log.id,
                        created,
                        model: &app.model_name,
                    };
                    let mut body = endpoint.response(
                        header,
                        &text,
                        finish,
                        usage,
                        endpoint.logprobs(want_logprobs.then_some(&logprobs[..]), 0),
                    );
                    if reads_calls {
                        let (message, calls) =
                            tool_reply::answer_message(&text, finish == "length");
                        finish = tool_reply::finish_with_calls(finish, calls);
                        body["choices"][0]["message"] = message;
                        body["choices"][0]["finish_reason"] = finish.into();
                    }
                    log.done(completion_tokens, finish, ttft, decode);
                    return Ok(Json(body).into_response());
                }
                Some(Event::Failed(e)) => return Err(e),
                Some(Event::Started { .. }) | None => {
                    return Err(ApiError::internal("the model thread dropped the request"))
                }
            }
        }
    }
    let mut state = SseState {
        rx,
        pending: VecDeque::new(),
        endpoint,
        created,
        model: app.model_name.clone(),
        include_usage,
        want_logprobs,
        text_tools,
        text_offset: 0,
        tools: reads_calls.then(ToolStream::default),
        log: RequestLog {
            id: log.id.clone(),
            endpoint,
            user: log.user.clone(),
            prompt_tokens,
        },
        finished: false,
    };
    if endpoint == Endpoint::Chat {
        // OpenAI's first chunk names the role, with empty content.
        let first = state.chunk(Some(""), true, None, Vec::new());
        state.pending.push_back(first);
    }
    let events = futures_util::stream::unfold(state, |mut s| async move {
        let event = s.next().await?;
        Some((Ok::<_, Infallible>(event), s))
    });
    Ok(Sse::new(events).into_response())
}

/// The grammar a request's output must follow, if any: a forced tool call's, the tools'
/// under `auto` (beside a response format, or with a strict tool), or the response format's.
async fn compile_constraint(
    app: &Arc<App>,
    sampling: &Sampling,
) -> Result<Option<GrammarConstraint>, ApiError> {
    // The grammar is compiled (or copied from the cache) here, off the model thread.
    let format = sampling.response_format.clone();
    // A vocabulary that cannot be constrained answers a constrained request with a 400.
    let tools = sampling
        .tools
        .clone()
        .filter(|t| t.constrains(format.is_some()));
    Ok(
        match (tools.is_some() || format.is_some(), &app.ready()?.grammars) {
            (false, _) => None,
            (true, Ok(grammars)) => {
                let grammars = grammars.clone();
                let compiled = tokio::task::spawn_blocking(move || match (tools, format) {
                    (Some(tools), format) => {
                        let answer = format.as_ref().map(ResponseFormat::lark_rule);
                        match tools.grammar(answer.as_deref(), grammars.special_markers())? {
                            Some(lark) => grammars.tool_constraint(&lark),
                            None => Err(ApiError::internal("tool calls without a grammar")),
                        }
                    }
                    (None, Some(format)) => grammars.constraint(&format),
                    (None, None) => Err(ApiError::internal("no grammar to compile")),
                })
                .await
                .map_err(|e| ApiError::internal(format!("compiling the grammar: {e}")))??;
                Some(compiled)
            }
            (true, Err(why)) => {
                let param = match &tools {
                    Some(t) if t.forces_call() => "tool_choice",
                    Some(_) => "tools",
                    None => "response_format",
                };
                return Err(ApiError::invalid(
                param,
                format!("{param}: constrained decoding needs a byte-level vocabulary; this model's cannot be constrained ({why})"),
            ));
            }
        },
    )
}

/// Queues `job` for the model thread, or says why it cannot wait.
fn enqueue(app: &App, job: Job) -> Result<(), ApiError> {
    if let Err(e) = app.jobs.try_send(job) {
        app.metrics.queue_depth.fetch_sub(1, Ordering::Relaxed);
        return Err(match e {
            TrySendError::Full(_) => {
                let wait = app.metrics.expected_wait_s(app.queue as u64);
                ApiError::overloaded(
                    format!(
                        "the server is busy: {} requests are waiting (--queue {}); retry in \
                         about {wait} s",
                        app.queue, app.queue
                    ),
                    wait,
                )
            }
            TrySendError::Disconnected(_) => ApiError::internal("the model thread has stopped"),
        });
    }
    Ok(())
}

/// The prompt's token count, once the model thread starts the job.
async fn started(rx: &mut UnboundedReceiver<Event>) -> Result<usize, ApiError> {
    match rx.recv().await {
        Some(Event::Started { prompt_tokens }) => Ok(prompt_tokens),
        Some(Event::Failed(e)) => Err(e),
        Some(other) => Err(ApiError::internal(format!(
            "unexpected first event {other:?}"
        ))),
        None => Err(ApiError::internal("the model thread dropped the request")),
    }
}

/// The stream of one request's server-sent events.
struct SseState {
    rx: UnboundedReceiver<Event>,
    pending: VecDeque<SseEvent>,
    endpoint: Endpoint,
    created: u64,
    model: String,
    include_usage: bool,
    want_logprobs: bool,
    text_tools: TextTools,
    /// Bytes of text sent so far (completions' `text_offset`).
    text_offset: usize,
    /// Splits a reply that may call tools into text and calls.
    tools: Option<ToolStream>,
    log: RequestLog,
    finished: bool,
}

impl Drop for SseState {
    fn drop(&mut self) {
        if !self.finished {
            eprintln!(
                "wgemma serve: {} POST {} 200 cancelled: the client went away mid-stream",
                self.log.id,
                self.log.endpoint.path()
            );
        }
    }
}

impl SseState {
    fn header(&self) -> AnswerHeader<'_> {
        AnswerHeader {
            id: &self.log.id,
            created: self.created,
            model: &self.model,
        }
    }

    fn chunk(
        &mut self,
        text: Option<&str>,
        first: bool,
        finish: Option<&str>,
        logprobs: Vec<TokenLogprob>,
    ) -> SseEvent {
        let lp = self.endpoint.logprobs(
            (self.want_logprobs && !logprobs.is_empty()).then_some(&logprobs[..]),
            self.text_offset,
        );
        self.text_offset += text.map_or(0, str::len);
        let v = self.endpoint.chunk(self.header(), text, first, finish, lp);
        SseEvent::default().data(v.to_string())
    }

    /// Queues a chunk per `tool_calls` delta.
    fn push_calls(&mut self, calls: Vec<serde_json::Value>) {
        for delta in calls {
            let v = tool_stream::tool_calls_chunk(&self.log.id, self.created, &self.model, delta);
            self.pending
                .push_back(SseEvent::default().data(v.to_string()));
        }
    }

    async fn next(&mut self) -> Option<SseEvent> {
        loop {
            if let Some(e) = self.pending.pop_front() {
                return Some(e);
            }
            if self.finished {
                return None;
            }
            match self.rx.recv().await {
                Some(Event::Token { text, id, logprobs }) => {
                    let lp: Vec<TokenLogprob> = logprobs
                        .iter()
                        .map(|lp| token_logprob(&self.text_tools, id, lp))
                        .collect();
                    let Some(tools) = &mut self.tools else {
                        return Some(self.chunk(Some(&text), false, None, lp));
                    };
                    let (text, calls) = tools.feed(&text);
                    if !text.is_empty() || !lp.is_empty() {
                        let c = self.chunk(Some(&text), false, None, lp);
                        self.pending.push_back(c);
                    }
                    self.push_calls(calls);
                }
                Some(Event::Done {
                    finish,
                    completion_tokens,
                    tail,
                    ttft,
                    decode,
                    ..
                }) => {
                    let mut finish = response::finish_reason(finish);
                    let (tail, calls) = match &mut self.tools {
                        Some(tools) => {
                            let (mut text, mut calls) = tools.feed(&tail);
                            let (rest, more) = tools.finish(finish == "length");
                            text.push_str(&rest);
                            calls.extend(more);
                            finish = tool_reply::finish_with_calls(finish, tools.calls);
                            (text, calls)
                        }
                        None => (tail, Vec::new()),
                    };
                    if !tail.is_empty() {
                        let c = self.chunk(Some(&tail), false, None, Vec::new());
                        self.pending.push_back(c);
                    }
                    self.push_calls(calls);
                    let last = self.chunk(None, false, Some(finish), Vec::new());
                    self.pending.push_back(last);
                    if self.include_usage {
                        let usage = response::usage(self.log.prompt_tokens, completion_tokens);
                        let v = self.endpoint.usage_chunk(self.header(), usage);
                        self.pending
                            .push_back(SseEvent::default().data(v.to_string()));
                    }
                    self.pending.push_back(SseEvent::default().data("[DONE]"));
                    self.log.done(completion_tokens, finish, ttft, decode);
                    self.finished = true;
                }
                Some(Event::Failed(e)) => {
                    // The status is sent already: the error travels as an event.
                    self.log.failed(&e);
                    self.pending
                        .push_back(SseEvent::default().data(e.to_json().to_string()));
                    self.pending.push_back(SseEvent::default().data("[DONE]"));
                    self.finished = true;
                }
                Some(Event::Started { .. }) | None => {
                    let e = ApiError::internal("the model thread dropped the request");
                    self.log.failed(&e);
                    self.pending
                        .push_back(SseEvent::default().data(e.to_json().to_string()));
                    self.finished = true;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_lines_keep_a_client_field_short_and_on_one_line() {
        // A 3 MB `user` became a 3 MB log line.
        let user = format!("{}\nforged line", "u".repeat(3 << 20));
        let log = RequestLog {
            id: "chatcmpl-1".into(),
            endpoint: Endpoint::Chat,
            user: Some(user),
            prompt_tokens: 5,
        };
        let done = log.done_line(
            3,
            "stop",
            Duration::from_millis(2),
            Duration::from_millis(4),
        );
        let failed = log.failed_line(&ApiError::invalid("x", "y".repeat(1 << 20)));
        for line in [done, failed] {
            assert!(line.len() < 1200, "{} bytes", line.len());
            assert!(!line.contains('\n'), "{}", &line[..200]);
            assert!(line.contains(&format!("{}...", "u".repeat(MAX_LOG_FIELD_CHARS))));
        }
    }
}
