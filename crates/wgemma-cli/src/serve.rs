//! `wgemma serve`: an OpenAI-compatible HTTP server on tokio + axum.
//!
//! - `POST /v1/chat/completions`, `POST /v1/completions`: streaming (server-sent events,
//!   ending `data: [DONE]`) or one JSON answer, with `usage`; every field of OpenAI's
//!   request schemas is used or refused by name ([`crate::serve_api`]).
//! - `GET /`: a chat page (plain HTML + JS, streaming through the chat endpoint).
//! - `GET /v1/models`, `GET /health`, `GET /metrics` (Prometheus text), and llama-server's
//!   `POST /tokenize`, `/detokenize`, `/apply-template`, `GET /props`, `/slots`
//!   ([`crate::serve_endpoints`]).
//!
//! The port is bound before the model loads (a busy port fails at once; `/health` answers
//! 503 `loading` until the model is ready). The model lives on its own thread
//! ([`crate::serve_worker`]), which decodes up to `--parallel` requests together
//! (continuous batching); handlers queue jobs for it (a full queue answers 503 at once) and
//! relay its events. A client that disconnects drops its stream, which closes the job's
//! channel and stops its sequence after the token in flight. Every answer carries an
//! `x-request-id`, every error is OpenAI-style JSON (404 and 405 included), and every
//! request gets one log line on stderr. Binds to 127.0.0.1 unless `--host` says otherwise;
//! `--api-key` requires `Authorization: Bearer KEY` on every route but `/health` and the
//! page. Every request passes [`crate::serve_guard`] first (host, origin, key, content type,
//! size and deadlines), and prompts are tokenised there, off the model thread.

use crate::generate::ModelArgs;
use crate::load::{load_model, LoadRequest};
use crate::serve_answer;
use crate::serve_api::{self, ApiError, Endpoint};
use crate::serve_endpoints;
use crate::serve_guard;
use crate::serve_metrics::{Metrics, SlotState};
use crate::serve_structured::Grammars;
use crate::serve_worker::{self, Job};
use anyhow::{bail, Context as _, Result};
use axum::body::Bytes;
use axum::extract::DefaultBodyLimit;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use clap::Args;
use std::io::Write as _;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::mpsc::SyncSender;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Instant, SystemTime, UNIX_EPOCH};
use wgemma::gpu::GpuContext;
use wgemma::session::engine::{MAX_DRAFT_TOKENS, MAX_SEQUENCES};
use wgemma::session::{PromptEncoder, Session, TextTools};

#[derive(Args)]
pub struct ServeArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// MTP speculative decoding for every request with this Gemma 4 assistant (a checkpoint
    /// directory, a gemma4-assistant GGUF file or an artifact holding one; it may be the
    /// --model artifact itself).
    #[arg(long, value_name = "DIR|FILE")]
    assistant: Option<PathBuf>,
    /// Drafts per speculative round (1..=8), for every slot: each step drafts k tokens per
    /// slot and verifies every slot's rows in one forward (k shrinks when the rows of all
    /// slots exceed the largest forward, --prefill-chunk).
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
    /// sequence per step, each over its own KV cache slot of --context positions, allocated
    /// at load). Requests beyond these wait in the queue. With --assistant, each of them
    /// drafts for itself and a step verifies every sequence's drafts in one forward.
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
pub(crate) struct App {
    pub jobs: SyncSender<Job>,
    pub metrics: Arc<Metrics>,
    pub model_name: String,
    api_key: Option<String>,
    /// Capacity of the job queue (for the 503's message).
    pub queue: usize,
    created: u64,
    /// Set by the model thread once the model has loaded.
    ready: Arc<OnceLock<Ready>>,
}

