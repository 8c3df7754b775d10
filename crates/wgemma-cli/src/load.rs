//! Model loading for the CLI: an HF checkpoint directory or a synthetic shape, with a
//! progress bar, into a ready [`Model`].

use crate::model_dir::ModelDir;
use anyhow::{Context, Result};
use std::path::Path;
use wgemma::gpu::GpuContext;
use wgemma::model::checkpoint::Checkpoint;
use wgemma::model::synthetic::{SyntheticShape, SyntheticWeights};
use wgemma::model::target::{Model, ModelOptions};
use wgemma::model::tokenizer::Tokenizer;
use wgemma::model::{parse_config, ModelSpec};

/// A loaded target with what the CLI needs around it.
pub struct Loaded {
    pub model: Model,
    pub tokenizer: Option<Tokenizer>,
    /// EOS ids from generation_config.json, else config.json.
    pub eos_ids: Vec<u32>,
    pub load_ms: f64,
}

fn progress_bar(total: u64, what: &str) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new(total);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} ({elapsed})")
            .expect("valid template")
            .progress_chars("=> "),
    );
    bar.set_message(what.to_string());
    bar
}

fn load_with(
    ctx: &GpuContext,
    source: &dyn wgemma::model::checkpoint::WeightSource,
    spec: ModelSpec,
    options: ModelOptions,
    label: &str,
) -> Result<Model> {
    let bar = progress_bar(spec.layers.len() as u64 + 2, label);
    let model = Model::load(ctx, source, spec, options, &mut |done, total| {
        bar.set_length(total as u64);
        bar.set_position(done as u64);
    })?;
    bar.finish_and_clear();
    Ok(model)
}

/// Loads `--model DIR`.
pub fn load_dir(ctx: &GpuContext, path: &Path, options: ModelOptions) -> Result<Loaded> {
    let start = std::time::Instant::now();
    let dir = ModelDir::open(path)?;
    let spec = parse_config(&dir.config_json)
        .with_context(|| format!("{}/config.json", path.display()))?;
    let shards = dir.shard_bytes();
    let ck = Checkpoint::from_shards(shards)?;
    let tokenizer = dir
        .tokenizer_json
        .as_ref()
        .map(|json| Tokenizer::from_bytes(json))
        .transpose()
        .with_context(|| format!("{}/tokenizer.json", path.display()))?;
    let mut eos_ids = dir.generation_eos_ids();
    if eos_ids.is_empty() {
        eos_ids = spec.eos_ids();
    }
    let model = load_with(ctx, &ck, spec, options, "loading")?;
    Ok(Loaded {
        model,
        tokenizer,
        eos_ids,
        load_ms: start.elapsed().as_secs_f64() * 1e3,
    })
}

/// Builds a synthetic model of `shape` with weights from `seed`.
pub fn load_synthetic(
    ctx: &GpuContext,
    shape: SyntheticShape,
    seed: u64,
    options: ModelOptions,
) -> Result<Loaded> {
    let start = std::time::Instant::now();
    let spec = shape.spec();
    let eos_ids = spec.eos_ids();
    let model = load_with(ctx, &SyntheticWeights { seed }, spec, options, "building")?;
    Ok(Loaded {
        model,
        tokenizer: None,
        eos_ids,
        load_ms: start.elapsed().as_secs_f64() * 1e3,
    })
}
