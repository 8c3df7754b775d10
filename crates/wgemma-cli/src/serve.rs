//! `wgemma serve`: an OpenAI-compatible HTTP server on tokio + axum.
//!
//! - `POST /v1/chat/completions`, `POST /v1/completions`: streaming (server-sent events,
//!   ending `data: [DONE]`) or one JSON answer, with `usage`, `max_tokens`, `temperature`,
//!   `top_p`, `seed`, `stop` (and `top_k`).
//! - `GET /v1/models`, `GET /health`, `GET /metrics` (Prometheus text).
//!
//! The model lives on its own thread ([`crate::serve_worker`]), which decodes up to
//! `--parallel` requests together (continuous batching); handlers queue jobs for it (a full
//! queue answers 503 at once) and relay its events. A client that disconnects drops
//! its stream, which closes the job's channel and stops its sequence after the token in
//! flight. Binds to 127.0.0.1 unless `--host` says otherwise; `--api-key` requires
//! `Authorization: Bearer KEY` on `/v1/*` and `/metrics`. Every request passes
//! [`crate::serve_guard`] first (host, origin, key, content type, size and deadlines), and
//! prompts are tokenised there, off the model thread.

use crate::generate::ModelArgs;
use crate::load::load_model;
use crate::serve_api::{self, ApiError, Endpoint, Parsed};
use crate::serve_guard;
use crate::serve_metrics::Metrics;
use crate::serve_worker::{self, Event, Job};
use anyhow::{bail, Context as _, Result};
use axum::body::Bytes;
use axum::extract::DefaultBodyLimit;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::sse::{Event as SseEvent, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use clap::Args;
use std::collections::VecDeque;
use std::convert::Infallible;
use std::io::Write as _;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{SyncSender, TrySendError};
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};
use tokio::sync::mpsc::UnboundedReceiver;
use wgemma::gpu::{ContextOptions, GpuContext};
use wgemma::model::speculative::MAX_DRAFT_TOKENS;
use wgemma::ops::attention::MAX_SEQUENCES;
use wgemma::session::{PromptEncoder, Session};

#[derive(Args)]
pub struct ServeArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// MTP speculative decoding for every request with this Gemma 4 assistant (a checkpoint
    /// directory, a gemma4-assistant GGUF file or an artifact holding one; it may be the
    /// --model artifact itself).
    #[arg(long, value_name = "DIR|FILE")]
    assistant: Option<PathBuf>,
    /// Drafts of the first speculative round (1..=8); the adaptive schedule then picks k in
    /// 0..=8 from the measured acceptance and round costs (plain steps when drafting does
    /// not pay).
    #[arg(long, default_value_t = 2, requires = "assistant")]
    draft_tokens: usize,
    /// Address to listen on. The default, loopback, is reachable from this machine only;
    /// anything else exposes the model to the network (use --api-key).
    #[arg(long, default_value = "127.0.0.1")]
    host: IpAddr,
    /// Port to listen on (0: any free port; the address is printed).
    #[arg(long, default_value_t = 8080)]
    port: u16,
    /// Sequences decoded together (continuous batching: one forward of one row per active
    /// sequence per step, each over its own KV cache slot of --context positions, allocated at load).
    /// Requests
    /// beyond these wait in the queue. With --assistant, requests run one at a time.
    #[arg(long, default_value_t = 4)]
    parallel: usize,
    /// Requests that may wait for a sequence; beyond it the server answers 503 at once.
    #[arg(long, default_value_t = 64)]
    queue: usize,
    /// Require `Authorization: Bearer KEY` on /v1/* and /metrics (also read from the
    /// WGEMMA_API_KEY environment variable).
    #[arg(long, env = "WGEMMA_API_KEY", hide_env_values = true)]
    api_key: Option<String>,
    /// The model id clients name in `model` (default: the --model file or directory name).
    #[arg(long)]
    model_name: Option<String>,
    #[command(flatten)]
    guard: serve_guard::GuardArgs,
}

