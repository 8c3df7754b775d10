//! Model loading for the CLI: an HF checkpoint directory, a model artifact, a llama.cpp
//! GGUF file or a synthetic
//! shape, into a ready [`Model`] (and an [`Assistant`]). Progress: a bar with bytes and
//! ETA on a terminal, a plain line per phase otherwise.

use crate::artifact_file::{host_memory_bytes, is_artifact, peak_rss_mb, ArtifactFile};
use crate::model_dir::ModelDir;
use anyhow::{Context, Result};
use std::io::IsTerminal;
use std::path::Path;
use std::time::Instant;
use wgemma::formats::artifact::{self, LoadHooks, Which};
use wgemma::formats::hf::Checkpoint;
use wgemma::formats::synthetic::{SyntheticShape, SyntheticWeights};
use wgemma::gpu::GpuContext;
use wgemma::model::assistant::{parse_assistant_config, Assistant, AssistantOptions};
use wgemma::model::target::{Model, ModelOptions};
use wgemma::model::weights::WeightFormat;
use wgemma::model::{parse_config, ModelSpec, SizeLimits};
use wgemma::ops::opset::OpSet;
use wgemma::session::{eos_ids_of, ChatTemplate, Session, TextSetup};
use wgemma::text::tokenizer::Tokenizer;
use wgemma::weights::upload::Quantiser;

/// A loaded target with what the CLI needs around it.
pub struct Loaded {
    pub model: Model,
    pub tokenizer: Option<Tokenizer>,
    /// EOS ids from generation_config.json, else config.json.
    pub eos_ids: Vec<u32>,
    /// chat_template.jinja, tokenizer_config.json's or a GGUF's `tokenizer.chat_template`
    /// (None: the built-in format).
    pub chat_template: Option<ChatTemplate>,
    pub load_ms: f64,
    /// The process's peak resident memory right after the load (MiB, Linux).
    pub peak_rss_mb: Option<f64>,
}

impl Loaded {
    /// A session on `ctx` (the context the model was loaded on) driving this model, with an
    /// assistant from `assistant` when given (a directory's weights take the target's format).
    pub fn into_session(
        self,
        ctx: GpuContext,
        model_path: &Path,
        assistant: Option<&Path>,
        verify: bool,
    ) -> Result<Session> {
        let format = self.model.options.format;
        let mut session = Session::with_context(ctx);
        session.install_model(
            self.model,
            TextSetup {
                tokenizer: self.tokenizer.map(std::sync::Arc::new),
                eos_ids: self.eos_ids,
                chat_template: self.chat_template.map(std::sync::Arc::new),
            },
            &format!("{format:?}"),
            &model_path.display().to_string(),
            self.load_ms,
        );
        if let Some(path) = assistant {
            let a = load_assistant(session.ctx(), path, session.model()?, format, verify)?;
            session.install_assistant(a);
        }
        Ok(session)
    }
}

/// How to load `--model`: the format asked for (`None`: q4 for a checkpoint, the stored
/// one for an artifact) and whether an artifact's checksums are verified.
#[derive(Debug, Clone, Copy)]
pub struct LoadRequest {
    pub dtype: Option<WeightFormat>,
    pub options: ModelOptions,
    pub verify: bool,
    /// Load a checkpoint with decoder tensors its config does not describe (warned).
    pub allow_extra_tensors: bool,
}

pub fn progress_bar(total: u64, what: &str) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new(total);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} ({elapsed})")
            .expect("valid template")
            .progress_chars("=> "),
    );
    bar.set_message(what.to_string());
    bar
}

/// A progress bar over bytes.
pub fn bytes_bar(total: u64, what: &str) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new(total);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{msg} [{bar:30}] {bytes}/{total_bytes} ({bytes_per_sec}, {eta})",
        )
        .expect("valid template")
        .progress_chars("=> "),
    );
    bar.set_message(what.to_string());
    bar
}

/// Progress of one load, in bytes of its source: a bar on a terminal, else one line per
/// phase on stderr.
pub struct LoadProgress {
    bar: Option<indicatif::ProgressBar>,
    what: String,
    start: Instant,
}

impl LoadProgress {
    pub fn new(what: &str, total_bytes: u64) -> LoadProgress {
        let bar = std::io::stderr()
            .is_terminal()
            .then(|| bytes_bar(total_bytes, what));
        LoadProgress {
            bar,
            what: what.to_string(),
            start: Instant::now(),
        }
    }

