//! The library's front door: a GPU context with at most one target (its tokenizer, stop ids
//! and chat template) and one assistant bound to it, loaded from bytes, and generation
//! (plain or speculative) with a streaming callback, stop tokens and stop strings, sampling
//! and stats. The CLI, the browser crate and the server all drive this; none of them builds
//! prompts or stop lists of its own.
//!
//! Requests can also decode together, each in its own KV slot ([`Stream`]: continuous
//! batching, one forward per step for all of them), speculative ones included (each
//! stream drafting for itself, every stream's verify rows in one forward).
//!
//! Platform-independent (no threads, no filesystem, no blocking): the browser awaits it,
//! native callers block on it with pollster at their edge.

mod batch;
mod batch_spec;
pub mod chat;
pub mod stop;
mod types;

pub use batch::{Stream, StreamExtras, TokenConstraint};
pub use batch_spec::DraftReplacement;
pub use chat::{builtin_gemma4, encode_conversation, ChatMessage, ChatTemplate, RenderBudget};
pub use stop::StopStrings;
pub use types::*;

use crate::artifact::{self, Artifact, LoadHooks, Which};
use crate::error::{Error, Result};
use crate::gguf::{self, GgufFile, GgufWeights};
use crate::gpu::{ContextOptions, GpuContext};
use crate::model::assistant::{
    parse_assistant_config, Assistant, AssistantOptions, AssistantSource, AssistantSpec,
};
use crate::model::checkpoint::Checkpoint;
use crate::model::generate::{generate, GenerateOptions};
use crate::model::parse_config;
use crate::model::sampling::SamplingParams;
use crate::model::speculative::{generate_speculative, DraftSchedule, SpeculativeOptions};
use crate::model::synthetic::{SyntheticAssistant, SyntheticShape, SyntheticWeights};
use crate::model::target::{Model, ModelOptions};
use crate::model::tokenizer::{TextStream, Tokenizer, TURN_END, TURN_START};
use crate::model::weights::WeightFormat;
use crate::ops::opset::OpSet;
use std::sync::{Arc, Mutex};
use web_time::Instant;

const OP: &str = "session";

/// What a target needs around its weights to turn text into tokens and back.
#[derive(Default)]
pub struct TextSetup {
    /// Shared with [`PromptEncoder`]s, which encode prompts away from the model.
    pub tokenizer: Option<Arc<Tokenizer>>,
    /// EOS ids of generation_config.json (else config.json).
    pub eos_ids: Vec<u32>,
    /// The checkpoint's chat template (None: Gemma 4's built-in turn format).
    pub chat_template: Option<Arc<ChatTemplate>>,
}

impl TextSetup {
    /// The tokenizer, EOS ids and chat template of a checkpoint's files (any may be absent).
    pub fn from_files(
        tokenizer_json: Option<&[u8]>,
        generation_config: Option<&serde_json::Value>,
        config_eos_ids: Vec<u32>,
        chat_template_jinja: Option<&str>,
        tokenizer_config_json: Option<&str>,
    ) -> Result<TextSetup> {
        let tokenizer = tokenizer_json
            .map(Tokenizer::from_bytes)
            .transpose()
            .map_err(|e| e.within("tokenizer.json"))?
            .map(Arc::new);
        let mut eos_ids = generation_config.map(eos_ids_of).unwrap_or_default();
        if eos_ids.is_empty() {
            eos_ids = config_eos_ids;
        }
        let chat_template =
            ChatTemplate::from_checkpoint(chat_template_jinja, tokenizer_config_json)?
                .map(Arc::new);
        Ok(TextSetup {
            tokenizer,
            eos_ids,
            chat_template,
        })
    }
}