/// What the handlers share.
struct App {
    jobs: SyncSender<Job>,
    /// Tokenises prompts on request threads (the model thread gets token ids).
    encoder: PromptEncoder,
    metrics: Arc<Metrics>,
    model_name: String,
    api_key: Option<String>,
    /// KV cache slots of the model (sequences held at once).
    kv_slots: usize,
    /// Capacity of the job queue (for the 503's message).
    queue: usize,
    next_id: AtomicU64,
    created: u64,
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

pub fn run(args: ServeArgs) -> Result<()> {
    let mut load_request = args.model.request()?;
    // The model's own active sequence keeps slot 0; the batch's sequences take the others.
    let max_parallel = MAX_SEQUENCES - 1;
    if !(1..=max_parallel).contains(&args.parallel) {
        bail!(
            "--parallel: expected 1..={max_parallel} sequences, found {}",
            args.parallel
        );
    }
    // Drafting runs one request at a time in the model's own sequence: no slots beside it.
    load_request.options.sequences = if args.assistant.is_some() {
        1
    } else {
        args.parallel + 1
    };
    if args.queue == 0 {
        bail!("--queue: expected at least 1 waiting request, found 0");
    }
    if args.assistant.is_some() && !(1..=MAX_DRAFT_TOKENS).contains(&args.draft_tokens) {
        bail!(
            "--draft-tokens: expected 1..={MAX_DRAFT_TOKENS}, found {}",
            args.draft_tokens
        );
    }
    let model_name = match &args.model_name {
        Some(name) if name.is_empty() => {
            bail!("--model-name: expected a name, found an empty string")
        }
        Some(name) => name.clone(),
        None => args
            .model
            .model
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "wgemma".into()),
    };

    // The model thread loads the model itself (the session never crosses threads) and
    // reports back before the server binds.
    let metrics = Arc::new(Metrics::default());
    let guard = Arc::new(serve_guard::Guard::new(
        &args.guard,
        args.host,
        args.api_key.as_deref(),
        metrics.clone(),
    )?);
    let (jobs, job_rx) = serve_worker::queue(args.queue);
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<PromptEncoder>>();
    let model_path = args.model.model.clone();
    let assistant_path = args.assistant.clone();
    let verify = !args.model.no_verify;
    let worker_metrics = metrics.clone();
    let parallel = args.parallel;
    let draft_tokens = args.draft_tokens;
    let worker = std::thread::Builder::new()
        .name("wgemma-model".into())
        .spawn(move || {
            let loaded = (|| -> Result<Session> {
                let ctx = GpuContext::new_blocking(ContextOptions::default())?;
                let loaded = load_model(&ctx, &model_path, load_request)?;
                let session =
                    loaded.into_session(ctx, &model_path, assistant_path.as_deref(), verify)?;
                let rows = session.max_batch()?;
                if parallel > rows {
                    bail!(
                        "--parallel: expected at most {rows} sequences (rows of the largest \
                         forward plan: --prefill-chunk), found {parallel}"
                    );
                }
                Ok(session)
            })();
            match loaded.and_then(|s| Ok((s.prompt_encoder()?, s))) {
                Ok((encoder, session)) => {
                    let _ = ready_tx.send(Ok(encoder));
                    serve_worker::run(session, job_rx, worker_metrics, parallel, draft_tokens);
                }
                Err(e) => {
                    let _ = ready_tx.send(Err(e));
                }
            }
        })
        .context("starting the model thread")?;
    let encoder = ready_rx
        .recv()
        .context("the model thread ended while loading")??;

    let app = Arc::new(App {
        jobs,
        encoder,
        metrics,
        model_name,
        api_key: args.api_key.clone(),
        kv_slots: if args.assistant.is_some() {
            1
        } else {
            args.parallel
        },
        queue: args.queue,
        next_id: AtomicU64::new(1),
        created: unix_now(),
    });
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let limits = serve_guard::ConnectionLimits::from(&args.guard);
    let served = runtime.block_on(serve(app, guard, limits, args.host, args.port));
    // Every job sender is gone with the app: the model thread finishes its job and ends.
    drop(runtime);
    let _ = worker.join();
    served
}