/// What the loaded model tells the handlers.
pub(crate) struct Ready {
    /// Tokenizer and chat template, for `/tokenize` and friends and log-probabilities'
    /// token text.
    pub text: TextTools,
    /// Tokenises the completions' prompts on request threads (the model thread gets token
    /// ids).
    pub encoder: PromptEncoder,
    pub info: ServerInfo,
    /// The structured-output grammar compiler, or why this vocabulary has none.
    pub grammars: Result<Arc<Grammars>, String>,
}

/// The banner's facts, also served by `/props`.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct ServerInfo {
    pub adapter: String,
    pub model: String,
    pub context: usize,
    pub vocab_size: usize,
    /// KV slots requests may hold.
    pub slots: usize,
    /// How requests draft (None: no assistant).
    pub speculative: Option<String>,
    pub chat_template: &'static str,
    /// `response_format` JSON: available, or why not.
    pub structured_output: String,
}

impl ServerInfo {
    fn banner(&self, name: &str) -> String {
        format!(
            "wgemma serve: ready: model {name:?} ({}), adapter {}, context {} positions, \
             {} slot(s), speculative: {}, chat format: {}, structured output: {}",
            self.model,
            self.adapter,
            self.context,
            self.slots,
            self.speculative.as_deref().unwrap_or("off"),
            self.chat_template,
            self.structured_output,
        )
    }
}

impl App {
    /// The loaded model, or the 503 a client gets while it loads.
    pub fn ready(&self) -> Result<&Ready, ApiError> {
        self.ready.get().ok_or_else(|| {
            ApiError::unavailable("the model is still loading; retry when GET /health answers 200")
        })
    }

    /// Refuses a request without the right bearer key (when the server has one).
    pub fn authorize(&self, headers: &HeaderMap) -> Result<(), ApiError> {
        serve_guard::authorize(self.api_key.as_deref(), headers)
    }

    /// KV slots (for the metrics; 0 while loading).
    fn kv_slots(&self) -> usize {
        self.ready.get().map_or(0, |r| r.info.slots)
    }
}

pub(crate) fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

pub fn run(args: ServeArgs) -> Result<()> {
    let mut load_request = args.model.request()?;
    // The KvState's own active sequence keeps slot 0; the batch's sequences take the others.
    let max_parallel = MAX_SEQUENCES - 1;
    if !(1..=max_parallel).contains(&args.parallel) {
        bail!(
            "--parallel: expected 1..={max_parallel} sequences, found {}",
            args.parallel
        );
    }
    // Drafting or not, every request holds a slot of its own.
    load_request.options.sequences = args.parallel + 1;
    if args.queue == 0 {
        bail!("--queue: expected at least 1 waiting request, found 0");
    }
    if args.assistant.is_some() && !(1..=MAX_DRAFT_TOKENS).contains(&args.draft_tokens) {
        bail!(
            "--draft-tokens: expected 1..={MAX_DRAFT_TOKENS}, found {}",
            args.draft_tokens
        );
    }
    let model_name = model_name(&args)?;

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    // Bound before the model loads: a busy port fails now, not minutes later.
    let listener = runtime.block_on(bind(&args))?;
    let addr = listener.local_addr()?;
    // Scripts wait for this line (and read the port from it with --port 0), then for
    // GET /health to answer 200.
    println!("wgemma serve: model {model_name:?} listening on http://{addr} (loading)");
    let _ = std::io::stdout().flush();

    // The model thread loads the model itself (the session never crosses threads).
    let metrics = Arc::new(Metrics::default());
    let guard = Arc::new(serve_guard::Guard::new(
        &args.guard,
        args.host,
        args.api_key.as_deref(),
        metrics.clone(),
    )?);
    let (jobs, job_rx) = serve_worker::queue(args.queue);
    let ready = Arc::new(OnceLock::new());
    let (loaded_tx, loaded_rx) = tokio::sync::oneshot::channel::<Result<()>>();
    let load = WorkerLoad {
        model_path: args.model.model.clone(),
        assistant_path: args.assistant.clone(),
        request: load_request,
        verify: !args.model.no_verify,
        parallel: args.parallel,
        draft_tokens: args.draft_tokens,
    };
    let worker_metrics = metrics.clone();
    let worker_ready = ready.clone();
    let (parallel, draft_tokens) = (args.parallel, args.draft_tokens);
    let name = model_name.clone();
    let worker = std::thread::Builder::new()
        .name("wgemma-model".into())
        .spawn(move || {
            let loaded = load.ready();
            match loaded {
                Ok((session, ready)) => {
                    for id in ready.info.slot_ids() {
                        worker_metrics.set_slot(SlotState {
                            id,
                            ..SlotState::default()
                        });
                    }
                    println!("{}", ready.info.banner(&name));
                    let _ = std::io::stdout().flush();
                    let _ = worker_ready.set(ready);
                    let _ = loaded_tx.send(Ok(()));
                    serve_worker::run(session, job_rx, worker_metrics, parallel, draft_tokens);
                }
                Err(e) => {
                    let _ = loaded_tx.send(Err(e));
                }
            }
        })
        .context("starting the model thread")?;

    let app = Arc::new(App {
        jobs,
        metrics,
        model_name,
        api_key: args.api_key.clone(),
        queue: args.queue,
        created: unix_now(),
        ready,
    });
    let limits = serve_guard::ConnectionLimits::from(&args.guard);
    let load_error = Arc::new(Mutex::new(None));
    let served = runtime.block_on(serve(
        app,
        guard,
        limits,
        listener,
        loaded_rx,
        load_error.clone(),
    ));
    // Every job sender is gone with the app: the model thread finishes its job and ends.
    drop(runtime);
    let _ = worker.join();
    if let Some(e) = load_error.lock().expect("load error lock").take() {
        return Err(e);
    }
    served
}

