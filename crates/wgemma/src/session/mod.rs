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
pub mod bench;
mod drafting;
mod load;
mod loader;
mod places;
mod prompt;
mod source;
mod types;

pub use crate::generate::speculative::{DraftSource, OracleDrafts};
pub use crate::text::chat::{
    builtin_gemma4, builtin_gemma4_with_tools, encode_conversation, encode_conversation_with_tools,
    ChatMessage, ChatTemplate, RenderBudget,
};
pub use crate::text::stop::StopStrings;
pub use crate::text::tools::{ToolCall, ToolDeclaration, ToolResponse};
pub use batch::{Stream, StreamExtras, TokenConstraint};
pub use loader::{eos_ids_of, load_assistant, load_target, size_limits, LoadedTarget, TextSetup};
pub use prompt::{PromptEncoder, TextTools};
pub use source::{
    AssistantFrom, CheckpointSource, Label, LoadEvent, LoadHooks, LoadSource, Opened, PlaceFn, Step,
};
pub use types::*;

use crate::error::{Error, Result};
use crate::generate::plain::{generate, GenerateOptions};
use crate::generate::sampling::SamplingParams;
use crate::generate::speculative::{
    generate_speculative, DraftRound, DraftSchedule, SpeculativeOptions,
};
use crate::gpu::{ContextOptions, GpuContext, GpuErrors};
use crate::model::assistant::Assistant;
use crate::model::state::KvState;
use crate::model::target::Model;
use crate::text::tokenizer::{TextStream, Tokenizer};
use prompt::text_stream;

const OP: &str = "session";

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
    state: KvState,
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
    /// Validation and out-of-memory errors the device reported: generation checks them
    /// after every step.
    gpu_errors: GpuErrors,
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
        let gpu_errors = GpuErrors::collect(&ctx);
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
        self.gpu_errors.check()
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

    /// The loaded target model.
    pub fn model(&self) -> Result<&Model> {
        Ok(self.target()?.state.model())
    }

    /// The loaded target's KV state (an assistant is loaded against it: it reads the
    /// target's caches).
    pub fn kv_state(&self) -> Result<&KvState> {
        Ok(&self.target()?.state)
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
            context: t.state.model().options.max_context,
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
        let c = &t.state.model().spec.config;
        Ok(ModelInfo {
            description: t.description.clone(),
            layers: c.num_hidden_layers,
            hidden_size: c.hidden_size,
            vocab_size: c.vocab_size,
            dtype: t.dtype.clone(),
            has_tokenizer: t.text.tokenizer.is_some(),
            has_chat_template: t.text.chat_template.is_some(),
            has_assistant: self.assistant.is_some(),
            weight_bytes: t.state.model().weight_bytes(),
            load_ms: t.load_ms,
            context: t.state.model().options.max_context,
        })
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
            target.state.model().options.max_context,
        )?;
        let options = generate_options(request, target.stop_ids.clone());
        let tokenizer = target.text.tokenizer.as_deref();
        let mut sink = TokenSink {
            gpu_errors: self.gpu_errors.clone(),
            tokenizer,
            stream: text_stream(tokenizer, request),
            stops: StopStrings::new(&request.stop),
            stream_error: None,
            cancelled: false,
            index: 0,
            on_token,
        };
        let speculative = if request.speculative {
            let assistant = self.assistant.as_mut().ok_or_else(|| {
                Error::invalid(
                    OP,
                    "speculative decoding",
                    "an assistant loaded (loadAssistant, --assistant, or an artifact with one)",
                    "none",
                )
            })?;
            Some((assistant, speculative_options(request)))
        } else {
            None
        };
        let state = &mut target.state;
        let forward = &mut |id| sink.push(id);
        let (tokens, loop_stats, draft_rounds) =
            decode(state, &self.ctx, &prompt, &options, speculative, forward).await?;
        let stats = match &loop_stats {
            LoopStats::Speculative(s) => Stats::speculative(target.load_ms, s),
            LoopStats::Plain(s) => Stats::plain(target.load_ms, s),
        };
        let TokenSink {
            mut stops,
            stream_error,
            cancelled,
            ..
        } = sink;
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
            Some(tok) => Some(text_stream(Some(tok), request).text_of(tok, &tokens)?),
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

/// The generation loop's options from a request.
fn generate_options(request: &GenerateRequest, stop_ids: Vec<u32>) -> GenerateOptions {
    GenerateOptions {
        max_new_tokens: request.max_new_tokens,
        sampling: SamplingParams {
            temperature: request.temperature,
            top_k: request.top_k,
            top_p: request.top_p,
            seed: request.seed,
            repeat_penalty: request.repeat_penalty,
        },
        stop_ids,
    }
}

/// The speculative loop's options from a request.
fn speculative_options(request: &GenerateRequest) -> SpeculativeOptions {
    SpeculativeOptions {
        draft_tokens: request.draft_tokens,
        schedule: if request.adaptive_draft {
            DraftSchedule::Adaptive
        } else {
            DraftSchedule::Fixed
        },
        trace: request.trace_drafts,
        capture_draft_logits: false,
    }
}

/// Runs the plain loop, or the speculative one with `speculative`'s assistant and options;
/// returns the tokens, the loop's stats and the draft rounds (none when plain).
async fn decode(
    state: &mut KvState,
    ctx: &GpuContext,
    prompt: &[u32],
    options: &GenerateOptions,
    speculative: Option<(&mut Assistant, SpeculativeOptions)>,
    forward: &mut dyn FnMut(u32) -> bool,
) -> Result<(Vec<u32>, LoopStats, Vec<DraftRound>)> {
    Ok(match speculative {
        Some((assistant, spec)) => {
            let out = generate_speculative(state, assistant, ctx, prompt, options, &spec, forward)
                .await?;
            (out.tokens, LoopStats::Speculative(out.stats), out.rounds)
        }
        None => {
            let (tokens, stats) = generate(state, ctx, prompt, options, forward).await?;
            (tokens, LoopStats::Plain(stats), Vec::new())
        }
    })
}

/// Where `generate`'s committed tokens go: their text through the stop strings, then the
/// caller's callback; it stops the loop on a GPU error, a detokenisation error, the
/// callback's `false` or a completed stop string.
struct TokenSink<'a> {
    gpu_errors: GpuErrors,
    tokenizer: Option<&'a Tokenizer>,
    stream: TextStream,
    stops: StopStrings,
    stream_error: Option<Error>,
    cancelled: bool,
    /// The next token's index in the output.
    index: usize,
    on_token: &'a mut dyn FnMut(&TokenEvent) -> bool,
}

impl TokenSink<'_> {
    /// Takes token `id`; whether the loop goes on.
    fn push(&mut self, id: u32) -> bool {
        // The token came from a readback; errors of the work before it have been
        // delivered by now.
        if self.gpu_errors.any() {
            return false;
        }
        let text = match self.tokenizer.map(|t| self.stream.push(t, id)).transpose() {
            Ok(piece) => piece.flatten().map(|p| self.stops.push(&p)),
            Err(e) => {
                self.stream_error = Some(e);
                return false;
            }
        };
        let keep_going = (self.on_token)(&TokenEvent {
            index: self.index,
            id,
            text,
            logprobs: None,
        });
        self.index += 1;
        self.cancelled |= !keep_going;
        keep_going && !self.stops.stopped()
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