/// The `eos_token_id` (one id or a list) of a generation_config.json.
pub fn eos_ids_of(generation_config: &serde_json::Value) -> Vec<u32> {
    match generation_config.get("eos_token_id") {
        Some(serde_json::Value::Number(n)) => n.as_u64().map(|v| v as u32).into_iter().collect(),
        Some(serde_json::Value::Array(a)) => a
            .iter()
            .filter_map(|v| v.as_u64())
            .map(|v| v as u32)
            .collect(),
        _ => Vec::new(),
    }
}

/// Refuses a prompt plus `max_new_tokens` that cannot fit `context` positions, before any
/// token is generated (a limit found at the end would throw the generated tokens away).
pub fn check_budget(prompt: usize, max_new_tokens: usize, context: usize) -> Result<()> {
    // A prompt that alone leaves no room is the prompt's fault, whatever the budget.
    if prompt.saturating_add(max_new_tokens.min(1)) > context {
        return Err(Error::invalid(
            OP,
            "prompt tokens",
            format!(
                "at most {} (the context of {context} positions, less room for a new token)",
                context.saturating_sub(max_new_tokens.min(1))
            ),
            prompt,
        ));
    }
    match prompt.checked_add(max_new_tokens) {
        Some(total) if total <= context => Ok(()),
        total => Err(Error::invalid(
            OP,
            "prompt tokens + max new tokens",
            format!(
                "at most the context of {context} positions (max new tokens at most {} for \
                 this prompt)",
                context - prompt
            ),
            format!(
                "{prompt} + {max_new_tokens} = {}",
                total.map_or("more than 2^64".to_string(), |t| t.to_string())
            ),
        )),
    }
}

struct Target {
    model: Model,
    text: TextSetup,
    stop_ids: Vec<u32>,
    dtype: String,
    description: String,
    load_ms: f64,
}

/// A GPU context with at most one target and one assistant bound to it.
pub struct Session {
    ctx: GpuContext,
    target: Option<Target>,
    assistant: Option<Assistant>,
    /// Validation and out-of-memory errors the device reported. In the browser they arrive
    /// asynchronously and only as console warnings otherwise, while the failed work is
    /// silently skipped and readbacks return stale bytes: generation checks this after
    /// every step.
    gpu_errors: Arc<Mutex<Vec<String>>>,
    /// Batched speculative steps' staging (round starts) and draft readback, kept between
    /// steps.
    draft_staging: Option<crate::gpu::Tensor>,
    draft_readback: Option<crate::gpu::Readback>,
}

impl Session {
    /// Opens the GPU (`backends`: `BROWSER_WEBGPU` in the browser; None: the defaults).
    pub async fn new(backends: Option<wgpu::Backends>) -> Result<Session> {
        let ctx = GpuContext::new(ContextOptions {
            backends,
            ..ContextOptions::default()
        })
        .await?;
        Ok(Session::with_context(ctx))
    }

