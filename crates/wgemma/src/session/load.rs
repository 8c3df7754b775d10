//! Loading into a [`Session`]: a Hugging Face checkpoint, a GGUF file, an artifact or a
//! synthetic demo model, each with its text setup (tokenizer, EOS ids, chat template), and
//! an assistant for speculative decoding.

use super::{
    ArtifactOptions, CheckpointFiles, DemoOptions, LoadOptions, ModelInfo, Session, Target, OP,
};
use crate::error::{Error, Result};
use crate::formats::artifact::{self, Artifact, LoadHooks, Which};
use crate::formats::gguf::{self, GgufFile, GgufWeights};
use crate::formats::hf::Checkpoint;
use crate::formats::synthetic::{SyntheticAssistant, SyntheticShape, SyntheticWeights};
use crate::gpu::GpuContext;
use crate::model::assistant::{
    parse_assistant_config, Assistant, AssistantOptions, AssistantSource, AssistantSpec,
};
use crate::model::parse_config;
use crate::model::target::{Model, ModelOptions};
use crate::model::weights::WeightFormat;
use crate::ops::opset::OpSet;
use crate::text::chat::ChatTemplate;
use crate::text::tokenizer::Tokenizer;
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

impl Session {
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
