//! The front door's loads: [`load_target`] turns a [`LoadSource`] into a model with its
//! text setup, [`load_assistant`] an [`AssistantFrom`] into an MTP assistant for a loaded
//! target. Every caller (the CLI, the server, the browser, the demo) loads through these,
//! so a source is parsed, checked and named in errors one way.

use super::places::{
    artifact_names, assistant_artifact_names, assistant_checkpoint_names, assistant_gguf_names,
    checkpoint_names, gguf_names, no_names, Names,
};
use super::source::{
    AssistantFrom, CheckpointSource, Label, LoadEvent, LoadHooks, LoadSource, Opened, Step,
};
use crate::error::{Error, Result};
use crate::formats::artifact::{self, Artifact, Which};
use crate::formats::gguf::{self, GgufFile, GgufWeights};
use crate::formats::hf::{describe_unread, Checkpoint};
use crate::formats::synthetic::{
    RandomAssistant, SyntheticAssistant, SyntheticShape, SyntheticWeights,
};
use crate::gpu::GpuContext;
use crate::model::assistant::{parse_assistant_config, Assistant, AssistantOptions, AssistantSpec};
use crate::model::state::KvState;
use crate::model::target::ModelOptions;
use crate::model::weights::WeightFormat;
use crate::model::{parse_config, ModelSpec, SizeLimits};
use crate::ops::opset::OpSet;
use crate::text::chat::ChatTemplate;
use crate::text::tokenizer::{Tokenizer, BUILTIN_FORMAT_MARKERS};
use crate::weights::source::WeightSource;
use crate::weights::upload::StreamOptions;
use std::sync::Arc;
use web_time::Instant;

/// What a target needs around its weights to turn text into tokens and back.
#[derive(Default)]
pub struct TextSetup {
    /// Shared with [`PromptEncoder`](super::PromptEncoder)s, which encode prompts away from the model.
    pub tokenizer: Option<Arc<Tokenizer>>,
    /// EOS ids of generation_config.json (else config.json).
    pub eos_ids: Vec<u32>,
    /// The checkpoint's chat template (None: Gemma 4's built-in turn format).
    pub chat_template: Option<Arc<ChatTemplate>>,
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

/// A target loaded by [`load_target`], ready for [`super::Session::install`].
pub struct LoadedTarget {
    /// The model and its KV caches, ready to run.
    pub state: KvState,
    pub text: TextSetup,
    /// What [`super::Session::model_info`] reports, as [`LoadHooks::label`] asked.
    pub dtype: String,
    pub description: String,
    /// Wall time of the load.
    pub load_ms: f64,
}

/// What a load of `options` may use on `ctx` and a host of `host_memory_bytes`.
pub fn size_limits(
    ctx: &GpuContext,
    options: &ModelOptions,
    host_memory_bytes: Option<u64>,
) -> SizeLimits {
    SizeLimits {
        bytes_per_weight: match options.format {
            WeightFormat::F32 => 4.0,
            WeightFormat::F16 => 2.0,
            // 4-bit values plus one f16 scale per group.
            WeightFormat::Q4 { group } => 0.5 + 2.0 / group.max(1) as f64,
        },
        max_context: options.max_context,
        // Forwards that return every row's logits: verify forwards in one piece (prefill
        // chunks compute the last row's only; `KvState::forward` cuts all-row requests into
        // pieces whose logits fit a buffer).
        max_rows: options.max_verify_rows,
        max_buffer_bytes: ctx.limits.max_buffer_size,
        host_memory_bytes,
        device_is_host: ctx.info.device_type == wgpu::DeviceType::Cpu,
    }
}

/// Cuts a context past the model's positions (`max_position_embeddings`) to them before
/// anything is allocated, as [`LoadEvent::ContextClamped`] reports.
fn clamp_context(
    spec: &ModelSpec,
    options: &mut ModelOptions,
    progress: &mut Box<dyn FnMut(LoadEvent) + '_>,
) {
    let positions = spec.config.max_position_embeddings.unwrap_or(usize::MAX);
    if (1..options.max_context).contains(&positions) {
        progress(LoadEvent::ContextClamped {
            asked: options.max_context,
            positions,
        });
        options.max_context = positions;
        options.prefill_chunk = options.prefill_chunk.min(positions);
    }
}

impl LoadHooks<'_> {
    /// The model options, in `format` or else `default`.
    fn model_options(&self, default: WeightFormat) -> ModelOptions {
        ModelOptions {
            format: self.format.unwrap_or(default),
            ..self.options
        }
    }

