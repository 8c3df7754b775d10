//! Model loading for the CLI: which [`LoadSource`] `--model PATH` is (an HF checkpoint
//! directory, a model artifact, a llama.cpp GGUF file) or a synthetic shape, opened and
//! mapped here, loaded by the library's front door ([`wgemma::session::load_target`]),
//! with its progress shown and its errors named by path. The same for `--assistant PATH`.

use crate::files::{is_artifact, is_gguf, ArtifactFile, GgufMap, ModelDir};
use crate::progress::{gb, host_memory_bytes, peak_rss_mb, LoadDisplay};
use anyhow::Result;
use std::path::Path;
use wgemma::formats::synthetic::SyntheticShape;
use wgemma::gpu::GpuContext;
use wgemma::model::assistant::Assistant;
use wgemma::model::state::KvState;
use wgemma::model::target::{Model, ModelOptions};
use wgemma::model::weights::WeightFormat;
use wgemma::session::{
    load_assistant as load_assistant_from, load_target, AssistantFrom, CheckpointSource, Label,
    LoadHooks, LoadSource, LoadedTarget, PlaceFn, Session, Step,
};
use wgemma::weights::upload::Quantiser;

/// A loaded target with what the CLI reports about its load.
pub struct Loaded {
    pub target: LoadedTarget,
    /// The process's peak resident memory right after the load (MiB, Linux).
    pub peak_rss_mb: Option<f64>,
}

impl Loaded {
    /// A session on `ctx` (the context the model was loaded on) driving this model, named
    /// by `model_path`, with an assistant from `assistant` when given.
    pub fn into_session(
        self,
        ctx: GpuContext,
        model_path: &Path,
        assistant: Option<&Path>,
        verify: bool,
    ) -> Result<Session> {
        let mut target = self.target;
        target.dtype = format!("{:?}", target.state.model().options.format);
        target.description = model_path.display().to_string();
        let mut session = Session::with_context(ctx);
        session.install(target);
        if let Some(path) = assistant {
            load_assistant_into(&mut session, path, verify)?;
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

/// `--model PATH` or `--assistant PATH`, opened: its files mapped.
enum ModelFile {
    Dir(ModelDir),
    Gguf(GgufMap),
    Artifact(ArtifactFile),
}

impl ModelFile {
    fn open(path: &Path) -> Result<ModelFile> {
        Ok(if is_gguf(path) {
            ModelFile::Gguf(GgufMap::open(path)?)
        } else if is_artifact(path) {
            ModelFile::Artifact(ArtifactFile::open(path)?)
        } else {
            ModelFile::Dir(ModelDir::open(path)?)
        })
    }

    fn target(&self) -> LoadSource<'_> {
        match self {
            ModelFile::Dir(dir) => LoadSource::Checkpoint(CheckpointSource {
                config_json: &dir.config_json,
                shards: dir.shard_bytes(),
                tokenizer_json: dir.tokenizer_json.as_deref(),
                generation_config: dir.generation_config.as_ref(),
                chat_template: dir.chat_template.as_deref(),
                tokenizer_config: dir.tokenizer_config.as_deref(),
            }),
            ModelFile::Gguf(map) => LoadSource::Gguf(map.bytes()),
            ModelFile::Artifact(file) => LoadSource::Artifact(file.bytes()),
        }
    }

    fn assistant(&self) -> AssistantFrom<'_> {
        match self {
            ModelFile::Dir(dir) => AssistantFrom::Checkpoint {
                config_json: &dir.config_json,
                shards: dir.shard_bytes(),
            },
            ModelFile::Gguf(map) => AssistantFrom::Gguf(map.bytes()),
            ModelFile::Artifact(file) => AssistantFrom::Artifact(file.bytes()),
        }
    }

    /// Drops pages the loader is done with from this process.
    /// Fails when a file was cut while the load read it.
    fn check_intact(&self) -> Result<()> {
        match self {
            ModelFile::Dir(dir) => dir.check_intact(),
            ModelFile::Gguf(map) => map.check_intact(),
            ModelFile::Artifact(file) => file.check_intact(),
        }
    }

    fn release(&self, shard: usize, range: std::ops::Range<usize>) {
        match self {
            ModelFile::Dir(dir) => dir.release(shard, range),
            ModelFile::Gguf(map) => map.release(range),
            ModelFile::Artifact(file) => file.release(range),
        }
    }

    /// How errors of loading the target at `path` name their part of it.
    fn target_places(&self, path: &Path) -> Box<PlaceFn<'static>> {
        let p = path.display().to_string();
        match self {
            ModelFile::Dir(_) => Box::new(move |step| match step {
                Step::Config | Step::Sizes => Some(format!("{p}/config.json")),
                Step::Tokenizer => Some(format!("{p}/tokenizer.json")),
                Step::ChatTemplate => Some(format!("the chat template in {p}")),
                Step::UnreadTensors => Some(format!("--model {p}")),
                _ => None,
            }),
            ModelFile::Gguf(_) => Box::new(move |step| match step {
                Step::Open | Step::Metadata | Step::Sizes => Some(p.clone()),
                Step::Config => Some(format!("the config the metadata of {p} describes")),
                Step::TokenizerMetadata | Step::Tokenizer => {
                    Some(format!("the tokenizer metadata of {p}"))
                }
                Step::ChatTemplate => Some(format!("the chat template in {p}")),
                Step::Weights => Some(format!("loading {p}")),
                _ => None,
            }),
            ModelFile::Artifact(_) => Box::new(move |step| match step {
                Step::Open => Some(format!("artifact {p}")),
                Step::Sizes => Some(format!("the target config stored in {p}")),
                Step::Tokenizer => Some(format!("the tokenizer stored in {p}")),
                Step::Weights => Some(format!("loading the target of {p}")),
                _ => None,
            }),
        }
    }