    /// A session on a context the caller opened.
    pub fn with_context(ctx: GpuContext) -> Session {
        let gpu_errors = Arc::new(Mutex::new(Vec::new()));
        let sink = gpu_errors.clone();
        ctx.device
            .on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
                sink.lock()
                    .expect("GPU error list poisoned")
                    .push(e.to_string());
            }));
        Session {
            ctx,
            target: None,
            assistant: None,
            gpu_errors,
            draft_staging: None,
            draft_readback: None,
        }
    }

    pub fn ctx(&self) -> &GpuContext {
        &self.ctx
    }

    /// Fails with the device's first reported error, if any (and forgets them all).
    fn check_gpu_errors(&self) -> Result<()> {
        let errors = std::mem::take(&mut *self.gpu_errors.lock().expect("GPU error list poisoned"));
        match errors.first() {
            None => Ok(()),
            Some(first) => Err(Error::Gpu(format!(
                "the device reported {} error(s); the output cannot be trusted. First: {first}",
                errors.len()
            ))),
        }
    }

    pub fn device_info(&self) -> DeviceInfo {
        let l = &self.ctx.limits;
        DeviceInfo {
            adapter: self.ctx.describe(),
            backend: format!("{:?}", self.ctx.info.backend),
            fallback_adapter: self.ctx.info.device_type == wgpu::DeviceType::Cpu,
            features: self
                .ctx
                .features
                .iter_names()
                .map(|(name, _)| name.to_lowercase())
                .collect(),
            max_storage_buffer_binding_size: l.max_storage_buffer_binding_size,
            max_buffer_size: l.max_buffer_size,
            max_compute_workgroups_per_dimension: l.max_compute_workgroups_per_dimension,
            max_compute_invocations_per_workgroup: l.max_compute_invocations_per_workgroup,
            max_compute_workgroup_storage_size: l.max_compute_workgroup_storage_size,
        }
    }

    /// The loaded target, or an error saying to load one.
    fn target(&self) -> Result<&Target> {
        self.target.as_ref().ok_or_else(no_model)
    }

    /// The loaded target model (an assistant is loaded against it).
    pub fn model(&self) -> Result<&Model> {
        Ok(&self.target()?.model)
    }

    /// The loaded target's tokenizer, if it has one.
    pub fn tokenizer(&self) -> Option<&Tokenizer> {
        self.target
            .as_ref()
            .and_then(|t| t.text.tokenizer.as_deref())
    }

    /// The loaded target's prompt encoding, detached from the session (for other threads).
    pub fn prompt_encoder(&self) -> Result<PromptEncoder> {
        let t = self.target()?;
        Ok(PromptEncoder {
            tokenizer: t.text.tokenizer.clone(),
            chat_template: t.text.chat_template.clone(),
            context: t.model.options.max_context,
        })
    }

    /// Token ids that end a generation: the EOS ids plus `<turn|>` when the vocabulary has it.
    pub fn stop_ids(&self) -> Result<&[u32]> {
        Ok(&self.target()?.stop_ids)
    }

    pub fn has_assistant(&self) -> bool {
        self.assistant.is_some()
    }

    pub fn model_info(&self) -> Result<ModelInfo> {
        let t = self.target()?;
        let c = &t.model.spec.config;
        Ok(ModelInfo {
            description: t.description.clone(),
            layers: c.num_hidden_layers,
            hidden_size: c.hidden_size,
            vocab_size: c.vocab_size,
            dtype: t.dtype.clone(),
            has_tokenizer: t.text.tokenizer.is_some(),
            has_chat_template: t.text.chat_template.is_some(),
            has_assistant: self.assistant.is_some(),
            weight_bytes: t.model.weight_bytes(),
            load_ms: t.load_ms,
            context: t.model.options.max_context,
        })
    }

    /// Installs a target the caller loaded (the CLI streams its files from a memory map);
    /// any assistant loaded before is dropped.
    pub fn install_model(
        &mut self,
        model: Model,
        text: TextSetup,
        dtype: &str,
        description: &str,
        load_ms: f64,
    ) {
        self.assistant = None;
        let stop_ids = match &text.tokenizer {
            Some(t) => t.stop_ids(&text.eos_ids),
            None => text.eos_ids.clone(),
        };
        self.target = Some(Target {
            model,
            text,
            stop_ids,
            dtype: dtype.to_string(),
            description: description.to_string(),
            load_ms,
        });
    }

    /// Installs an assistant the caller loaded for this session's target.
    pub fn install_assistant(&mut self, assistant: Assistant) {
        self.assistant = Some(assistant);
    }

    fn load_target(
        &mut self,
        load: impl FnOnce(&GpuContext) -> Result<Model>,
        text: TextSetup,
        dtype: String,
        description: String,
        start: Instant,
    ) -> Result<()> {
        // The old model's buffers go first: a browser tab has less GPU memory to spare.
        self.assistant = None;
        self.target = None;
        let model = load(&self.ctx)?;
        let load_ms = start.elapsed().as_secs_f64() * 1e3;
        self.install_model(model, text, &dtype, &description, load_ms);
        Ok(())
    }

    /// Loads a Hugging Face checkpoint (any assistant loaded before is dropped).
    pub fn load_checkpoint(
        &mut self,
        files: &CheckpointFiles,
        options: &LoadOptions,
    ) -> Result<ModelInfo> {
        let start = Instant::now();
        let model_options = ModelOptions {
            format: WeightFormat::parse(&options.dtype)?,
            max_context: options.context,
            prefill_chunk: options.prefill_chunk,
            sequences: options.sequences,
            ..ModelOptions::default()
        };
        let spec = parse_config(&files.config_json).map_err(|e| e.within("config.json"))?;
        let shards = files
            .shards
            .iter()
            .map(|(name, bytes)| (name.clone(), &bytes[..]))
            .collect();
        let ck = Checkpoint::from_shards(shards)?;
        let generation_config = files
            .generation_config_json
            .as_deref()
            .map(|json| {
                serde_json::from_str::<serde_json::Value>(json).map_err(|e| {
                    Error::invalid(OP, "generation_config.json", "valid JSON", e.to_string())
                })
            })
            .transpose()?;
        let text = TextSetup::from_files(
            files.tokenizer_json.as_deref(),
            generation_config.as_ref(),
            spec.eos_ids(),
            files.chat_template.as_deref(),
            files.tokenizer_config_json.as_deref(),
        )?;
        let c = &spec.config;
        let description = format!(
            "Gemma 4 checkpoint ({} layers, hidden {}, vocab {}), {}",
            c.num_hidden_layers, c.hidden_size, c.vocab_size, options.dtype
        );
        let allow_extra = options.allow_extra_tensors;
        let load = |ctx: &GpuContext| {
            let model = Model::load(ctx, &ck, spec, model_options, &mut |_, _| {})?;
            ck.check_all_read(allow_extra)?;
            Ok(model)
        };
        self.load_target(load, text, options.dtype.clone(), description, start)?;
        self.check_gpu_errors()?;
        self.model_info()
    }

    /// Loads a llama.cpp GGUF file (`gemma4`): config, tokenizer and chat template from its
    /// metadata,
    /// weights converted to `options.dtype` (Q4_0 into Q4 group 32 as it is).
    pub fn load_gguf(&mut self, bytes: &[u8], options: &LoadOptions) -> Result<ModelInfo> {
        let start = Instant::now();
        let model_options = ModelOptions {
            format: WeightFormat::parse(&options.dtype)?,
            max_context: options.context,
            prefill_chunk: options.prefill_chunk,
            sequences: options.sequences,
            ..ModelOptions::default()
        };
        let file = GgufFile::parse(bytes).map_err(|e| e.within("GGUF"))?;
        let spec = parse_config(&gguf::config_json(&file).map_err(|e| e.within("GGUF metadata"))?)
            .map_err(|e| e.within("the config the GGUF metadata describes"))?;
        let tokenizer = gguf::tokenizer::tokenizer_json(&file)
            .map_err(|e| e.within("the GGUF tokenizer metadata"))?;
        let mut eos_ids = gguf::eos_ids(&file);
        if eos_ids.is_empty() {
            eos_ids = spec.eos_ids();
        }
        let mut text = TextSetup::from_files(
            tokenizer.as_deref().map(str::as_bytes),
            None,
            eos_ids,
            None,
            None,
        )?;
        text.chat_template = ChatTemplate::from_gguf(&file)?.map(Arc::new);
        let c = &spec.config;
        let description = format!(
            "Gemma 4 GGUF ({} layers, hidden {}, vocab {}), {}",
            c.num_hidden_layers, c.hidden_size, c.vocab_size, options.dtype
        );
        let weights = GgufWeights::new(&file);
        let load =
            |ctx: &GpuContext| Model::load(ctx, &weights, spec, model_options, &mut |_, _| {});
        self.load_target(load, text, options.dtype.clone(), description, start)?;
        self.check_gpu_errors()?;
        self.model_info()
    }

    /// Loads a model artifact (`wgemma convert`): the target, and its assistant when the
    /// artifact holds one. Weights are stored in their GPU layout already (no dtype choice);
    /// checksums are verified unless `options.verify` is false.
    pub fn load_artifact(&mut self, bytes: &[u8], options: &ArtifactOptions) -> Result<ModelInfo> {
        let start = Instant::now();
        let art = Artifact::parse(bytes).map_err(|e| e.within("artifact"))?;
        let text = artifact_text(&art)?;
        let model_options = ModelOptions {
            format: art.format(),
            max_context: options.context,
            prefill_chunk: options.prefill_chunk,
            ..ModelOptions::default()
        };
        let c = &art.target_spec().config;
        let dtype = art.manifest().quant.describe();
        let description = format!(
            "Gemma 4 artifact ({} layers, hidden {}, vocab {}{}), {dtype}",
            c.num_hidden_layers,
            c.hidden_size,
            c.vocab_size,
            if art.assistant_spec().is_some() {
                ", with its MTP assistant"
            } else {
                ""
            },
        );
        let verify = options.verify;
        let load = |ctx: &GpuContext| {
            let hooks = LoadHooks {
                verify,
                progress: &mut |_, _| {},
                release: &|_| {},
            };
            artifact::load_target(ctx, &art, model_options, hooks)
        };
        self.load_target(load, text, dtype, description, start)?;
        if art.assistant_spec().is_some() {
            let target = self.target()?;
            let assistant =
                artifact::load_assistant(&self.ctx, &art, &target.model, verify, &|_| {})
                    .map_err(|e| e.within("loading the artifact's assistant"))?;
            self.assistant = Some(assistant);
        }
        self.check_gpu_errors()?;
        self.model_info()
    }

    /// The built-in demo: `wgemma demo`'s synthetic tiny target (random weights from
    /// `seed`, vocab 4096, no tokenizer) with its centroid-head MTP assistant.
    pub fn load_demo(&mut self, options: &DemoOptions) -> Result<ModelInfo> {
        let start = Instant::now();
        let model_options = ModelOptions {
            format: WeightFormat::parse(&options.dtype)?,
            max_context: options.context,
            ..ModelOptions::default()
        };
        let spec = SyntheticShape::Tiny.spec();
        let c = &spec.config;
        let description = format!(
            "built-in demo: synthetic Gemma 4 ({} layers, hidden {}, vocab {}, random weights, \
             seed {}, no tokenizer) + MTP assistant, {}",
            c.num_hidden_layers, c.hidden_size, c.vocab_size, options.seed, options.dtype
        );
        let text = TextSetup {
            eos_ids: spec.eos_ids(),
            ..TextSetup::default()
        };
        let weights = SyntheticWeights { seed: options.seed };
        let load =
            |ctx: &GpuContext| Model::load(ctx, &weights, spec, model_options, &mut |_, _| {});
        self.load_target(load, text, options.dtype.clone(), description, start)?;
        let source = SyntheticAssistant {
            target_seed: options.seed,
            seed: options.seed.wrapping_add(1),
        };
        let spec = parse_assistant_config(&source.config_json())?;
        self.load_assistant_from(&source, spec)?;
        self.check_gpu_errors()?;
        self.model_info()
    }

    /// Loads a `gemma4_assistant` checkpoint for the loaded target (weights in the
    /// target's format).
    pub fn load_assistant(
        &mut self,
        config_json: &str,
        shards: &[(String, Vec<u8>)],
    ) -> Result<()> {
        let spec =
            parse_assistant_config(config_json).map_err(|e| e.within("assistant config.json"))?;
        let shards = shards
            .iter()
            .map(|(name, bytes)| (name.clone(), &bytes[..]))
            .collect();
        let ck = Checkpoint::from_shards(shards)?;
        self.load_assistant_from(&ck, spec)
            .map_err(|e| e.within("loading the assistant"))
    }

    /// Loads a llama.cpp `gemma4-assistant` GGUF file for the loaded model (its weights
    /// take the target's dtype).
    pub fn load_assistant_gguf(&mut self, bytes: &[u8]) -> Result<()> {
        let file = GgufFile::parse(bytes).map_err(|e| e.within("assistant GGUF"))?;
        let spec = parse_assistant_config(
            &gguf::assistant_config_json(&file).map_err(|e| e.within("assistant GGUF metadata"))?,
        )
        .map_err(|e| e.within("the assistant config the GGUF metadata describes"))?;
        self.load_assistant_from(&gguf::GgufAssistant { file: &file }, spec)
            .map_err(|e| e.within("loading the assistant"))
    }

    fn load_assistant_from(
        &mut self,
        source: &dyn AssistantSource,
        spec: AssistantSpec,
    ) -> Result<()> {
        self.assistant = None;
        let target = self.target()?;
        let format = target.model.options.format;
        let assistant = Assistant::load(
            &self.ctx,
            source,
            spec,
            &target.model,
            &OpSet::with_mtp(),
            AssistantOptions { format },
        )?;
        self.assistant = Some(assistant);
        Ok(())
    }

    pub fn unload_assistant(&mut self) {
        self.assistant = None;
    }

    /// A conversation as text, ready for the model's reply: the checkpoint's template, or
    /// Gemma 4's turn format (which needs a tokenizer with its turn markers).
    pub fn render_chat(&self, messages: &[ChatMessage]) -> Result<String> {
        self.prompt_encoder()?.render_chat(messages)
    }

    /// The target's tokenizer, chat template and stop ids, detached from the session (a
    /// server tokenises and renders on its HTTP threads while the model thread generates).
    pub fn text_tools(&self) -> Result<TextTools> {
        let t = self.target()?;
        Ok(TextTools {
            tokenizer: t.text.tokenizer.clone(),
            chat_template: t.text.chat_template.clone(),
            stop_ids: t.stop_ids.clone(),
        })
    }

    /// The request's prompt as token ids: given ids, text (plain: `<bos>` + text; with
    /// `chat`: one user turn), or a conversation through the chat template.
    pub fn prompt_ids(&self, request: &GenerateRequest) -> Result<Vec<u32>> {
        self.prompt_encoder()?.prompt_ids(request)
    }

    /// Generates for `request`; `on_token` sees every committed token and returns `false`
    /// to stop (an abort or a client that went away goes through it).
    pub async fn generate(
        &mut self,
        request: &GenerateRequest,
        on_token: &mut dyn FnMut(&TokenEvent) -> bool,
    ) -> Result<GenerateResult> {
        self.check_gpu_errors()?;
        let prompt = self.prompt_ids(request)?;
        let target = self.target.as_mut().ok_or_else(no_model)?;
        check_budget(
            prompt.len(),
            request.max_new_tokens,
            target.model.options.max_context,
        )?;
        let options = GenerateOptions {
            max_new_tokens: request.max_new_tokens,
            sampling: SamplingParams {
                temperature: request.temperature,
                top_k: request.top_k,
                top_p: request.top_p,
                seed: request.seed,
                repeat_penalty: request.repeat_penalty,
            },
            stop_ids: target.stop_ids.clone(),
        };
        let gpu_errors = self.gpu_errors.clone();
        let tokenizer = target.text.tokenizer.as_deref();
        let mut stream = TextStream::new();
        let mut stops = StopStrings::new(&request.stop);
        let mut stream_error = None;
        let mut cancelled = false;
        let mut index = 0;
        let mut forward = |id: u32| {
            // The token came from a readback; errors of the work before it have been
            // delivered by now.
            if !gpu_errors
                .lock()
                .expect("GPU error list poisoned")
                .is_empty()
            {
                return false;
            }
            let text = match tokenizer.map(|t| stream.push(t, id)).transpose() {
                Ok(piece) => piece.flatten().map(|p| stops.push(&p)),
                Err(e) => {
                    stream_error = Some(e);
                    return false;
                }
            };
            let keep_going = on_token(&TokenEvent {
                index,
                id,
                text,
                logprobs: None,
            });
            index += 1;
            cancelled |= !keep_going;
            keep_going && !stops.stopped()
        };
        let (tokens, stats, loop_stats, draft_rounds) = if request.speculative {
            let assistant = self.assistant.as_mut().ok_or_else(|| {
                Error::invalid(
                    OP,
                    "speculative decoding",
                    "an assistant loaded (loadAssistant, --assistant, or an artifact with one)",
                    "none",
                )
            })?;
            let spec = SpeculativeOptions {
                draft_tokens: request.draft_tokens,
                schedule: if request.adaptive_draft {
                    DraftSchedule::Adaptive
                } else {
                    DraftSchedule::Fixed
                },
                trace: request.trace_drafts,
                capture_draft_logits: false,
            };
            let out = generate_speculative(
                &mut target.model,
                assistant,
                &self.ctx,
                &prompt,
                &options,
                &spec,
                &mut forward,
            )
            .await?;
            let stats = Stats::speculative(target.load_ms, &out.stats);
            (
                out.tokens,
                stats,
                LoopStats::Speculative(out.stats),
                out.rounds,
            )
        } else {
            let (tokens, stats) = generate(
                &mut target.model,
                &self.ctx,
                &prompt,
                &options,
                &mut forward,
            )
            .await?;
            let plain = Stats::plain(target.load_ms, &stats);
            (tokens, plain, LoopStats::Plain(stats), Vec::new())
        };
        self.check_gpu_errors()?;
        if let Some(e) = stream_error {
            return Err(e);
        }
        let stopped_by_text = stops.stopped();
        let finish_reason = if cancelled {
            FinishReason::Cancelled
        } else if stopped_by_text || tokens.last().is_some_and(|t| options.stop_ids.contains(t)) {
            FinishReason::Stop
        } else {
            FinishReason::Length
        };
        // Text held back as a possible start of a stop string that never completed.
        let unstreamed_text = stops.finish();
        let text = match self.tokenizer() {
            None => None,
            Some(_) if stopped_by_text => Some(stops.text().to_string()),
            Some(tok) => Some(tok.decode(&tokens)?),
        };
        Ok(GenerateResult {
            prompt_ids: prompt,
            tokens,
            text,
            stopped_early: cancelled,
            finish_reason,
            unstreamed_text,
            stats,
            loop_stats,
            draft_rounds,
        })
    }
}

