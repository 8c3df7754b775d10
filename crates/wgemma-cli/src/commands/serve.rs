//! `wgemma serve`: the flags, and a loader for the server ([`wgemma_server`]), which serves
//! the model over an OpenAI-compatible HTTP API on 127.0.0.1 (docs/serving.md).

use crate::args::ModelArgs;
use crate::load::load_model;
use anyhow::Result;
use clap::Args;
use std::net::IpAddr;
use std::path::PathBuf;
use wgemma_server::{GuardOptions, LoadedModel, ServeOptions};

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
    /// Another id the model answers to in `model` (repeatable; `/v1/models` lists them
    /// after the name).
    #[arg(long = "alias", value_name = "NAME")]
    aliases: Vec<String>,
    #[command(flatten)]
    guard: GuardArgs,
}

#[derive(Args, Clone, Debug)]
pub struct GuardArgs {
    /// Host names (the `Host` header) the server answers besides localhost, *.localhost
    /// and IP literals of the bound address: a page that rebinds its own name to this
    /// machine is refused (403). `*` allows any.
    #[arg(long, value_delimiter = ',', value_name = "NAME,...")]
    pub allowed_hosts: Vec<String>,
    /// Web origins (`https://app.example`) whose pages may call the API (CORS); a request
    /// carrying any other `Origin` is refused (403). Default none. `*` allows any.
    #[arg(long, value_delimiter = ',', value_name = "ORIGIN,...")]
    pub cors_origins: Vec<String>,
    /// Connections held at once; beyond it a new connection gets 503 and is closed.
    #[arg(long, default_value_t = 256)]
    pub max_connections: usize,
    /// Seconds a client has to send a request's headers (and between requests on a
    /// kept-alive connection).
    #[arg(long, default_value_t = 10)]
    pub header_timeout: u64,
    /// Seconds a client has to send a request's body.
    #[arg(long, default_value_t = 30)]
    pub body_timeout: u64,
}

impl From<GuardArgs> for GuardOptions {
    fn from(args: GuardArgs) -> GuardOptions {
        GuardOptions {
            allowed_hosts: args.allowed_hosts,
            cors_origins: args.cors_origins,
            max_connections: args.max_connections,
            header_timeout: args.header_timeout,
            body_timeout: args.body_timeout,
        }
    }
}

pub fn run(args: ServeArgs) -> Result<()> {
    let mut request = args.model.request()?;
    args.model.warn_unused(args.assistant.as_deref());
    let options = ServeOptions {
        host: args.host,
        port: args.port,
        parallel: args.parallel,
        queue: args.queue,
        draft_tokens: args.assistant.is_some().then_some(args.draft_tokens),
        api_key: args.api_key,
        // `--model-name`, else the model path's file name.
        model_name: args.model_name.unwrap_or_else(|| {
            args.model
                .model
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| "wgemma".into())
        }),
        aliases: args.aliases,
        guard: args.guard.into(),
    };
    let (model_path, assistant, verify) = (args.model.model, args.assistant, !args.model.no_verify);
    wgemma_server::run(
        options,
        Box::new(move |sequences| {
            request.options.sequences = sequences;
            let ctx = crate::gpu_args::open_context(crate::gpu_args::context_options())?;
            let adapter = ctx.describe();
            let loaded = load_model(&ctx, &model_path, request)?;
            let session = loaded.into_session(ctx, &model_path, assistant.as_deref(), verify)?;
            Ok(LoadedModel { session, adapter })
        }),
    )
}