    /// Refuses `spec` at `options` before anything is allocated, when the caller asks.
    fn check_sizes(
        &self,
        ctx: &GpuContext,
        spec: &ModelSpec,
        options: &ModelOptions,
    ) -> Result<()> {
        if self.check_sizes {
            spec.check_sizes(&size_limits(ctx, options, self.host_memory_bytes))?;
        }
        Ok(())
    }

    /// The dtype a summary label reports (`stored`: an artifact's quantisation).
    fn summary_dtype(&self, format: WeightFormat) -> String {
        match &self.label {
            Label::Summary { dtype: Some(d) } => d.clone(),
            _ => format!("{format:?}"),
        }
    }
}

/// Loads the target `source` holds on `ctx`. The caller installs it in a session
/// ([`super::Session::load`] does both) or drives the model itself (benches, the demo).
pub fn load_target(
    ctx: &GpuContext,
    source: LoadSource<'_>,
    mut hooks: LoadHooks<'_>,
) -> Result<LoadedTarget> {
    let start = Instant::now();
    let (state, text, summary) = match source {
        LoadSource::Checkpoint(files) => checkpoint(ctx, files, &mut hooks)?,
        LoadSource::Gguf(bytes) => gguf(ctx, bytes, &mut hooks)?,
        LoadSource::Artifact(bytes) => return artifact(ctx, bytes, &mut hooks, start),
        LoadSource::Synthetic { shape, seed } => synthetic(ctx, shape, seed, &mut hooks)?,
    };
    let format = state.model().options.format;
    Ok(finish(
        state,
        text,
        summary,
        hooks.summary_dtype(format),
        hooks.label,
        start,
    ))
}

/// The loaded target under the label the caller asked for.
fn finish(
    state: KvState,
    text: TextSetup,
    summary: String,
    summary_dtype: String,
    label: Label,
    start: Instant,
) -> LoadedTarget {
    let (dtype, description) = match label {
        Label::Path(path) => (format!("{:?}", state.model().options.format), path),
        Label::Named { dtype, description } => (dtype, description),
        Label::Summary { .. } => (summary_dtype.clone(), format!("{summary}, {summary_dtype}")),
    };
    LoadedTarget {
        state,
        text,
        dtype,
        description,
        load_ms: start.elapsed().as_secs_f64() * 1e3,
    }
}

/// "Gemma 4 {what} (N layers, hidden H, vocab V{extra})".
fn summary(what: &str, spec: &ModelSpec, extra: &str) -> String {
    let c = &spec.config;
    format!(
        "{what} ({} layers, hidden {}, vocab {}{extra})",
        c.num_hidden_layers, c.hidden_size, c.vocab_size
    )
}

/// Uploads `spec`'s weights from `source`, its steps reported to `progress`, and
/// allocates the KV caches.
fn load_weights(
    ctx: &GpuContext,
    source: &dyn WeightSource,
    spec: ModelSpec,
    options: ModelOptions,
    progress: &mut Box<dyn FnMut(LoadEvent) + '_>,
) -> Result<KvState> {
    KvState::load(ctx, source, spec, options, &mut |done, total| {
        progress(LoadEvent::Steps { done, total })
    })
}

/// The text side of a target, shared with the prompt encoders.
fn text_setup(
    tokenizer: Option<Tokenizer>,
    eos_ids: Vec<u32>,
    chat_template: Option<ChatTemplate>,
) -> Result<TextSetup> {
    // Every added token the chat format writes is a marker in message content, whatever
    // its special flag says.
    let tokenizer = tokenizer
        .map(|mut t| {
            match &chat_template {
                Some(template) => t.mark_format_tokens(&template.format_text()),
                None => t.mark_format_tokens(&BUILTIN_FORMAT_MARKERS),
            }
            .map(|()| Arc::new(t))
        })
        .transpose()?;
    Ok(TextSetup {
        tokenizer,
        eos_ids,
        chat_template: chat_template.map(Arc::new),
    })
}