    /// `bytes` more of the source are done.
    pub fn add(&self, bytes: u64) {
        if let Some(bar) = &self.bar {
            bar.inc(bytes);
        }
    }

    /// A phase finished: a line when no bar is drawn.
    pub fn phase(&self, line: &str) {
        if self.bar.is_none() {
            eprintln!(
                "{}: {line} ({:.1} s)",
                self.what,
                self.start.elapsed().as_secs_f64()
            );
        }
    }

    pub fn finish(&self, line: &str) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
        self.phase(line);
    }
}

fn gb(bytes: u64) -> f64 {
    bytes as f64 / 1e9
}

/// What a load of `options` may use on `ctx` and this host.
pub fn size_limits(ctx: &GpuContext, options: &ModelOptions) -> SizeLimits {
    SizeLimits {
        bytes_per_weight: match options.format {
            WeightFormat::F32 => 4.0,
            WeightFormat::F16 => 2.0,
            // 4-bit values plus one f16 scale per group.
            WeightFormat::Q4 { group } => 0.5 + 2.0 / group.max(1) as f64,
        },
        max_context: options.max_context,
        // Forwards that return every row's logits: verify forwards in one piece (prefill
        // chunks compute the last row's only; `Model::forward` cuts all-row requests into
        // pieces whose logits fit a buffer).
        max_rows: options.max_verify_rows,
        max_buffer_bytes: ctx.limits.max_buffer_size,
        host_memory_bytes: host_memory_bytes(),
        device_is_host: ctx.info.device_type == wgpu::DeviceType::Cpu,
    }
}

fn load_with(
    ctx: &GpuContext,
    source: &dyn wgemma::formats::hf::WeightSource,
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

/// Loads `--model PATH`: a checkpoint directory or an artifact file.
pub fn load_model(ctx: &GpuContext, path: &Path, req: LoadRequest) -> Result<Loaded> {
    load_model_with(ctx, path, req, Quantiser::Auto)
}

/// [`load_model`], with a checkpoint's Q4 quantisation run where `quantiser` says.
pub fn load_model_with(
    ctx: &GpuContext,
    path: &Path,
    req: LoadRequest,
    quantiser: Quantiser,
) -> Result<Loaded> {
    if is_gguf(path) {
        let options = ModelOptions {
            format: req.dtype.unwrap_or(WeightFormat::Q4 { group: 32 }),
            ..req.options
        };
        load_gguf(ctx, path, options, quantiser)
    } else if is_artifact(path) {
        load_artifact(ctx, path, req)
    } else {
        let options = ModelOptions {
            format: req.dtype.unwrap_or(WeightFormat::Q4 { group: 32 }),
            ..req.options
        };
        load_dir(ctx, path, options, quantiser, req.allow_extra_tensors)
    }
}

fn load_dir(
    ctx: &GpuContext,
    path: &Path,
    options: ModelOptions,
    quantiser: Quantiser,
    allow_extra_tensors: bool,
) -> Result<Loaded> {
    let start = std::time::Instant::now();
    let dir = ModelDir::open(path)?;
    let spec = parse_config(&dir.config_json)
        .with_context(|| format!("{}/config.json", path.display()))?;
    spec.check_sizes(&size_limits(ctx, &options))
        .with_context(|| format!("{}/config.json", path.display()))?;
    let total: u64 = dir.shards.iter().map(|(_, m)| m.len() as u64).sum();
    let progress = LoadProgress::new("loading", total);
    progress.phase(&format!(
        "opened {} ({} shard(s), {:.2} GB)",
        path.display(),
        dir.shards.len(),
        gb(total)
    ));
    // Each block of rows uploaded: its pages leave this process, and the bar moves.
    let release = |shard: usize, range: std::ops::Range<usize>| {
        progress.add(range.len() as u64);
        dir.release(shard, range);
    };
    let ck = Checkpoint::from_shards(dir.shard_bytes())?
        .with_release(&release)
        .with_quantiser(quantiser);
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
    let chat_template = ChatTemplate::from_checkpoint(
        dir.chat_template.as_deref(),
        dir.tokenizer_config.as_deref(),
    )
    .with_context(|| format!("the chat template in {}", path.display()))?;
    let model = Model::load(ctx, &ck, spec, options, &mut |_, _| {})?;
    let unread = ck
        .check_all_read(allow_extra_tensors)
        .with_context(|| format!("--model {}", path.display()))?;
    if !unread.is_empty() {
        eprintln!(
            "warning: --allow-extra-tensors: ignoring {}",
            wgemma::formats::hf::describe_unread(&unread)
        );
    }
    progress.finish(&format!(
        "{:.2} GB of weights on the GPU ({:?}, quantised on the {})",
        gb(model.weight_bytes()),
        options.format,
        if quantiser.on_gpu(ctx) { "GPU" } else { "CPU" }
    ));
    Ok(Loaded {
        model,
        tokenizer,
        eos_ids,
        chat_template,
        load_ms: start.elapsed().as_secs_f64() * 1e3,
        peak_rss_mb: peak_rss_mb(),
    })
}

/// Whether `path` is a regular file that starts with GGUF's magic.
pub fn is_gguf(path: &Path) -> bool {
    use std::io::Read;
    let mut magic = [0u8; 4];
    path.is_file()
        && std::fs::File::open(path)
            .and_then(|mut f| f.read_exact(&mut magic))
            .is_ok()
        && wgemma::formats::gguf::is_gguf(&magic)
}

/// A GGUF file, memory-mapped.
pub struct GgufMap {
    map: memmap2::Mmap,
}

impl GgufMap {
    pub fn open(path: &Path) -> Result<GgufMap> {
        crate::model_dir::check_regular_file(path, "--model")?;
        let file =
            std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
        // SAFETY: read-only map held for the load; a file changed underneath a running
        // process is outside what we can defend against.
        let map = unsafe { memmap2::Mmap::map(&file) }
            .with_context(|| format!("mapping {}", path.display()))?;
        Ok(GgufMap { map })
    }

    pub fn parse(&self, path: &Path) -> Result<wgemma::formats::gguf::GgufFile<'_>> {
        wgemma::formats::gguf::GgufFile::parse(&self.map)
            .with_context(|| format!("{}", path.display()))
    }

    pub fn release(&self, range: std::ops::Range<usize>) {
        crate::artifact_file::release_pages(&self.map, range);
    }

    /// The mapped bytes.
    pub fn mmap(&self) -> &memmap2::Mmap {
        &self.map
    }
}