    /// How errors of loading the assistant at `path` name their part of it.
    fn assistant_places(&self, path: &Path) -> Box<PlaceFn<'static>> {
        let p = path.display().to_string();
        match self {
            ModelFile::Dir(_) => Box::new(move |step| match step {
                Step::Config => Some(format!("{p}/config.json")),
                Step::Weights => Some(format!("loading the assistant in {p}")),
                _ => None,
            }),
            ModelFile::Gguf(_) => Box::new(move |step| match step {
                Step::Open | Step::Metadata => Some(p.clone()),
                Step::Config => Some(format!(
                    "the assistant config the metadata of {p} describes"
                )),
                Step::Weights => Some(format!("loading the assistant in {p}")),
                _ => None,
            }),
            ModelFile::Artifact(_) => Box::new(move |step| match step {
                Step::Open => Some(format!("artifact {p}")),
                Step::Weights => Some(format!("loading the assistant of {p}")),
                _ => None,
            }),
        }
    }

    /// The last progress line: what the load left on the GPU.
    fn finished(&self, ctx: &GpuContext, model: &Model, req: &LoadRequest, q: Quantiser) -> String {
        let (bytes, format) = (gb(model.weight_bytes()), model.options.format);
        match self {
            ModelFile::Dir(_) => format!(
                "{bytes:.2} GB of weights on the GPU ({format:?}, quantised on the {})",
                if q.on_gpu(ctx) { "GPU" } else { "CPU" }
            ),
            ModelFile::Gguf(_) if req.dtype.is_none() => format!(
                "{bytes:.2} GB of weights on the GPU (the file's types as stored; \
                 float matrices {format:?})"
            ),
            ModelFile::Gguf(_) => format!("{bytes:.2} GB of weights on the GPU ({format:?})"),
            ModelFile::Artifact(_) => format!(
                "{bytes:.2} GB of weights on the GPU{}",
                if req.verify {
                    ", checksums verified"
                } else {
                    ""
                }
            ),
        }
    }
}

/// The hooks of a CLI load: `req`'s options, sizes checked against the device and this
/// host, progress shown on `display`.
fn hooks<'a>(req: &LoadRequest, display: &'a LoadDisplay, label: &Path) -> LoadHooks<'a> {
    LoadHooks {
        format: req.dtype,
        options: req.options,
        verify: req.verify,
        allow_extra_tensors: req.allow_extra_tensors,
        check_sizes: true,
        host_memory_bytes: host_memory_bytes(),
        label: Label::Path(label.display().to_string()),
        progress: Box::new(move |event| display.event(event)),
        ..LoadHooks::default()
    }
}

/// Loads `--model PATH`: a checkpoint directory, a GGUF file or an artifact file.
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
    let file = ModelFile::open(path)?;
    let display = LoadDisplay::new(path.display().to_string());
    let hooks = LoadHooks {
        quantiser,
        place: Some(file.target_places(path)),
        // Each block of rows uploaded: its pages leave this process, and the bar moves.
        release: Box::new(|shard, range| {
            display.released(range.len() as u64);
            file.release(shard, range);
        }),
        ..hooks(&req, &display, path)
    };
    let target = load_target(ctx, file.target(), hooks);
    // A file cut during the load is the error to report (its reads gave zeros).
    file.check_intact()?;
    let target = target?;
    display.finish(|| file.finished(ctx, target.state.model(), &req, quantiser));
    Ok(Loaded {
        target,
        peak_rss_mb: peak_rss_mb(),
    })
}

/// Loads `--assistant PATH` (a checkpoint directory, a gemma4-assistant GGUF file, or an
/// artifact holding an assistant) for `target`, in the target's format.
pub fn load_assistant(
    ctx: &GpuContext,
    path: &Path,
    target: &KvState,
    verify: bool,
) -> Result<Assistant> {
    let file = ModelFile::open(path)?;
    let hooks = assistant_hooks(&file, path, verify);
    let assistant = load_assistant_from(ctx, target, file.assistant(), hooks);
    file.check_intact()?;
    Ok(assistant?)
}

/// [`load_assistant`] for `session`'s target, installed there.
pub fn load_assistant_into(session: &mut Session, path: &Path, verify: bool) -> Result<()> {
    let file = ModelFile::open(path)?;
    let hooks = assistant_hooks(&file, path, verify);
    let loaded = session.load_assistant_from(file.assistant(), hooks);
    file.check_intact()?;
    Ok(loaded?)
}

fn assistant_hooks<'a>(file: &'a ModelFile, path: &Path, verify: bool) -> LoadHooks<'a> {
    LoadHooks {
        verify,
        place: Some(file.assistant_places(path)),
        release: Box::new(|shard, range| file.release(shard, range)),
        ..LoadHooks::default()
    }
}

/// Builds a synthetic model of `shape` with weights from `seed`.
pub fn load_synthetic(
    ctx: &GpuContext,
    shape: SyntheticShape,
    seed: u64,
    options: ModelOptions,
) -> Result<Loaded> {
    let display = LoadDisplay::new(String::new());
    let req = LoadRequest {
        dtype: Some(options.format),
        options,
        verify: true,
        allow_extra_tensors: false,
    };
    let hooks = LoadHooks {
        place: Some(Box::new(|step| {
            (step == Step::Sizes).then(|| "the synthetic model at these sizes".to_string())
        })),
        ..hooks(&req, &display, Path::new(""))
    };
    let target = load_target(ctx, LoadSource::Synthetic { shape, seed }, hooks)?;
    display.finish(String::new);
    Ok(Loaded {
        target,
        peak_rss_mb: peak_rss_mb(),
    })
}