/// A target's prompt encoding (tokenizer, chat template, context) apart from its session:
/// cheap to clone and shareable across threads, so a server tokenises on request threads
/// and the model thread never spends time on a prompt's text.
#[derive(Clone)]
pub struct PromptEncoder {
    tokenizer: Option<Arc<Tokenizer>>,
    chat_template: Option<Arc<ChatTemplate>>,
    context: usize,
}

impl PromptEncoder {
    pub fn tokenizer(&self) -> Option<&Tokenizer> {
        self.tokenizer.as_deref()
    }

    /// Positions of the model's KV cache: prompt + new tokens must fit.
    pub fn context(&self) -> usize {
        self.context
    }

    /// A conversation as text, ready for the model's reply: the checkpoint's template, or
    /// Gemma 4's turn format (which needs a tokenizer with its turn markers).
    pub fn render_chat(&self, messages: &[ChatMessage]) -> Result<String> {
        render_chat(
            self.chat_template.as_deref(),
            self.tokenizer.as_deref(),
            messages,
        )
    }

    /// The request's prompt as token ids: given ids, text (plain: `<bos>` + text; with
    /// `chat`: one user turn), or a conversation through the chat template.
    pub fn prompt_ids(&self, request: &GenerateRequest) -> Result<Vec<u32>> {
        let tokenizer = || {
            self.tokenizer.as_deref().ok_or_else(|| {
                Error::invalid(
                    OP,
                    "text prompt",
                    "a model with a tokenizer (tokenizer.json with the checkpoint)",
                    "a model without one: give promptIds instead",
                )
            })
        };
        let given = [
            request.prompt.is_some(),
            request.prompt_ids.is_some(),
            request.messages.is_some(),
        ];
        if given.iter().filter(|&&g| g).count() != 1 {
            return Err(Error::invalid(
                OP,
                "prompt",
                "exactly one of prompt (text), promptIds (token ids) or messages",
                format!("{} of them", given.iter().filter(|&&g| g).count()),
            ));
        }
        if request.chat && request.prompt.is_none() {
            return Err(Error::invalid(
                OP,
                "chat",
                "a text prompt to wrap in the chat template",
                if request.prompt_ids.is_some() {
                    "promptIds"
                } else {
                    "messages (already a conversation)"
                },
            ));
        }
        let ids = if let Some(ids) = &request.prompt_ids {
            ids.clone()
        } else if let Some(messages) = &request.messages {
            encode_conversation(tokenizer()?, messages, &|m| self.render_chat(m))?
        } else {
            let text = request.prompt.as_deref().unwrap_or_default();
            let tok = tokenizer()?;
            if request.chat {
                encode_conversation(tok, &[ChatMessage::new("user", text)], &|m| {
                    self.render_chat(m)
                })?
            } else {
                tok.encode_prompt(text)?
            }
        };
        if ids.is_empty() {
            return Err(Error::invalid(OP, "prompt tokens", "at least one", 0));
        }
        Ok(ids)
    }
}

