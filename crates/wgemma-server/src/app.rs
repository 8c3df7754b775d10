//! What the handlers share: the job queue to the model thread, the metrics, and what the
//! loaded model tells them (tokenizer, prompt encoder, the banner's facts, grammars).

use crate::error::ApiError;
use crate::http::api_key;
use crate::metrics::Metrics;
use crate::openai::structured::Grammars;
use crate::worker::Job;
use anyhow::{bail, Result};
use axum::http::HeaderMap;
use std::sync::mpsc::SyncSender;
use std::sync::{Arc, OnceLock};
use std::time::{SystemTime, UNIX_EPOCH};
use wgemma::session::{PromptEncoder, Session, TextTools};

/// What the handlers share.
pub struct App {
    pub jobs: SyncSender<Job>,
    pub metrics: Arc<Metrics>,
    pub model_name: String,
    /// More names the model answers to (`--alias`).
    pub aliases: Vec<String>,
    pub api_key: Option<String>,
    /// Capacity of the job queue (for the 503's message).
    pub queue: usize,
    pub created: u64,
    /// Set by the model thread once the model has loaded.
    pub ready: Arc<OnceLock<Ready>>,
}

/// What the loaded model tells the handlers.
pub struct Ready {
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
pub struct ServerInfo {
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
    pub fn banner(&self, name: &str) -> String {
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
    /// Every name a request may give in `model`: the model's name, then its aliases.
    pub fn model_ids(&self) -> Vec<&str> {
        std::iter::once(self.model_name.as_str())
            .chain(self.aliases.iter().map(String::as_str))
            .collect()
    }

    /// The loaded model, or the 503 a client gets while it loads.
    pub fn ready(&self) -> Result<&Ready, ApiError> {
        self.ready.get().ok_or_else(|| {
            ApiError::unavailable("the model is still loading; retry when GET /health answers 200")
        })
    }

    /// Refuses a request without the right bearer key (when the server has one).
    pub fn authorize(&self, headers: &HeaderMap) -> Result<(), ApiError> {
        api_key::authorize(self.api_key.as_deref(), headers)
    }

    /// KV slots (for the metrics; 0 while loading).
    pub fn kv_slots(&self) -> usize {
        self.ready.get().map_or(0, |r| r.info.slots)
    }
}

pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl Ready {
    /// What the HTTP side needs of a loaded session (on `adapter`) that decodes `parallel`
    /// requests together, drafting `draft_tokens` per round when it has an assistant.
    pub fn new(
        session: &Session,
        adapter: String,
        parallel: usize,
        draft_tokens: usize,
    ) -> Result<Ready> {
        let rows = session.max_batch()?;
        if parallel > rows {
            bail!(
                "--parallel: expected at most {rows} sequences (rows of the largest \
                 forward plan: --prefill-chunk), found {parallel}"
            );
        }
        let info = session.model_info()?;
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
        Ok(Ready {
            encoder: session.prompt_encoder()?,
            text,
            info,
            grammars,
        })
    }
}

impl ServerInfo {
    /// The KV slot ids requests use: 1..=parallel (slot 0 is the KvState's own sequence).
    pub fn slot_ids(&self) -> std::ops::RangeInclusive<usize> {
        1..=self.slots
    }
}

/// Marks a response whose handler wrote its own log line (the completions: theirs ends
/// with the stream).
#[derive(Clone, Copy)]
pub struct Logged;

/// The id a response carries in `x-request-id`.
pub const REQUEST_ID: &str = "x-request-id";