fn checkpoint(
    ctx: &GpuContext,
    files: CheckpointSource<'_>,
    hooks: &mut LoadHooks<'_>,
) -> Result<(KvState, TextSetup, String)> {
    let names = Names::new(&hooks.place, checkpoint_names);
    let mut options = hooks.model_options(WeightFormat::Q4 { group: 32 });
    let spec = parse_config(files.config_json).map_err(names.at(Step::Config))?;
    clamp_context(&spec, &mut options, &mut hooks.progress);
    hooks
        .check_sizes(ctx, &spec, &options)
        .map_err(names.at(Step::Sizes))?;
    let bytes = files.shards.iter().map(|(_, b)| b.len() as u64).sum();
    let shards = files.shards.len();
    (hooks.progress)(LoadEvent::Opened(Opened::Checkpoint { shards, bytes }));
    let ck = Checkpoint::from_shards(files.shards)
        .map_err(names.at(Step::Open))?
        .with_release(&*hooks.release)
        .with_quantiser(hooks.quantiser);
    let tokenizer = files
        .tokenizer_json
        .map(Tokenizer::from_bytes)
        .transpose()
        .map_err(names.at(Step::Tokenizer))?;
    let mut eos_ids = files.generation_config.map(eos_ids_of).unwrap_or_default();
    if eos_ids.is_empty() {
        eos_ids = spec.eos_ids();
    }
    let chat_template = ChatTemplate::from_checkpoint(files.chat_template, files.tokenizer_config)
        .map_err(names.at(Step::ChatTemplate))?;
    let summary = summary("Gemma 4 checkpoint", &spec, "");
    let state = load_weights(ctx, &ck, spec, options, &mut hooks.progress)
        .map_err(names.at(Step::Weights))?;
    let unread = ck
        .check_all_read(hooks.allow_extra_tensors)
        .map_err(names.at(Step::UnreadTensors))?;
    if !unread.is_empty() {
        (hooks.progress)(LoadEvent::IgnoredTensors(describe_unread(&unread)));
    }
    let text = text_setup(tokenizer, eos_ids, chat_template).map_err(names.at(Step::Tokenizer))?;
    Ok((state, text, summary))
}

fn gguf(
    ctx: &GpuContext,
    bytes: &[u8],
    hooks: &mut LoadHooks<'_>,
) -> Result<(KvState, TextSetup, String)> {
    let names = Names::new(&hooks.place, gguf_names);
    let mut options = hooks.model_options(WeightFormat::Q4 { group: 32 });
    let file = GgufFile::parse(bytes).map_err(names.at(Step::Open))?;
    let config = gguf::config_json(&file).map_err(names.at(Step::Metadata))?;
    let spec = parse_config(&config).map_err(names.at(Step::Config))?;
    clamp_context(&spec, &mut options, &mut hooks.progress);
    hooks
        .check_sizes(ctx, &spec, &options)
        .map_err(names.at(Step::Sizes))?;
    let tokenizer = gguf::tokenizer::tokenizer_json(&file)
        .map_err(names.at(Step::TokenizerMetadata))?
        .map(|json| Tokenizer::from_bytes(json.as_bytes()))
        .transpose()
        .map_err(names.at(Step::Tokenizer))?;
    let mut eos_ids = gguf::eos_ids(&file);
    if eos_ids.is_empty() {
        eos_ids = spec.eos_ids();
    }
    let chat_template = ChatTemplate::from_gguf(&file).map_err(names.at(Step::ChatTemplate))?;
    (hooks.progress)(LoadEvent::Opened(Opened::Gguf {
        version: file.version,
        tensors: file.tensors.len(),
        bytes: bytes.len() as u64,
    }));
    let summary = summary("Gemma 4 GGUF", &spec, "");
    let release = &*hooks.release;
    let release = |range| release(0, range);
    let weights = GgufWeights::new(&file)
        .with_release(&release)
        .with_stream(StreamOptions {
            quantiser: hooks.quantiser,
            // No --dtype: the file's ggml types run as stored.
            native_ggml: hooks.format.is_none(),
            ..StreamOptions::default()
        });
    let state = load_weights(ctx, &weights, spec, options, &mut hooks.progress)
        .map_err(names.at(Step::Weights))?;
    if let Some(line) = weights.conversion_line() {
        (hooks.progress)(LoadEvent::Converted(line));
    }
    let text = text_setup(tokenizer, eos_ids, chat_template).map_err(names.at(Step::Tokenizer))?;
    Ok((state, text, summary))
}

