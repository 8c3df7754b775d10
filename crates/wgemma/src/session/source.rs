//! What the front door loads from ([`LoadSource`], [`AssistantFrom`]) and what a caller
//! hooks into a load ([`LoadHooks`]): the options, where progress goes, which bytes it may
//! drop, and how errors name the part of the source they came from. The library reads
//! bytes only; the caller maps files (the CLI) or fetches them (the browser).

use crate::formats::synthetic::SyntheticShape;
use crate::model::target::ModelOptions;
use crate::model::weights::WeightFormat;
use crate::weights::upload::Quantiser;
use std::ops::Range;

/// A target to load, as bytes.
pub enum LoadSource<'a> {
    /// A Hugging Face checkpoint's files.
    Checkpoint(CheckpointSource<'a>),
    /// A llama.cpp GGUF file (`general.architecture` gemma4): config, tokenizer and chat
    /// template from its metadata.
    Gguf(&'a [u8]),
    /// A model artifact (`wgemma convert`): weights stored in their GPU layout.
    Artifact(&'a [u8]),
    /// Random weights from `seed` at a known shape (no tokenizer).
    Synthetic { shape: SyntheticShape, seed: u64 },
}

/// The files of a Hugging Face checkpoint (any but the config and shards may be absent).
pub struct CheckpointSource<'a> {
    pub config_json: &'a str,
    /// (file name, bytes) of each safetensors shard.
    pub shards: Vec<(String, &'a [u8])>,
    pub tokenizer_json: Option<&'a [u8]>,
    /// generation_config.json, parsed (its EOS ids come before config.json's).
    pub generation_config: Option<&'a serde_json::Value>,
    /// chat_template.jinja.
    pub chat_template: Option<&'a str>,
    /// tokenizer_config.json (its chat template when there is no chat_template.jinja).
    pub tokenizer_config: Option<&'a str>,
}

/// An MTP assistant to load for a loaded target, as bytes.
pub enum AssistantFrom<'a> {
    /// A `gemma4_assistant` checkpoint: its config.json and safetensors shards.
    Checkpoint {
        config_json: &'a str,
        shards: Vec<(String, &'a [u8])>,
    },
    /// A llama.cpp `gemma4-assistant` GGUF file.
    Gguf(&'a [u8]),
    /// A model artifact holding an assistant (it may be the target's artifact).
    Artifact(&'a [u8]),
    /// The synthetic tiny target's centroid-head assistant (the demo's).
    Synthetic { target_seed: u64, seed: u64 },
    /// The published assistant's shape for a synthetic E2B or E4B target, random weights
    /// from `seed` (benches).
    Random { shape: SyntheticShape, seed: u64 },
}

/// The parts of a load an error can come from. [`LoadHooks::place`] names them in the
/// caller's words (the CLI by path); the library's own names are the browser's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Parsing the container (GGUF, artifact).
    Open,
    /// Reading the config out of a GGUF file's metadata.
    Metadata,
    /// Parsing the config.
    Config,
    /// Checking the config's sizes against the device and the host.
    Sizes,
    /// Reading the tokenizer out of a GGUF file's metadata.
    TokenizerMetadata,
    /// Parsing the tokenizer.
    Tokenizer,
    /// Parsing the chat template.
    ChatTemplate,
    /// Uploading the weights.
    Weights,
    /// Checking that a checkpoint's tensors were all read.
    UnreadTensors,
}

/// What a source turned out to hold, once parsed and its sizes checked (before any weight
/// is read).
#[derive(Debug, Clone, PartialEq)]
pub enum Opened {
    Checkpoint {
        shards: usize,
        bytes: u64,
    },
    Gguf {
        version: u32,
        tensors: usize,
        bytes: u64,
    },
    /// `assistant`: the artifact holds an MTP assistant too.
    Artifact {
        bytes: u64,
        quant: String,
        assistant: bool,
    },
    Synthetic {
        layers: usize,
    },
}

/// Progress of a load.
#[derive(Debug, Clone, PartialEq)]
pub enum LoadEvent {
    Opened(Opened),
    /// Load steps done of total, as [`crate::model::target::Model::load`] counts them.
    Steps {
        done: usize,
        total: usize,
    },
    /// A checkpoint's tensors its config does not describe, left unread because
    /// [`LoadHooks::allow_extra_tensors`] allows it (a description for a warning).
    IgnoredTensors(String),
    /// What the load converted from its stored types, in one line
    /// ([`crate::weights::conversion::summarise`]).
    Converted(String),
    /// The context asked for (`options.max_context`) is past the model's positions
    /// (`max_position_embeddings`): the KV caches hold `positions` instead.
    ContextClamped {
        asked: usize,
        positions: usize,
    },
}

/// How [`super::Session::model_info`] names the loaded model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Label {
    /// By where it came from (the CLI: its path); the dtype is the weight format's Debug form.
    Path(String),
    /// By a summary of its config (the browser), with the dtype as the caller spelled it
    /// (None: the weight format's Debug form; an artifact: its stored quantisation).
    Summary { dtype: Option<String> },
    /// As the caller words it.
    Named { dtype: String, description: String },
}

/// Names an error's [`Step`] (None: no name).
pub type PlaceFn<'a> = dyn Fn(Step) -> Option<String> + 'a;

/// What a caller passes into a load besides the bytes. An assistant's load reads
/// `verify`, `release` and `place` only.
pub struct LoadHooks<'a> {
    /// The weight format (None: Q4 group 32 for weights the load converts, the stored one
    /// for an artifact). It replaces `options.format`.
    pub format: Option<WeightFormat>,
    pub options: ModelOptions,
    /// Check an artifact's per-tensor checksums as they are read.
    pub verify: bool,
    /// Load a checkpoint with decoder tensors its config does not describe (reported as
    /// [`LoadEvent::IgnoredTensors`]) instead of refusing it.
    pub allow_extra_tensors: bool,
    /// Where a checkpoint's (or GGUF's float tensors') Q4 quantisation runs.
    pub quantiser: Quantiser,
    /// Check the config's sizes against the device (and `host_memory_bytes`) before
    /// anything is allocated.
    pub check_sizes: bool,
    pub host_memory_bytes: Option<u64>,
    pub label: Label,
    /// Names the part of the source an error came from (None: the library's names).
    pub place: Option<Box<PlaceFn<'a>>>,
    pub progress: Box<dyn FnMut(LoadEvent) + 'a>,
    /// (shard, byte range) of the source the load is done with (a single file: shard 0):
    /// the CLI drops those pages of its memory map.
    pub release: Box<dyn Fn(usize, Range<usize>) + 'a>,
}

impl Default for LoadHooks<'_> {
    fn default() -> Self {
        LoadHooks {
            format: None,
            options: ModelOptions::default(),
            verify: true,
            allow_extra_tensors: false,
            quantiser: Quantiser::Auto,
            check_sizes: false,
            host_memory_bytes: None,
            label: Label::Summary { dtype: None },
            place: None,
            progress: Box::new(|_| {}),
            release: Box::new(|_, _| {}),
        }
    }
}