/// Loads a llama.cpp GGUF file (`general.architecture` gemma4): its config, tokenizer and
/// chat template from the metadata, its weights converted to `options.format` (Q4_0 into Q4 group 32
/// as it is).
fn load_gguf(
    ctx: &GpuContext,
    path: &Path,
    options: ModelOptions,
    quantiser: Quantiser,
) -> Result<Loaded> {
    let start = std::time::Instant::now();
    let map = GgufMap::open(path)?;
    let file = map.parse(path)?;
    let config =
        wgemma::formats::gguf::config_json(&file).with_context(|| format!("{}", path.display()))?;
    let spec = parse_config(&config)
        .with_context(|| format!("the config the metadata of {} describes", path.display()))?;
    spec.check_sizes(&size_limits(ctx, &options))
        .with_context(|| format!("{}", path.display()))?;
    let tokenizer = wgemma::formats::gguf::tokenizer::tokenizer_json(&file)
        .and_then(|json| {
            json.map(|j| Tokenizer::from_bytes(j.as_bytes()))
                .transpose()
        })
        .with_context(|| format!("the tokenizer metadata of {}", path.display()))?;
    let mut eos_ids = wgemma::formats::gguf::eos_ids(&file);
    if eos_ids.is_empty() {
        eos_ids = spec.eos_ids();
    }
    let chat_template = ChatTemplate::from_gguf(&file)
        .with_context(|| format!("the chat template in {}", path.display()))?;
    let total = map.map.len() as u64;
    let progress = LoadProgress::new("loading", total);
    progress.phase(&format!(
        "opened {} (GGUF v{}, {} tensors, {:.2} GB)",
        path.display(),
        file.version,
        file.tensors.len(),
        gb(total)
    ));
    let release = |range: std::ops::Range<usize>| {
        progress.add(range.len() as u64);
        map.release(range);
    };
    let stream = wgemma::weights::upload::StreamOptions {
        quantiser,
        ..Default::default()
    };
    let weights = wgemma::formats::gguf::GgufWeights::new(&file)
        .with_release(&release)
        .with_stream(stream);
    let model = Model::load(ctx, &weights, spec, options, &mut |_, _| {})
        .with_context(|| format!("loading {}", path.display()))?;
    progress.finish(&format!(
        "{:.2} GB of weights on the GPU ({:?})",
        gb(model.weight_bytes()),
        options.format
    ));
    Ok(Loaded {
        model,
        tokenizer,
        eos_ids,
        chat_template,
        load_ms: start.elapsed().as_secs_f64() * 1e3,
        peak_rss_mb: peak_rss_mb(),
    })
}