async fn serve(
    app: Arc<App>,
    guard: Arc<serve_guard::Guard>,
    limits: serve_guard::ConnectionLimits,
    host: IpAddr,
    port: u16,
) -> Result<()> {
    let router = Router::new()
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .route("/v1/models", get(models))
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/completions", post(completions))
        .fallback(not_found)
        .with_state(app.clone())
        // The guard reads bodies itself, within its per-route bound.
        .layer(DefaultBodyLimit::disable())
        .layer(axum::middleware::from_fn_with_state(
            guard,
            serve_guard::check,
        ));
    let listener = tokio::net::TcpListener::bind((host, port))
        .await
        .with_context(|| format!("--host {host} --port {port}: binding"))?;
    let addr = listener.local_addr()?;
    if !host.is_loopback() {
        eprintln!(
            "warning: listening on {host}, reachable from other machines{}",
            if app.api_key.is_none() {
                " WITHOUT an API key (--api-key)"
            } else {
                ""
            }
        );
    }
    // Scripts wait for this line (and read the port from it with --port 0).
    println!(
        "wgemma serve: model {:?} listening on http://{addr}",
        app.model_name
    );
    let _ = std::io::stdout().flush();
    serve_guard::serve(listener, router, limits, shutdown_signal())
        .await
        .context("serving")?;
    eprintln!("wgemma serve: stopped");
    Ok(())
}

/// Ctrl-C or SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
}

/// Refuses a request without the right bearer key (when the server has one).
fn authorize(app: &App, headers: &HeaderMap) -> Result<(), ApiError> {
    serve_guard::authorize(app.api_key.as_deref(), headers)
}

async fn health() -> Json<serde_json::Value> {
    Json(serde_json::json!({"status": "ok"}))
}

async fn not_found() -> Response {
    ApiError::invalid("", "no such endpoint: this server has /v1/chat/completions, /v1/completions, /v1/models, /health and /metrics")
        .with_status(StatusCode::NOT_FOUND, "not_found")
        .into_response()
}

async fn metrics(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    if let Err(e) = authorize(&app, &headers) {
        return e.into_response();
    }
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        app.metrics.render(app.kv_slots),
    )
        .into_response()
}

async fn models(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    if let Err(e) = authorize(&app, &headers) {
        return e.into_response();
    }
    Json(serde_json::json!({
        "object": "list",
        "data": [{"id": app.model_name, "object": "model", "created": app.created, "owned_by": "wgemma"}],
    }))
    .into_response()
}

async fn chat_completions(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let parsed =
        authorize(&app, &headers).and_then(|()| serve_api::parse_chat(&body, &app.model_name));
    answer(app, Endpoint::Chat, parsed).await
}

async fn completions(State(app): State<Arc<App>>, headers: HeaderMap, body: Bytes) -> Response {
    let parsed = authorize(&app, &headers)
        .and_then(|()| serve_api::parse_completion(&body, &app.model_name));
    answer(app, Endpoint::Completion, parsed).await
}

async fn answer(app: Arc<App>, endpoint: Endpoint, parsed: Result<Parsed, ApiError>) -> Response {
    let parsed = match parsed {
        Ok(parsed) => serve_guard::encode_prompt(&app.encoder, parsed).await,
        Err(e) => Err(e),
    };
    let response = match parsed {
        Ok(parsed) => generate(&app, endpoint, parsed)
            .await
            .unwrap_or_else(IntoResponse::into_response),
        Err(e) => e.into_response(),
    };
    app.metrics
        .count_request(endpoint.label(), response.status().as_u16());
    response
}

