//! What goes in and out of a [`super::Session`]: load options, a generation request, the
//! streamed token event, stats and the result. Their serde forms are the browser's JS API
//! (camelCase, unknown fields refused).

use crate::generate::plain::GenerateStats;
use crate::generate::speculative::{DraftRound, SpeculativeOptions, SpeculativeStats};
use crate::model::target::ModelOptions;
use crate::text::chat::ChatMessage;
use crate::text::tools::ToolDeclaration;
use serde::{Deserialize, Serialize};

/// The files of a Hugging Face checkpoint, as bytes (read, fetched or mapped by the caller).
#[derive(Debug, Default)]
pub struct CheckpointFiles {
    pub config_json: String,
    /// `(file name, bytes)` of every safetensors shard.
    pub shards: Vec<(String, Vec<u8>)>,
    pub tokenizer_json: Option<Vec<u8>>,
    pub generation_config_json: Option<String>,
    /// `tokenizer_config.json` (its `chat_template` and special tokens).
    pub tokenizer_config_json: Option<String>,
    /// `chat_template.jinja`.
    pub chat_template: Option<String>,
}

/// How to build the target (the CLI's defaults: Q4 group 32, 4096 positions, chunks of 64).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct LoadOptions {
    /// `auto` (a checkpoint in Q4 group 32, a GGUF file at its own types), `q4` (group
    /// 32), `q4g64`, `q4g128`, `f16` or `f32`.
    pub dtype: String,
    /// KV cache positions (prompt + generated tokens).
    pub context: usize,
    /// Rows per prefill forward.
    pub prefill_chunk: usize,
    /// KV cache slots (sequences held at once: 1 + the streams of a batch).
    pub sequences: usize,
    /// Load a checkpoint holding decoder tensors its config does not describe (they are
    /// ignored) instead of refusing it.
    pub allow_extra_tensors: bool,
}

impl Default for LoadOptions {
    fn default() -> Self {
        let d = ModelOptions::default();
        LoadOptions {
            dtype: "auto".into(),
            context: d.max_context,
            prefill_chunk: d.prefill_chunk,
            sequences: d.sequences,
            allow_extra_tensors: false,
        }
    }
}

/// How to load an artifact (its weights are in their stored format already).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct ArtifactOptions {
    pub context: usize,
    pub prefill_chunk: usize,
    /// Check every tensor's XXH3 checksum as it is read (default true).
    pub verify: bool,
}

impl Default for ArtifactOptions {
    fn default() -> Self {
        let d = LoadOptions::default();
        ArtifactOptions {
            context: d.context,
            prefill_chunk: d.prefill_chunk,
            verify: true,
        }
    }
}

/// Options of the built-in demo model.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct DemoOptions {
    /// Seed of the synthetic weights (the CLI's `wgemma demo --seed`).
    pub seed: u64,
    pub dtype: String,
    pub context: usize,
}

impl Default for DemoOptions {
    fn default() -> Self {
        DemoOptions {
            seed: 0,
            dtype: "q4".into(),
            context: 1024,
        }
    }
}

/// One generation request; every field but the prompt has the CLI's default. Exactly one
/// of `prompt`, `promptIds` and `messages` is given.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct GenerateRequest {
    /// Prompt text (needs a tokenizer).
    pub prompt: Option<String>,
    /// Prompt token ids (instead of text).
    pub prompt_ids: Option<Vec<u32>>,
    /// A conversation, rendered with the checkpoint's chat template (Gemma 4's turn format
    /// when it has none), ready for the model's reply.
    pub messages: Option<Vec<ChatMessage>>,
    /// Functions the model may call, declared to it with `messages` (the chat template's
    /// `tools`). Not part of the browser's JSON request.
    #[serde(skip)]
    pub tools: Vec<ToolDeclaration>,
    /// More variables for the chat template (vLLM's and llama.cpp's `chat_template_kwargs`,
    /// e.g. `enable_thinking`); they never replace `messages`, `tools` or the others the
    /// template is given. Not part of the browser's JSON request.
    #[serde(skip)]
    pub template_kwargs: serde_json::Map<String, serde_json::Value>,
    /// Wrap the text prompt in the chat template as one user turn.
    pub chat: bool,
    pub max_new_tokens: usize,
    /// 0 = greedy.
    pub temperature: f32,
    pub top_k: usize,
    pub top_p: f32,
    pub seed: u64,
    /// Divides the logits of the last 64 generated tokens' ids (positive ones; multiplies
    /// negative ones) before sampling; 1.0 (default) = none. Greedy decoding and speculative
    /// rounds ignore it.
    pub repeat_penalty: f32,
    /// Text that ends the generation; the output is cut before it.
    pub stop: Vec<String>,
    /// Draft with the loaded assistant (MTP speculative decoding).
    pub speculative: bool,
    /// Drafts per round, 1..=8.
    pub draft_tokens: usize,
    /// The adaptive schedule (default): k in 0..=8 from the acceptance and round costs
    /// measured so far, plain pipelined steps when drafting does not pay; `draft_tokens` is
    /// the first round's k. `false`: `draft_tokens` every round.
    pub adaptive_draft: bool,
    /// Keep every speculative round's drafts ([`GenerateResult::draft_rounds`]).
    pub trace_drafts: bool,
    /// Write Gemma 4's tool-call markers into the text even where the vocabulary has them as
    /// special tokens (which text otherwise skips), so the reply's calls can be read back.
    /// Not part of the browser's JSON request.
    #[serde(skip)]
    pub keep_tool_markers: bool,
}

