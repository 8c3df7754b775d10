//! Loading into a [`Session`]: [`Session::load`] and [`Session::load_assistant_from`], the
//! front door over [`super::loader`], and the byte-level loads the browser calls (a Hugging
//! Face checkpoint, a GGUF file, an artifact, the synthetic demo), each a [`LoadSource`]
//! with the browser's options.

use super::loader::{load_target, LoadedTarget, OpenedAssistant};
use super::source::{
    AssistantFrom, CheckpointSource, Label, LoadEvent, LoadHooks, LoadSource, Opened,
};
use super::{ArtifactOptions, CheckpointFiles, DemoOptions, LoadOptions, ModelInfo, Session};
use super::{Target, OP};
use crate::error::{Error, Result};
use crate::formats::synthetic::SyntheticShape;
use crate::model::assistant::Assistant;
use crate::model::target::ModelOptions;
use crate::model::weights::WeightFormat;
use std::cell::Cell;

impl Session {
    /// Loads the target `source` holds (any model and assistant loaded before are dropped
    /// first: a browser tab has less GPU memory to spare).
    pub fn load(&mut self, source: LoadSource<'_>, hooks: LoadHooks<'_>) -> Result<ModelInfo> {
        self.assistant = None;
        self.target = None;
        let loaded = load_target(&self.ctx, source, hooks)?;
        self.install(loaded);
        self.check_gpu_errors()?;
        self.model_info()
    }

    /// Installs a target [`load_target`] loaded; any assistant loaded before is dropped.
    pub fn install(&mut self, loaded: LoadedTarget) {
        self.assistant = None;
        let text = loaded.text;
        let stop_ids = match &text.tokenizer {
            Some(t) => t.stop_ids(&text.eos_ids),
            None => text.eos_ids.clone(),
        };
        self.target = Some(Target {
            state: loaded.state,
            text,
            stop_ids,
            dtype: loaded.dtype,
            description: loaded.description,
            load_ms: loaded.load_ms,
        });
    }

    /// Loads the assistant `from` holds for the loaded target (any assistant loaded before
    /// is dropped). `hooks`: `verify`, `release` and `place`.
    pub fn load_assistant_from(
        &mut self,
        from: AssistantFrom<'_>,
        hooks: LoadHooks<'_>,
    ) -> Result<()> {
        let opened = OpenedAssistant::open(from, &hooks)?;
        self.assistant = None;
        let target = match self.target() {
            Ok(target) => target,
            Err(e) => return Err(opened.loading_error(&hooks, e)),
        };
        let assistant = opened.load(&self.ctx, &target.state, &hooks)?;
        self.assistant = Some(assistant);
        Ok(())
    }

    /// Installs an assistant the caller loaded for this session's target.
    pub fn install_assistant(&mut self, assistant: Assistant) {
        self.assistant = Some(assistant);
    }

    pub fn unload_assistant(&mut self) {
        self.assistant = None;
    }

    /// Loads a Hugging Face checkpoint (any assistant loaded before is dropped).
    pub fn load_checkpoint(
        &mut self,
        files: &CheckpointFiles,
        options: &LoadOptions,
    ) -> Result<ModelInfo> {
        // "auto": Q4 group 32, as the CLI loads a checkpoint with no --dtype.
        let dtype = if options.dtype == "auto" {
            "q4"
        } else {
            &options.dtype
        };
        let format = asked_format(dtype)?;
        let generation_config = files
            .generation_config_json
            .as_deref()
            .map(|json| {
                serde_json::from_str::<serde_json::Value>(json).map_err(|e| {
                    Error::invalid(OP, "generation_config.json", "valid JSON", e.to_string())
                })
            })
            .transpose()?;
        let source = LoadSource::Checkpoint(CheckpointSource {
            config_json: &files.config_json,
            shards: byte_shards(&files.shards),
            tokenizer_json: files.tokenizer_json.as_deref(),
            generation_config: generation_config.as_ref(),
            chat_template: files.chat_template.as_deref(),
            tokenizer_config: files.tokenizer_config_json.as_deref(),
        });
        self.load(source, browser_hooks(format, dtype, options))
    }

    /// Loads a llama.cpp GGUF file (`gemma4`): config, tokenizer and chat template from its
    /// metadata; with `options.dtype` "auto" (the default) each tensor at its own type as
    /// the CLI loads it with no `--dtype` (Q8_0, K-quants, ... as stored; Q4_0 into Q4
    /// group 32 as it is), else converted to that dtype.
    pub fn load_gguf(&mut self, bytes: &[u8], options: &LoadOptions) -> Result<ModelInfo> {
        let format = asked_format(&options.dtype)?;
        let dtype = match format {
            Some(_) => &options.dtype,
            None => "the file's types as stored",
        };
        self.load(
            LoadSource::Gguf(bytes),
            browser_hooks(format, dtype, options),
        )
    }

