//! `wgemma serve`'s server: an OpenAI-compatible HTTP server on tokio + axum, serving a
//! [`Session`] its caller loads (the CLI gives [`run`] a loader closure).
//!
//! - `POST /v1/chat/completions`, `POST /v1/completions`: streaming (server-sent events,
//!   ending `data: [DONE]`) or one JSON answer, with `usage`; every field of OpenAI's
//!   request schemas is used or refused by name ([`crate::openai::request`]).
//! - `GET /`: a chat page (plain HTML + JS, streaming through the chat endpoint).
//! - `GET /v1/models`, `GET /health`, `GET /metrics` (Prometheus text), and llama-server's
//!   `POST /tokenize`, `/detokenize`, `/apply-template`, `GET /props`, `/slots`
//!   ([`crate::handlers::endpoints`]).
//!
//! The port is bound before the model loads (a busy port fails at once; `/health` answers
//! 503 `loading` until the model is ready). The model lives on its own thread
//! ([`crate::worker`]), which decodes up to `--parallel` requests together
//! (continuous batching); handlers queue jobs for it (a full queue answers 503 at once) and
//! relay its events. A client that disconnects drops its stream, which closes the job's
//! channel and stops its sequence after the token in flight. Every answer carries an
//! `x-request-id`, every error is OpenAI-style JSON (404 and 405 included), and every
//! request gets one log line on stderr. Binds to the caller's address (the CLI's `--host`, 127.0.0.1 by default);
//! `--api-key` requires `Authorization: Bearer KEY` on every route but `/health` and the
//! page. Every request passes [`crate::http::admission`] first (host, origin, key, content type,
//! size and deadlines), and prompts are tokenised there, off the model thread.

pub mod app;
pub mod error;
#[cfg(any(test, feature = "fuzzing"))]
pub mod fuzzing;
pub mod handlers;
pub mod http;
pub mod metrics;
pub mod openai;
pub mod routes;
pub mod worker;

pub use http::api_key::check_api_key;
pub use http::limits::GuardOptions;

use crate::app::{unix_now, App, Ready};
use crate::http::{accept, admission, limits::ConnectionLimits};
use crate::metrics::{Metrics, SlotState};
use anyhow::{bail, Context as _, Result};
use std::io::Write as _;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, OnceLock};
use wgemma::generate::speculative::MAX_DRAFT_TOKENS;
use wgemma::ops::attention::MAX_SEQUENCES;
use wgemma::session::Session;

/// How to serve: the address, the batch and queue sizes, the key and the guard's options.
/// Errors name the CLI's flags (`--parallel`, `--queue`, ...), which set these fields.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    pub host: IpAddr,
    /// 0: any free port (the address is printed).
    pub port: u16,
    /// Sequences decoded together (continuous batching), each over its own KV slot.
    pub parallel: usize,
    /// Requests that may wait for a sequence; beyond it the server answers 503 at once.
    pub queue: usize,
    /// Drafts per speculative round, when the loader loads an assistant (None: it does not).
    pub draft_tokens: Option<usize>,
    /// Required as `Authorization: Bearer KEY` on every route but `/health` and the page.
    pub api_key: Option<String>,
    /// The model id clients name in `model`.
    pub model_name: String,
    /// More ids the model answers to (listed by `/v1/models` after `model_name`).
    pub aliases: Vec<String>,
    pub guard: GuardOptions,
}

/// A session ready to serve, and the adapter it runs on (for the banner and `/props`).
pub struct LoadedModel {
    pub session: Session,
    pub adapter: String,
}

/// Loads the model on the model thread (a session never crosses threads), given the KV
/// sequences it must hold (`parallel + 1`: slot 0 is the KvState's own sequence).
pub type Loader = Box<dyn FnOnce(usize) -> Result<LoadedModel> + Send>;

/// Serves until Ctrl-C or SIGTERM: binds first (a busy port fails at once), prints the
/// address, loads the model with `loader` on the model thread, then answers requests.
pub fn run(args: ServeOptions, loader: Loader) -> Result<()> {
    // The KvState's own active sequence keeps slot 0; the batch's sequences take the others.
    let max_parallel = MAX_SEQUENCES - 1;
    if !(1..=max_parallel).contains(&args.parallel) {
        bail!(
            "--parallel: expected 1..={max_parallel} sequences, found {}",
            args.parallel
        );
    }
    // Drafting or not, every request holds a slot of its own.
    let sequences = args.parallel + 1;
    if args.queue == 0 {
        bail!("--queue: expected at least 1 waiting request, found 0");
    }
    if let Some(k) = args
        .draft_tokens
        .filter(|k| !(1..=MAX_DRAFT_TOKENS).contains(k))
    {
        bail!("--draft-tokens: expected 1..={MAX_DRAFT_TOKENS}, found {k}");
    }
    if args.model_name.is_empty() {
        bail!("--model-name: expected a name, found an empty string");
    }
    if args.aliases.iter().any(String::is_empty) {
        bail!("--alias: expected a name, found an empty string");
    }
    let model_name = args.model_name.clone();

    // Every flag is checked before the port is announced: a script that waits for the
    // "listening" line must not see one from a server about to exit.
    let metrics = Arc::new(Metrics::default());
    let guard = Arc::new(admission::Guard::new(
        &args.guard,
        args.host,
        args.api_key.as_deref(),
        metrics.clone(),
    )?);

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
    let (jobs, job_rx) = worker::queue(args.queue);
    let ready = Arc::new(OnceLock::new());
    let (loaded_tx, loaded_rx) = tokio::sync::oneshot::channel::<Result<()>>();
    let worker_metrics = metrics.clone();
    let worker_ready = ready.clone();
    let (parallel, draft_tokens) = (args.parallel, args.draft_tokens.unwrap_or(1));
    let name = model_name.clone();
    let worker = std::thread::Builder::new()
        .name("wgemma-model".into())
        .spawn(move || {
            let loaded = loader(sequences).and_then(|loaded| {
                let ready = Ready::new(&loaded.session, loaded.adapter, parallel, draft_tokens)?;
                Ok((loaded.session, ready))
            });
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
                    worker::run(session, job_rx, worker_metrics, parallel, draft_tokens);
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
        aliases: args.aliases.clone(),
        api_key: args.api_key.clone(),
        queue: args.queue,
        created: unix_now(),
        ready,
    });
    let limits = ConnectionLimits::from(&args.guard);
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

/// The listening socket of `--host --port`, with a warning when other machines can reach it.
async fn bind(args: &ServeOptions) -> Result<tokio::net::TcpListener> {
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

async fn serve(
    app: Arc<App>,
    guard: Arc<admission::Guard>,
    limits: ConnectionLimits,
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
    accept::serve(listener, routes::router(app, guard), limits, stop)
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