fn load_artifact(ctx: &GpuContext, path: &Path, req: LoadRequest) -> Result<Loaded> {
    let start = std::time::Instant::now();
    let file = ArtifactFile::open(path)?;
    let artifact = file.parse(path)?;
    let options = ModelOptions {
        format: req.dtype.unwrap_or(artifact.format()),
        ..req.options
    };
    artifact
        .target_spec()
        .check_sizes(&size_limits(ctx, &options))
        .with_context(|| format!("the target config stored in {}", path.display()))?;
    let m = artifact.manifest();
    let tokenizer = artifact
        .tokenizer_json(Which::Target)?
        .map(Tokenizer::from_bytes)
        .transpose()
        .with_context(|| format!("the tokenizer stored in {}", path.display()))?;
    let mut eos_ids = m
        .target
        .generation_config
        .as_ref()
        .map(eos_ids_of)
        .unwrap_or_default();
    if eos_ids.is_empty() {
        eos_ids = artifact.target_spec().eos_ids();
    }
    let progress = LoadProgress::new("loading", file.byte_len() as u64);
    progress.phase(&format!(
        "opened {} ({:.2} GB, {})",
        path.display(),
        gb(file.byte_len() as u64),
        m.quant.describe()
    ));
    let model = artifact::load_target(
        ctx,
        &artifact,
        options,
        LoadHooks {
            verify: req.verify,
            progress: &mut |_, _| {},
            release: &|range| {
                progress.add(range.len() as u64);
                file.release(range)
            },
        },
    )
    .with_context(|| format!("loading the target of {}", path.display()))?;
    progress.finish(&format!(
        "{:.2} GB of weights on the GPU{}",
        gb(model.weight_bytes()),
        if req.verify {
            ", checksums verified"
        } else {
            ""
        }
    ));
    Ok(Loaded {
        model,
        tokenizer,
        eos_ids,
        // Artifacts store no chat template: the built-in Gemma 4 format applies.
        chat_template: None,
        load_ms: start.elapsed().as_secs_f64() * 1e3,
        peak_rss_mb: peak_rss_mb(),
    })
}

/// Loads `--assistant PATH` (a checkpoint directory, a gemma4-assistant GGUF file, or an
/// artifact holding an assistant)
/// for `target`; a directory's weights are converted to `format` (the target's).
pub fn load_assistant(
    ctx: &GpuContext,
    path: &Path,
    target: &Model,
    format: WeightFormat,
    verify: bool,
) -> Result<Assistant> {
    if is_gguf(path) {
        let map = GgufMap::open(path)?;
        let file = map.parse(path)?;
        let config = wgemma::formats::gguf::assistant_config_json(&file)
            .with_context(|| format!("{}", path.display()))?;
        let spec = parse_assistant_config(&config).with_context(|| {
            format!(
                "the assistant config the metadata of {} describes",
                path.display()
            )
        })?;
        return Assistant::load(
            ctx,
            &wgemma::formats::gguf::GgufAssistant { file: &file },
            spec,
            target,
            &OpSet::with_mtp(),
            AssistantOptions { format },
        )
        .with_context(|| format!("loading the assistant in {}", path.display()));
    }
    if is_artifact(path) {
        let file = ArtifactFile::open(path)?;
        let artifact = file.parse(path)?;
        return artifact::load_assistant(ctx, &artifact, target, verify, &|r| file.release(r))
            .with_context(|| format!("loading the assistant of {}", path.display()));
    }
    let files = ModelDir::open(path)?;
    let spec = parse_assistant_config(&files.config_json)
        .with_context(|| format!("{}/config.json", path.display()))?;
    let ck = Checkpoint::from_shards(files.shard_bytes())?;
    Assistant::load(
        ctx,
        &ck,
        spec,
        target,
        &OpSet::with_mtp(),
        AssistantOptions { format },
    )
    .with_context(|| format!("loading the assistant in {}", path.display()))
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
    spec.check_sizes(&size_limits(ctx, &options))
        .context("the synthetic model at these sizes")?;
    let eos_ids = spec.eos_ids();
    let model = load_with(ctx, &SyntheticWeights { seed }, spec, options, "building")?;
    Ok(Loaded {
        model,
        tokenizer: None,
        eos_ids,
        chat_template: None,
        load_ms: start.elapsed().as_secs_f64() * 1e3,
        peak_rss_mb: peak_rss_mb(),
    })
}