/// An artifact's target (its summary dtype is its stored quantisation, whatever the
/// caller spelled).
fn artifact(
    ctx: &GpuContext,
    bytes: &[u8],
    hooks: &mut LoadHooks<'_>,
    start: Instant,
) -> Result<LoadedTarget> {
    let names = Names::new(&hooks.place, artifact_names);
    let art = Artifact::parse(bytes).map_err(names.at(Step::Open))?;
    let mut options = hooks.model_options(art.format());
    clamp_context(art.target_spec(), &mut options, &mut hooks.progress);
    hooks
        .check_sizes(ctx, art.target_spec(), &options)
        .map_err(names.at(Step::Sizes))?;
    let m = art.manifest();
    let tokenizer = art
        .tokenizer_json(Which::Target)?
        .map(Tokenizer::from_bytes)
        .transpose()
        .map_err(names.at(Step::Tokenizer))?;
    let mut eos_ids = m
        .target
        .generation_config
        .as_ref()
        .map(eos_ids_of)
        .unwrap_or_default();
    if eos_ids.is_empty() {
        eos_ids = art.target_spec().eos_ids();
    }
    let quant = m.quant.describe();
    (hooks.progress)(LoadEvent::Opened(Opened::Artifact {
        bytes: bytes.len() as u64,
        quant: quant.clone(),
        assistant: art.assistant_spec().is_some(),
    }));
    let release = &*hooks.release;
    let progress = &mut hooks.progress;
    let state = artifact::load_target(
        ctx,
        &art,
        options,
        artifact::LoadHooks {
            verify: hooks.verify,
            progress: &mut |done, total| progress(LoadEvent::Steps { done, total }),
            release: &|range| release(0, range),
        },
    )
    .and_then(|model| KvState::new(ctx, model))
    .map_err(names.at(Step::Weights))?;
    let with_assistant = if art.assistant_spec().is_some() {
        ", with its MTP assistant"
    } else {
        ""
    };
    let summary = summary("Gemma 4 artifact", art.target_spec(), with_assistant);
    // Artifacts store no chat template: the built-in Gemma 4 format applies.
    let text = text_setup(tokenizer, eos_ids, None).map_err(names.at(Step::Tokenizer))?;
    Ok(finish(
        state,
        text,
        summary,
        quant,
        hooks.label.clone(),
        start,
    ))
}

fn synthetic(
    ctx: &GpuContext,
    shape: SyntheticShape,
    seed: u64,
    hooks: &mut LoadHooks<'_>,
) -> Result<(KvState, TextSetup, String)> {
    let names = Names::new(&hooks.place, no_names);
    let mut options = hooks.model_options(WeightFormat::Q4 { group: 32 });
    let spec = shape.spec();
    clamp_context(&spec, &mut options, &mut hooks.progress);
    hooks
        .check_sizes(ctx, &spec, &options)
        .map_err(names.at(Step::Sizes))?;
    (hooks.progress)(LoadEvent::Opened(Opened::Synthetic {
        layers: spec.layers.len(),
    }));
    let text = TextSetup {
        eos_ids: spec.eos_ids(),
        ..TextSetup::default()
    };
    let summary = summary(
        "synthetic Gemma 4",
        &spec,
        &format!(", random weights, seed {seed}, no tokenizer"),
    );
    let weights = SyntheticWeights { seed };
    let state = load_weights(ctx, &weights, spec, options, &mut hooks.progress)
        .map_err(names.at(Step::Weights))?;
    Ok((state, text, summary))
}