/// `--model-name`, else the model path's file name.
fn model_name(args: &ServeArgs) -> Result<String> {
    Ok(match &args.model_name {
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
    })
}

/// The listening socket of `--host --port`, with a warning when other machines can reach it.
async fn bind(args: &ServeArgs) -> Result<tokio::net::TcpListener> {
    let (host, port) = (args.host, args.port);
    let listener = tokio::net::TcpListener::bind((host, port))
        .await
        .with_context(|| format!("--host {host} --port {port}: binding"))?;
    if !host.is_loopback() {
        eprintln!(
            "warning: listening on {host}, reachable from other machines{}",
            if args.api_key.is_none() {
                " WITHOUT an API key (--api-key)"
            } else {
                ""
            }
        );
    }
    Ok(listener)
}

/// What the model thread loads: the session never crosses threads, so it loads there.
struct WorkerLoad {
    model_path: PathBuf,
    assistant_path: Option<PathBuf>,
    request: LoadRequest,
    verify: bool,
    parallel: usize,
    draft_tokens: usize,
}

impl WorkerLoad {
    /// The session, and what the HTTP side needs once it is ready.
    fn ready(&self) -> Result<(Session, Ready)> {
        let ctx = GpuContext::new_blocking(crate::gpu_args::context_options())?;
        let adapter = ctx.describe();
        let loaded = load_model(&ctx, &self.model_path, self.request)?;
        let session = loaded.into_session(
            ctx,
            &self.model_path,
            self.assistant_path.as_deref(),
            self.verify,
        )?;
        let rows = session.max_batch()?;
        if self.parallel > rows {
            bail!(
                "--parallel: expected at most {rows} sequences (rows of the largest \
                 forward plan: --prefill-chunk), found {}",
                self.parallel
            );
        }
        let info = session.model_info()?;
        let (parallel, draft_tokens) = (self.parallel, self.draft_tokens);
        let speculative = session.has_assistant().then(|| {
            format!(
                "MTP assistant, k = {draft_tokens} drafts per round in each of the \
                 {parallel} slot(s), every slot's verify rows in one forward"
            )
        });
        let text = session.text_tools()?;
        let grammars = match &text.tokenizer {
            Some(t) => Grammars::new(t, info.vocab_size, &text.stop_ids).map(Arc::new),
            None => Err("the model has no tokenizer".to_string()),
        };
        let info = ServerInfo {
            structured_output: match &grammars {
                Ok(_) => "JSON (llguidance token masks)".to_string(),
                Err(why) => format!("unavailable ({why})"),
            },
            adapter,
            model: info.description,
            context: info.context,
            vocab_size: info.vocab_size,
            slots: parallel,
            speculative,
            chat_template: if info.has_chat_template {
                "the checkpoint's template"
            } else {
                "Gemma 4's built-in turns"
            },
        };
        let ready = Ready {
            encoder: session.prompt_encoder()?,
            text,
            info,
            grammars,
        };
        Ok((session, ready))
    }
}