impl Default for GenerateRequest {
    fn default() -> Self {
        GenerateRequest {
            prompt: None,
            prompt_ids: None,
            messages: None,
            tools: Vec::new(),
            template_kwargs: serde_json::Map::new(),
            chat: false,
            max_new_tokens: 128,
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            seed: 0,
            repeat_penalty: 1.0,
            stop: Vec::new(),
            speculative: false,
            draft_tokens: SpeculativeOptions::default().draft_tokens,
            adaptive_draft: true,
            trace_drafts: false,
            keep_tool_markers: false,
        }
    }
}

/// What the streaming callback sees for each generated token.
#[derive(Debug, Clone, Serialize)]
pub struct TokenEvent {
    /// Position in the output (0 = first generated token).
    pub index: usize,
    pub id: u32,
    /// The newly printable text (None without a tokenizer, inside a multi-byte character,
    /// or while it may be the start of a stop string).
    pub text: Option<String>,
    /// Its log-probability and the most likely alternatives' (streams asked for them).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub logprobs: Option<TokenLogprobs>,
}

/// A token's log-probability under the distribution it was drawn from, before temperature
/// and truncation (the logits after penalties, bias and any constraint), and the `top`
/// most likely tokens' (most likely first).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TokenLogprobs {
    pub logprob: f32,
    pub top: Vec<(u32, f32)>,
}

/// Why a generation ended (OpenAI's `finish_reason`, plus the caller's own stop).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// A stop token or a stop string.
    Stop,
    /// The token budget.
    Length,
    /// The callback returned false (an abort or a disconnected client).
    Cancelled,
    /// The stream's token constraint could not go on (a grammar that allows no next token,
    /// or refuses one it allowed): `Stream::failure` says why. Only that stream ends.
    Failed,
}

/// Timings and counts of one generation (speculative fields only when it drafted).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Stats {
    pub load_ms: f64,
    pub prompt_tokens: usize,
    pub generated_tokens: usize,
    pub ttft_ms: f64,
    pub prefill_tokens_per_s: f64,
    pub decode_tokens_per_s: f64,
    pub speculative: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rounds: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub drafted: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub accepted: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub acceptance_rate: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokens_per_round: Option<f64>,
}

impl Stats {
    pub(super) fn plain(load_ms: f64, s: &GenerateStats) -> Stats {
        Stats {
            load_ms,
            prompt_tokens: s.prompt_tokens,
            generated_tokens: s.generated_tokens,
            ttft_ms: s.ttft_ms,
            prefill_tokens_per_s: s.prefill_tokens_per_s,
            decode_tokens_per_s: s.decode_tokens_per_s,
            speculative: false,
            rounds: None,
            drafted: None,
            accepted: None,
            acceptance_rate: None,
            tokens_per_round: None,
        }
    }

    pub(super) fn speculative(load_ms: f64, s: &SpeculativeStats) -> Stats {
        Stats {
            speculative: true,
            rounds: Some(s.rounds),
            drafted: Some(s.drafted),
            accepted: Some(s.accepted),
            acceptance_rate: Some(s.acceptance_rate),
            tokens_per_round: Some(s.tokens_per_round),
            ..Stats::plain(load_ms, &s.base)
        }
    }
}

/// The library's own stats of the loop that ran (the CLI prints them as they are).
#[derive(Debug, Clone)]
pub enum LoopStats {
    Plain(GenerateStats),
    Speculative(SpeculativeStats),
}

impl LoopStats {
    /// `prompt 12 tok, 840.1 tok/s | generated 64 tok, ...` (and the rounds when drafting).
    pub fn summary(&self) -> String {
        match self {
            LoopStats::Plain(s) => s.summary(),
            LoopStats::Speculative(s) => s.summary(),
        }
    }

    pub fn to_json(&self) -> serde_json::Value {
        match self {
            LoopStats::Plain(s) => serde_json::to_value(s),
            LoopStats::Speculative(s) => serde_json::to_value(s),
        }
        .expect("stats serialise")
    }
}

/// The result of [`super::Session::generate`].
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GenerateResult {
    pub prompt_ids: Vec<u32>,
    /// Every generated token (a stop token included, as HF does).
    pub tokens: Vec<u32>,
    /// The text shown (special tokens skipped, cut before a stop string).
    pub text: Option<String>,
    /// The callback (or an abort) stopped it before a stop token, stop string or budget.
    pub stopped_early: bool,
    pub finish_reason: FinishReason,
    /// Text the callback never saw: the tail held back while it could have been the start
    /// of a stop string (a streaming caller sends it last).
    #[serde(skip)]
    pub unstreamed_text: String,
    pub stats: Stats,
    #[serde(skip)]
    pub loop_stats: LoopStats,
    /// Every speculative round (with `traceDrafts`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub draft_rounds: Vec<DraftRound>,
}

/// What was loaded.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelInfo {
    pub description: String,
    pub layers: usize,
    pub hidden_size: usize,
    pub vocab_size: usize,
    pub dtype: String,
    pub has_tokenizer: bool,
    /// The checkpoint's own Jinja chat template is used (else Gemma 4's built-in format).
    pub has_chat_template: bool,
    pub has_assistant: bool,
    pub weight_bytes: u64,
    pub load_ms: f64,
    /// KV cache positions.
    pub context: usize,
}

/// The device and what the browser (or driver) allows.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DeviceInfo {
    pub adapter: String,
    pub backend: String,
    pub fallback_adapter: bool,
    pub features: Vec<String>,
    pub max_storage_buffer_binding_size: u64,
    pub max_buffer_size: u64,
    pub max_compute_workgroups_per_dimension: u32,
    pub max_compute_invocations_per_workgroup: u32,
    pub max_compute_workgroup_storage_size: u32,
}