/// Queues the job, waits for its start, then streams or collects its text.
async fn generate(
    app: &Arc<App>,
    endpoint: Endpoint,
    parsed: Parsed,
) -> Result<Response, ApiError> {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let (stream, include_usage) = (parsed.sampling.stream, parsed.sampling.include_usage);
    app.metrics.queue_depth.fetch_add(1, Ordering::Relaxed);
    let job = Job {
        parsed,
        events: tx,
        enqueued: Instant::now(),
    };
    if let Err(e) = app.jobs.try_send(job) {
        app.metrics.queue_depth.fetch_sub(1, Ordering::Relaxed);
        return Err(match e {
            TrySendError::Full(_) => ApiError::overloaded(format!(
                "the server is busy: {} requests are waiting (--queue {}); retry later",
                app.queue, app.queue
            )),
            TrySendError::Disconnected(_) => ApiError::internal("the model thread has stopped"),
        });
    }
    let prompt_tokens = match rx.recv().await {
        Some(Event::Started { prompt_tokens }) => prompt_tokens,
        Some(Event::Failed(e)) => return Err(e),
        Some(other) => {
            return Err(ApiError::internal(format!(
                "unexpected first event {other:?}"
            )))
        }
        None => return Err(ApiError::internal("the model thread dropped the request")),
    };
    let id = endpoint.id(app.next_id.fetch_add(1, Ordering::Relaxed));
    let created = unix_now();
    if !stream {
        loop {
            match rx.recv().await {
                Some(Event::Text(_)) => {}
                Some(Event::Done {
                    finish,
                    completion_tokens,
                    text,
                    ..
                }) => {
                    let usage = serve_api::usage(prompt_tokens, completion_tokens);
                    let body = endpoint.response(
                        &id,
                        created,
                        &app.model_name,
                        &text,
                        serve_api::finish_reason(finish),
                        usage,
                    );
                    return Ok(Json(body).into_response());
                }
                Some(Event::Failed(e)) => return Err(e),
                Some(Event::Started { .. }) | None => {
                    return Err(ApiError::internal("the model thread dropped the request"))
                }
            }
        }
    }
    let state = SseState {
        rx,
        pending: VecDeque::new(),
        endpoint,
        id,
        created,
        model: app.model_name.clone(),
        include_usage,
        prompt_tokens,
        finished: false,
    };
    let mut state = state;
    if endpoint == Endpoint::Chat {
        // OpenAI's first chunk names the role, with empty content.
        let first = state.chunk(Some(""), true, None);
        state.pending.push_back(first);
    }
    let events = futures_util::stream::unfold(state, |mut s| async move {
        let event = s.next().await?;
        Some((Ok::<_, Infallible>(event), s))
    });
    Ok(Sse::new(events).into_response())
}

/// The stream of one request's server-sent events.
struct SseState {
    rx: UnboundedReceiver<Event>,
    pending: VecDeque<SseEvent>,
    endpoint: Endpoint,
    id: String,
    created: u64,
    model: String,
    include_usage: bool,
    prompt_tokens: usize,
    finished: bool,
}

impl SseState {
    fn chunk(&self, text: Option<&str>, first: bool, finish: Option<&str>) -> SseEvent {
        let v = self
            .endpoint
            .chunk(&self.id, self.created, &self.model, text, first, finish);
        SseEvent::default().data(v.to_string())
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
                Some(Event::Text(t)) => return Some(self.chunk(Some(&t), false, None)),
                Some(Event::Done {
                    finish,
                    completion_tokens,
                    tail,
                    ..
                }) => {
                    if !tail.is_empty() {
                        let c = self.chunk(Some(&tail), false, None);
                        self.pending.push_back(c);
                    }
                    let last = self.chunk(None, false, Some(serve_api::finish_reason(finish)));
                    self.pending.push_back(last);
                    if self.include_usage {
                        let usage = serve_api::usage(self.prompt_tokens, completion_tokens);
                        let v =
                            self.endpoint
                                .usage_chunk(&self.id, self.created, &self.model, usage);
                        self.pending
                            .push_back(SseEvent::default().data(v.to_string()));
                    }
                    self.pending.push_back(SseEvent::default().data("[DONE]"));
                    self.finished = true;
                }
                Some(Event::Failed(e)) => {
                    // The status is sent already: the error travels as an event.
                    self.pending
                        .push_back(SseEvent::default().data(e.to_json().to_string()));
                    self.pending.push_back(SseEvent::default().data("[DONE]"));
                    self.finished = true;
                }
                Some(Event::Started { .. }) | None => {
                    let e = ApiError::internal("the model thread dropped the request");
                    self.pending
                        .push_back(SseEvent::default().data(e.to_json().to_string()));
                    self.finished = true;
                }
            }
        }
    }
}