/// A conversation as text through `template`, or Gemma 4's built-in turn format when there
/// is none (which needs the tokenizer, if any, to have the turn markers).
fn render_chat(
    template: Option<&ChatTemplate>,
    tokenizer: Option<&Tokenizer>,
    messages: &[ChatMessage],
) -> Result<String> {
    if let Some(template) = template {
        return template.render(messages, true);
    }
    if let Some(tok) = tokenizer {
        for marker in [TURN_START, TURN_END] {
            if tok.token_id(marker).is_none() {
                return Err(Error::invalid(
                    OP,
                    "chat format",
                    format!("a chat template, or a tokenizer with the `{marker}` token (Gemma 4)"),
                    "neither",
                ));
            }
        }
    }
    builtin_gemma4(messages, true)
}

/// A target's text side, detached from its session ([`Session::text_tools`]).
#[derive(Clone)]
pub struct TextTools {
    pub tokenizer: Option<Arc<Tokenizer>>,
    pub chat_template: Option<Arc<ChatTemplate>>,
    /// Token ids that end a generation.
    pub stop_ids: Vec<u32>,
}

impl TextTools {
    /// As [`Session::render_chat`].
    pub fn render_chat(&self, messages: &[ChatMessage]) -> Result<String> {
        render_chat(
            self.chat_template.as_deref(),
            self.tokenizer.as_deref(),
            messages,
        )
    }
}

fn no_model() -> Error {
    Error::invalid(
        OP,
        "model",
        "one loaded (loadModel, loadModelFromUrls, loadArtifact or loadDemo)",
        "none",
    )
}

/// The tokenizer, EOS ids and chat template an artifact stores.
fn artifact_text(art: &Artifact) -> Result<TextSetup> {
    let tokenizer_json = art.tokenizer_json(Which::Target)?;
    TextSetup::from_files(
        tokenizer_json,
        art.manifest().target.generation_config.as_ref(),
        art.target_spec().eos_ids(),
        None,
        None,
    )
    .map_err(|e| e.within("the artifact's text files"))
}