impl ServerInfo {
    /// The KV slot ids requests use: 1..=parallel (slot 0 is the KvState's own sequence).
    fn slot_ids(&self) -> std::ops::RangeInclusive<usize> {
        1..=self.slots
    }
}

/// The method each route takes (a 405 names it).
const ROUTE_METHODS: &[(&str, &str)] = &[
    ("/", "GET"),
    ("/health", "GET"),
    ("/metrics", "GET"),
    ("/v1/models", "GET"),
    ("/v1/chat/completions", "POST"),
    ("/v1/completions", "POST"),
    ("/tokenize", "POST"),
    ("/detokenize", "POST"),
    ("/apply-template", "POST"),
    ("/props", "GET"),
    ("/slots", "GET"),
];

fn method_of(path: &str) -> Option<&'static str> {
    ROUTE_METHODS
        .iter()
        .find(|(p, _)| *p == path)
        .map(|(_, m)| *m)
}

/// The router: every route, JSON errors and a log line for every answer.
pub(crate) fn router(app: Arc<App>, guard: Arc<serve_guard::Guard>) -> Router {
    Router::new()
        .route("/", get(chat_page))
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .route("/v1/models", get(models))
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/completions", post(completions))
        .route("/tokenize", post(serve_endpoints::tokenize))
        .route("/detokenize", post(serve_endpoints::detokenize))
        .route("/apply-template", post(serve_endpoints::apply_template))
        .route("/props", get(serve_endpoints::props))
        .route("/slots", get(serve_endpoints::slots))
        .fallback(not_found)
        // The guard reads bodies itself, within its per-route bound; its refusals are
        // JSON already and get their request id and log line from the outer layer.
        .layer(DefaultBodyLimit::disable())
        .layer(axum::middleware::from_fn_with_state(
            guard,
            serve_guard::check,
        ))
        .layer(axum::middleware::from_fn(json_errors_and_log))
        .with_state(app)
}