/// An assistant's source parsed and its config read, not yet loaded against a target.
pub(super) enum OpenedAssistant<'a> {
    Checkpoint(Checkpoint<'a>, AssistantSpec),
    Gguf(GgufFile<'a>, AssistantSpec),
    /// Boxed: a parsed artifact (its manifest and both specs) is twice the others' size.
    Artifact(Box<Artifact<'a>>),
    Synthetic(SyntheticAssistant, AssistantSpec),
    Random(RandomAssistant, AssistantSpec),
}

impl<'a> OpenedAssistant<'a> {
    /// Parses `from` (its errors named as `hooks` says).
    pub(super) fn open(
        from: AssistantFrom<'a>,
        hooks: &LoadHooks<'_>,
    ) -> Result<OpenedAssistant<'a>> {
        match from {
            AssistantFrom::Checkpoint {
                config_json,
                shards,
            } => {
                let names = Names::new(&hooks.place, assistant_checkpoint_names);
                let spec = parse_assistant_config(config_json).map_err(names.at(Step::Config))?;
                let ck = Checkpoint::from_shards(shards).map_err(names.at(Step::Open))?;
                Ok(OpenedAssistant::Checkpoint(ck, spec))
            }
            AssistantFrom::Gguf(bytes) => {
                let names = Names::new(&hooks.place, assistant_gguf_names);
                let file = GgufFile::parse(bytes).map_err(names.at(Step::Open))?;
                let config =
                    gguf::assistant_config_json(&file).map_err(names.at(Step::Metadata))?;
                let spec = parse_assistant_config(&config).map_err(names.at(Step::Config))?;
                Ok(OpenedAssistant::Gguf(file, spec))
            }
            AssistantFrom::Artifact(bytes) => {
                let names = Names::new(&hooks.place, assistant_artifact_names);
                let art = Artifact::parse(bytes).map_err(names.at(Step::Open))?;
                Ok(OpenedAssistant::Artifact(Box::new(art)))
            }
            AssistantFrom::Synthetic { target_seed, seed } => {
                let names = Names::new(&hooks.place, no_names);
                let source = SyntheticAssistant { target_seed, seed };
                let spec = parse_assistant_config(&source.config_json())
                    .map_err(names.at(Step::Config))?;
                Ok(OpenedAssistant::Synthetic(source, spec))
            }
            AssistantFrom::Random { shape, seed } => {
                let names = Names::new(&hooks.place, no_names);
                let source = RandomAssistant::new(shape, seed).map_err(names.at(Step::Open))?;
                let spec = parse_assistant_config(&source.config_json())
                    .map_err(names.at(Step::Config))?;
                Ok(OpenedAssistant::Random(source, spec))
            }
        }
    }

    /// The library's names for this kind of source.
    fn own_names(&self) -> fn(Step) -> Option<&'static str> {
        match self {
            OpenedAssistant::Checkpoint(..) => assistant_checkpoint_names,
            OpenedAssistant::Gguf(..) => assistant_gguf_names,
            OpenedAssistant::Artifact(_) => assistant_artifact_names,
            OpenedAssistant::Synthetic(..) | OpenedAssistant::Random(..) => no_names,
        }
    }

    /// Names an error of loading this assistant (a missing target included).
    pub(super) fn loading_error(&self, hooks: &LoadHooks<'_>, e: Error) -> Error {
        Names::new(&hooks.place, self.own_names()).at(Step::Weights)(e)
    }

    /// Loads the assistant for `target` (its weights in the target's format), unnamed
    /// errors ([`Self::loading_error`] names them).
    fn load_unnamed(
        self,
        ctx: &GpuContext,
        target: &KvState,
        hooks: &LoadHooks<'_>,
    ) -> Result<Assistant> {
        let options = AssistantOptions {
            format: target.model().options.format,
        };
        let mtp = OpSet::with_mtp();
        match self {
            OpenedAssistant::Checkpoint(ck, spec) => {
                Assistant::load(ctx, &ck, spec, target, &mtp, options)
            }
            OpenedAssistant::Gguf(file, spec) => Assistant::load(
                ctx,
                &gguf::GgufAssistant { file: &file },
                spec,
                target,
                &mtp,
                options,
            ),
            OpenedAssistant::Artifact(art) => {
                let release = &*hooks.release;
                artifact::load_assistant(ctx, &art, target, hooks.verify, &|range| {
                    release(0, range)
                })
            }
            OpenedAssistant::Synthetic(source, spec) => {
                Assistant::load(ctx, &source, spec, target, &mtp, options)
            }
            OpenedAssistant::Random(source, spec) => {
                Assistant::load(ctx, &source, spec, target, &mtp, options)
            }
        }
    }

    /// Loads the assistant for `target`.
    pub(super) fn load(
        self,
        ctx: &GpuContext,
        target: &KvState,
        hooks: &LoadHooks<'_>,
    ) -> Result<Assistant> {
        let names = Names::new(&hooks.place, self.own_names());
        self.load_unnamed(ctx, target, hooks)
            .map_err(names.at(Step::Weights))
    }
}

/// Loads the assistant `from` holds for `target` on `ctx` (its weights in the target's
/// format; an artifact's as stored). `hooks`: `verify`, `release` and `place`.
pub fn load_assistant(
    ctx: &GpuContext,
    target: &KvState,
    from: AssistantFrom<'_>,
    hooks: LoadHooks<'_>,
) -> Result<Assistant> {
    OpenedAssistant::open(from, &hooks)?.load(ctx, target, &hooks)
}