    /// Loads a model artifact (`wgemma convert`): the target, and its assistant when the
    /// artifact holds one. Weights are stored in their GPU layout already (no dtype choice);
    /// checksums are verified unless `options.verify` is false.
    pub fn load_artifact(&mut self, bytes: &[u8], options: &ArtifactOptions) -> Result<ModelInfo> {
        let holds_assistant = Cell::new(false);
        let hooks = LoadHooks {
            options: ModelOptions {
                max_context: options.context,
                prefill_chunk: options.prefill_chunk,
                ..ModelOptions::default()
            },
            verify: options.verify,
            progress: Box::new(|event| {
                if let LoadEvent::Opened(Opened::Artifact { assistant, .. }) = event {
                    holds_assistant.set(assistant);
                }
            }),
            ..LoadHooks::default()
        };
        let info = self.load(LoadSource::Artifact(bytes), hooks)?;
        if !holds_assistant.get() {
            return Ok(info);
        }
        let hooks = LoadHooks {
            verify: options.verify,
            ..LoadHooks::default()
        };
        self.load_assistant_from(AssistantFrom::Artifact(bytes), hooks)?;
        self.check_gpu_errors()?;
        self.model_info()
    }

    /// The built-in demo: `wgemma demo`'s synthetic tiny target (random weights from
    /// `seed`, vocab 4096, no tokenizer) with its centroid-head MTP assistant.
    pub fn load_demo(&mut self, options: &DemoOptions) -> Result<ModelInfo> {
        let format = WeightFormat::parse(&options.dtype)?;
        let c = SyntheticShape::Tiny.spec().config;
        let description = format!(
            "built-in demo: synthetic Gemma 4 ({} layers, hidden {}, vocab {}, random weights, \
             seed {}, no tokenizer) + MTP assistant, {}",
            c.num_hidden_layers, c.hidden_size, c.vocab_size, options.seed, options.dtype
        );
        let source = LoadSource::Synthetic {
            shape: SyntheticShape::Tiny,
            seed: options.seed,
        };
        let hooks = LoadHooks {
            format: Some(format),
            options: ModelOptions {
                max_context: options.context,
                ..ModelOptions::default()
            },
            label: Label::Named {
                dtype: options.dtype.clone(),
                description,
            },
            ..LoadHooks::default()
        };
        self.load(source, hooks)?;
        let assistant = AssistantFrom::Synthetic {
            target_seed: options.seed,
            seed: options.seed.wrapping_add(1),
        };
        self.load_assistant_from(assistant, LoadHooks::default())?;
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
        let from = AssistantFrom::Checkpoint {
            config_json,
            shards: byte_shards(shards),
        };
        self.load_assistant_from(from, LoadHooks::default())
    }

    /// Loads a llama.cpp `gemma4-assistant` GGUF file for the loaded model (its weights
    /// take the target's dtype).
    pub fn load_assistant_gguf(&mut self, bytes: &[u8]) -> Result<()> {
        self.load_assistant_from(AssistantFrom::Gguf(bytes), LoadHooks::default())
    }
}

/// Shards as the loader borrows them.
fn byte_shards(shards: &[(String, Vec<u8>)]) -> Vec<(String, &[u8])> {
    shards
        .iter()
        .map(|(name, bytes)| (name.clone(), &bytes[..]))
        .collect()
}

/// The conversion `dtype` asks for: None for "auto" (a checkpoint's weights in Q4 group 32,
/// a GGUF file's at their own types, as the CLI loads them with no `--dtype`).
fn asked_format(dtype: &str) -> Result<Option<WeightFormat>> {
    match dtype {
        "auto" => Ok(None),
        other => WeightFormat::parse(other)
            .map(Some)
            .map_err(|_| Error::invalid(OP, "dtype", "auto, f32, f16, q4, q4g64 or q4g128", other)),
    }
}

/// The hooks of the browser's checkpoint and GGUF loads: its options and the dtype in words
/// (no size check: the browser's loads have never had one).
fn browser_hooks(
    format: Option<WeightFormat>,
    dtype: &str,
    options: &LoadOptions,
) -> LoadHooks<'static> {
    LoadHooks {
        format,
        options: ModelOptions {
            max_context: options.context,
            prefill_chunk: options.prefill_chunk,
            sequences: options.sequences,
            ..ModelOptions::default()
        },
        allow_extra_tensors: options.allow_extra_tensors,
        label: Label::Summary {
            dtype: Some(dtype.to_string()),
        },
        ..LoadHooks::default()
    }
}