async fn serve(
    app: Arc<App>,
    guard: Arc<serve_guard::Guard>,
    limits: serve_guard::ConnectionLimits,
    listener: tokio::net::TcpListener,
    loaded: tokio::sync::oneshot::Receiver<Result<()>>,
    load_error: Arc<Mutex<Option<anyhow::Error>>>,
) -> Result<()> {
    let stop = async move {
        tokio::select! {
            _ = shutdown_signal() => {},
            loaded = loaded => match loaded {
                Ok(Ok(())) => shutdown_signal().await,
                Ok(Err(e)) => {
                    *load_error.lock().expect("load error lock") = Some(e.context("loading the model"));
                }
                Err(_) => {
                    *load_error.lock().expect("load error lock") =
                        Some(anyhow::anyhow!("the model thread ended while loading"));
                }
            },
        }
    };
    serve_guard::serve(listener, router(app, guard), limits, stop)
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

/// Marks a response whose handler wrote its own log line (the completions: theirs ends
/// with the stream).
#[derive(Clone, Copy)]
pub(crate) struct Logged;

/// The id a response carries in `x-request-id`.
pub(crate) const REQUEST_ID: &str = "x-request-id";

/// Turns every error answer that is not JSON yet (axum's 405 and body rejections, say) into
/// OpenAI-style JSON naming the method and path, gives every answer an `x-request-id`, and
/// writes the log line of every request whose handler did not.
async fn json_errors_and_log(request: Request, next: Next) -> Response {
    let (method, path) = (request.method().clone(), request.uri().path().to_string());
    let started = Instant::now();
    let mut response = next.run(request).await;
    let status = response.status();
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if (status.is_client_error() || status.is_server_error()) && !is_json {
        let allow = response
            .headers()
            .get(header::ALLOW)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
            .or_else(|| method_of(&path).map(str::to_string));
        let body = axum::body::to_bytes(std::mem::take(response.body_mut()), 64 * 1024)
            .await
            .unwrap_or_default();
        let detail = String::from_utf8_lossy(&body).trim().to_string();
        let message = match (status, allow) {
            (StatusCode::METHOD_NOT_ALLOWED, Some(allow)) => {
                format!("{method} {path}: expected the method {allow}, found {method}")
            }
            _ if detail.is_empty() => format!(
                "{method} {path}: {}",
                status.canonical_reason().unwrap_or("error")
            ),
            _ => format!("{method} {path}: {detail}"),
        };
        let mut json = ApiError::invalid("", message)
            .with_status(status, "request_error")
            .into_response();
        if status == StatusCode::METHOD_NOT_ALLOWED {
            if let Some(allow) = method_of(&path) {
                json.headers_mut()
                    .insert(header::ALLOW, HeaderValue::from_static(allow));
            }
        }
        response = json;
    }
    if !response.headers().contains_key(REQUEST_ID) {
        let id = format!("req-{:024x}", rand::random::<u128>() >> 32);
        if let Ok(v) = HeaderValue::from_str(&id) {
            response.headers_mut().insert(REQUEST_ID, v);
        }
    }
    if response.extensions().get::<Logged>().is_none() {
        let id = response
            .headers()
            .get(REQUEST_ID)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        eprintln!(
            "wgemma serve: {id} {method} {path} {} {:.1} ms",
            status.as_u16(),
            started.elapsed().as_secs_f64() * 1e3
        );
    }
    response
}

/// The chat page: static, so it needs no key (it asks for one when the API does).
async fn chat_page() -> Response {
    (
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        include_str!("serve_page.html"),
    )
        .into_response()
}

async fn health(State(app): State<Arc<App>>) -> Response {
    if app.ready.get().is_some() {
        Json(serde_json::json!({"status": "ok"})).into_response()
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(serde_json::json!({"status": "loading"})),
        )
            .into_response()
    }
}

async fn not_found() -> Response {
    ApiError::invalid("", "no such endpoint: this server has /v1/chat/completions, /v1/completions, /v1/models, /health, /metrics, /tokenize, /detokenize, /apply-template, /props and /slots")
        .with_status(StatusCode::NOT_FOUND, "not_found")
        .into_response()
}

async fn metrics(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    if let Err(e) = app.authorize(&headers) {
        return e.into_response();
    }
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        app.metrics.render(app.kv_slots()),
    )
        .into_response()
}

async fn models(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    if let Err(e) = app.authorize(&headers) {
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
    let parsed = app
        .authorize(&headers)
        .and_then(|()| app.ready().map(|_| ()))
        .and_then(|()| serve_api::parse_chat(&body, &app.model_name));
    serve_answer::answer(app, Endpoint::Chat, parsed).await
}

async fn completions(State(app): State<Arc<App>>, headers: HeaderMap, body: Bytes) -> Response {
    let parsed = app
        .authorize(&headers)
        .and_then(|()| app.ready().map(|_| ()))
        .and_then(|()| serve_api::parse_completion(&body, &app.model_name));
    serve_answer::answer(app, Endpoint::Completion, parsed).await
}
