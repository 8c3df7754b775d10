//! The demo's two pairs: the trained one shipped in models/ (or an artifact given with
//! --model) and the random-weight synthetic one, each loaded with its prompt.

use super::args::{DemoArgs, SHIPPED_PAIR, SYNTHETIC_PROMPT};
use crate::args::DEFAULT_PREFILL_CHUNK;
use crate::load::{load_assistant, load_model, LoadRequest};
use crate::progress::host_memory_bytes;
use anyhow::{bail, Context, Result};
use std::path::PathBuf;
use std::sync::Arc;
use wgemma::formats::synthetic::SyntheticShape;
use wgemma::gpu::GpuContext;
use wgemma::model::assistant::Assistant;
use wgemma::model::state::KvState;
use wgemma::model::target::ModelOptions;
use wgemma::model::weights::WeightFormat;
use wgemma::session::{load_target, AssistantFrom, LoadHooks, LoadSource, Step};
use wgemma::text::tokenizer::Tokenizer;

/// A target and its assistant, loaded, with the prompt and how the report names them.
pub(super) struct Pair {
    pub(super) target: KvState,
    pub(super) assistant: Assistant,
    pub(super) tokenizer: Option<Arc<Tokenizer>>,
    pub(super) stop_ids: Vec<u32>,
    pub(super) prompt: Vec<u32>,
    pub(super) describe: String,
}

pub(super) fn shipped(ctx: &GpuContext, args: &DemoArgs) -> Result<Pair> {
    let path = args
        .model
        .clone()
        .unwrap_or_else(|| PathBuf::from(SHIPPED_PAIR));
    if !path.exists() {
        bail!(
            "{}: no such file (expected the model artifact; the shipped pair is \
             models/kjv-pair.wgemma in the source tree, elsewhere pass --model FILE)",
            path.display()
        );
    }
    let request = LoadRequest {
        dtype: None,
        options: ModelOptions {
            max_context: 4096,
            prefill_chunk: DEFAULT_PREFILL_CHUNK,
            ..ModelOptions::default()
        },
        verify: true,
        allow_extra_tensors: false,
    };
    let loaded = load_model(ctx, &path, request)?;
    let text = loaded.target.text;
    let tokenizer = text.tokenizer.with_context(|| {
        format!(
            "{}: expected an artifact with a tokenizer, found none",
            path.display()
        )
    })?;
    let target = loaded.target.state;
    let format = target.model().options.format;
    let assistant = load_assistant(ctx, &path, &target, true)?;
    let prompt = tokenizer.encode_prompt(&args.prompt)?;
    let c = &target.model().spec.config;
    let describe = format!(
        "{}: Gemma 4 target ({} layers, hidden {}, vocab {}) + MTP assistant, trained on the \
         King James Bible, {}",
        path.file_name().map_or_else(
            || path.display().to_string(),
            |n| n.to_string_lossy().into_owned()
        ),
        c.num_hidden_layers,
        c.hidden_size,
        c.vocab_size,
        format_name(format)
    );
    Ok(Pair {
        stop_ids: tokenizer.stop_ids(&text.eos_ids),
        target,
        assistant,
        tokenizer: Some(tokenizer),
        prompt,
        describe,
    })
}

pub(super) fn synthetic(ctx: &GpuContext, args: &DemoArgs) -> Result<Pair> {
    let format = WeightFormat::parse(&args.dtype)?;
    let spec = SyntheticShape::Tiny.spec();
    let c = &spec.config;
    let describe = format!(
        "synthetic Gemma 4 target ({} layers, hidden {}, vocab {}, random weights) + MTP \
         assistant (4 layers, centroid head 2048 -> 32), {}, seed {}",
        c.num_hidden_layers, c.hidden_size, c.vocab_size, args.dtype, args.seed
    );
    // The KV cache is sized by the token budget here: check it before it sizes anything
    // (the model's positions, then the device and the host through check_sizes).
    let positions = c.max_position_embeddings.unwrap_or(4096);
    let max_context = SYNTHETIC_PROMPT.len() + 16;
    if args.max_new_tokens > positions.saturating_sub(max_context) {
        bail!(
            "--max-new-tokens: expected at most {} (the synthetic model's {positions} \
             positions less the prompt), found {}",
            positions.saturating_sub(max_context),
            args.max_new_tokens
        );
    }
    let options = ModelOptions {
        format,
        max_context: max_context + args.max_new_tokens,
        ..ModelOptions::default()
    };
    let source = LoadSource::Synthetic {
        shape: SyntheticShape::Tiny,
        seed: args.seed,
    };
    let hooks = LoadHooks {
        format: Some(format),
        options,
        check_sizes: true,
        host_memory_bytes: host_memory_bytes(),
        place: Some(Box::new(|step| {
            (step == Step::Sizes).then(|| "the synthetic pair at --max-new-tokens".to_string())
        })),
        ..LoadHooks::default()
    };
    let target = load_target(ctx, source, hooks)?.state;
    let from = AssistantFrom::Synthetic {
        target_seed: args.seed,
        seed: args.seed.wrapping_add(1),
    };
    let assistant = wgemma::session::load_assistant(ctx, &target, from, LoadHooks::default())?;
    Ok(Pair {
        target,
        assistant,
        tokenizer: None,
        // Random weights emit any token: never stop early.
        stop_ids: Vec::new(),
        prompt: SYNTHETIC_PROMPT.to_vec(),
        describe,
    })
}

fn format_name(format: WeightFormat) -> String {
    match format {
        WeightFormat::F32 => "f32".into(),
        WeightFormat::F16 => "f16".into(),
        WeightFormat::Q4 { group } => format!("q4 (group {group})"),
    }
}
