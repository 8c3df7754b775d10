//! The platform-independent half of the front end: a GPU context, the loaded target (with its
//! tokenizer and stop ids) and an optional assistant, loaded from bytes and driven by the
//! library's async generation loops. The browser bindings ([`crate::web`]) wrap it; native
//! tests drive the same code with pollster.

use anyhow::{bail, Context as _, Result};
use serde::{Deserialize, Serialize};
use std::sync::{Arc, Mutex};
use web_time::Instant;
use wgemma::artifact::{self, Artifact, LoadHooks, Which};
use wgemma::gguf::{self, GgufFile, GgufWeights};
use wgemma::gpu::{ContextOptions, GpuContext};
use wgemma::model::assistant::{parse_assistant_config, Assistant, AssistantOptions};
use wgemma::model::checkpoint::Checkpoint;
use wgemma::model::generate::{generate, GenerateOptions, GenerateStats};
use wgemma::model::parse_config;
use wgemma::model::sampling::SamplingParams;
use wgemma::model::speculative::{generate_speculative, SpeculativeOptions, SpeculativeStats};
use wgemma::model::synthetic::{SyntheticAssistant, SyntheticShape, SyntheticWeights};
use wgemma::model::target::{Model, ModelOptions};
use wgemma::model::tokenizer::{TextStream, Tokenizer};
use wgemma::model::weights::WeightFormat;
use wgemma::ops::opset::OpSet;

/// The files of a Hugging Face checkpoint, as bytes (the browser fetched or read them).
#[derive(Debug, Default)]
pub struct CheckpointFiles {
    pub config_json: String,
    /// `(file name, bytes)` of every safetensors shard.
    pub shards: Vec<(String, Vec<u8>)>,
    pub tokenizer_json: Option<Vec<u8>>,
    pub generation_config_json: Option<String>,
}

/// How to build the target (the CLI's defaults: Q4 group 32, 4096 positions, chunks of 64).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct LoadOptions {
    /// `q4` (group 32), `q4g64`, `q4g128`, `f16` or `f32`.
    pub dtype: String,
    /// KV cache positions (prompt + generated tokens).
    pub context: usize,
    /// Rows per prefill forward.
    pub prefill_chunk: usize,
}

impl Default for LoadOptions {
    fn default() -> Self {
        let d = ModelOptions::default();
        LoadOptions {
            dtype: "q4".into(),
            context: d.max_context,
            prefill_chunk: d.prefill_chunk,
        }
    }
}

impl LoadOptions {
    fn model_options(&self) -> Result<ModelOptions> {
        Ok(ModelOptions {
            format: WeightFormat::parse(&self.dtype)?,
            max_context: self.context,
            prefill_chunk: self.prefill_chunk,
            ..ModelOptions::default()
        })
    }
}

/// How to load an artifact (its weights are in their stored format already).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct ArtifactOptions {
    pub context: usize,
    pub prefill_chunk: usize,
    /// Check every tensor's XXH3 checksum as it is read (default true).
    pub verify: bool,
}

impl Default for ArtifactOptions {
    fn default() -> Self {
        let d = LoadOptions::default();
        ArtifactOptions {
            context: d.context,
            prefill_chunk: d.prefill_chunk,
            verify: true,
        }
    }
}

/// Options of the built-in demo model.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct DemoOptions {
    /// Seed of the synthetic weights (the CLI's `wgemma demo --seed`).
    pub seed: u64,
    pub dtype: String,
    pub context: usize,
}

impl Default for DemoOptions {
    fn default() -> Self {
        DemoOptions {
            seed: 0,
            dtype: "q4".into(),
            context: 1024,
        }
    }
}

/// One generation request; every field but the prompt has the CLI's default.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct GenerateRequest {
    /// Prompt text (needs a tokenizer).
    pub prompt: Option<String>,
    /// Prompt token ids (instead of text).
    pub prompt_ids: Option<Vec<u32>>,
    /// Wrap the text in Gemma 4's chat format (one user turn).
    pub chat: bool,
    pub max_new_tokens: usize,
    /// 0 = greedy.
    pub temperature: f32,
    pub top_k: usize,
    pub top_p: f32,
    pub seed: u64,
    /// Draft with the loaded assistant (MTP speculative decoding).
    pub speculative: bool,
    /// Drafts per round, 1..=8.
    pub draft_tokens: usize,
    /// HF's heuristic schedule: +2 after a fully accepted round, -1 otherwise.
    pub adaptive_draft: bool,
}

impl Default for GenerateRequest {
    fn default() -> Self {
        GenerateRequest {
            prompt: None,
            prompt_ids: None,
            chat: false,
            max_new_tokens: 128,
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            seed: 0,
            speculative: false,
            draft_tokens: SpeculativeOptions::default().draft_tokens,
            adaptive_draft: false,
        }
    }
}

/// What the streaming callback sees for each generated token.
#[derive(Debug, Clone, Serialize)]
pub struct TokenEvent {
    /// Position in the output (0 = first generated token).
    pub index: usize,
    pub id: u32,
    /// The newly printable text (None without a tokenizer or inside a multi-byte
    /// character).
    pub text: Option<String>,
}

/// Timings and counts of one generation (speculative fields only when it drafted).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Stats {
    pub load_ms: f64,
    pub prompt_tokens: usize,
    pub generated_tokens: usize,
    pub ttft_ms: f64,
    pub prefill_tokens_per_s: f64,
    pub decode_tokens_per_s: f64,
    pub speculative: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rounds: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub drafted: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub accepted: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub acceptance_rate: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokens_per_round: Option<f64>,
}

impl Stats {
    fn plain(load_ms: f64, s: &GenerateStats) -> Stats {
        Stats {
            load_ms,
            prompt_tokens: s.prompt_tokens,
            generated_tokens: s.generated_tokens,
            ttft_ms: s.ttft_ms,
            prefill_tokens_per_s: s.prefill_tokens_per_s,
            decode_tokens_per_s: s.decode_tokens_per_s,
            speculative: false,
            rounds: None,
            drafted: None,
            accepted: None,
            acceptance_rate: None,
            tokens_per_round: None,
        }
    }

    fn speculative(load_ms: f64, s: &SpeculativeStats) -> Stats {
        Stats {
            speculative: true,
            rounds: Some(s.rounds),
            drafted: Some(s.drafted),
            accepted: Some(s.accepted),
            acceptance_rate: Some(s.acceptance_rate),
            tokens_per_round: Some(s.tokens_per_round),
            ..Stats::plain(load_ms, &s.base)
        }
    }
}

/// The result of [`Engine::generate`].
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GenerateResult {
    pub prompt_ids: Vec<u32>,
    pub tokens: Vec<u32>,
    pub text: Option<String>,
    /// The callback (or an abort) stopped it before a stop token or the budget.
    pub stopped_early: bool,
    pub stats: Stats,
}

/// What was loaded.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelInfo {
    pub description: String,
    pub layers: usize,
    pub hidden_size: usize,
    pub vocab_size: usize,
    pub dtype: String,
    pub has_tokenizer: bool,
    pub has_assistant: bool,
    pub weight_bytes: u64,
    pub load_ms: f64,
}

/// The device and what the browser (or driver) allows.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DeviceInfo {
    pub adapter: String,
    pub backend: String,
    pub fallback_adapter: bool,
    pub features: Vec<String>,
    pub max_storage_buffer_binding_size: u64,
    pub max_buffer_size: u64,
    pub max_compute_workgroups_per_dimension: u32,
    pub max_compute_invocations_per_workgroup: u32,
    pub max_compute_workgroup_storage_size: u32,
}

struct Target {
    model: Model,
    tokenizer: Option<Tokenizer>,
    stop_ids: Vec<u32>,
    dtype: String,
    description: String,
    load_ms: f64,
}

/// A GPU context with at most one target and one assistant bound to it.
pub struct Engine {
    ctx: GpuContext,
    target: Option<Target>,
    assistant: Option<Assistant>,
    /// Validation and out-of-memory errors the device reported. In the browser they arrive
    /// asynchronously and only as console warnings otherwise, while the failed work is
    /// silently skipped and readbacks return stale bytes: generation checks this after
    /// every step.
    gpu_errors: Arc<Mutex<Vec<String>>>,
}

impl Engine {
    /// Opens the GPU (`backends`: `BROWSER_WEBGPU` in the browser).
    pub async fn new(backends: Option<wgpu::Backends>) -> wgemma::Result<Engine> {
        let ctx = GpuContext::new(ContextOptions {
            backends,
            ..ContextOptions::default()
        })
        .await?;
        let gpu_errors = Arc::new(Mutex::new(Vec::new()));
        let sink = gpu_errors.clone();
        ctx.device
            .on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
                sink.lock()
                    .expect("GPU error list poisoned")
                    .push(e.to_string());
            }));
        Ok(Engine {
            ctx,
            target: None,
            assistant: None,
            gpu_errors,
        })
    }

    /// Fails with the device's first reported error, if any (and forgets them all).
    fn check_gpu_errors(&self) -> Result<()> {
        let errors = std::mem::take(&mut *self.gpu_errors.lock().expect("GPU error list poisoned"));
        match errors.first() {
            None => Ok(()),
            Some(first) => bail!(
                "the GPU device reported {} error(s); the output cannot be trusted. First: {first}",
                errors.len()
            ),
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
        self.target
            .as_ref()
            .context("no model loaded: call loadModel, loadModelFromUrls or loadDemo first")
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
            has_tokenizer: t.tokenizer.is_some(),
            has_assistant: self.assistant.is_some(),
            weight_bytes: t.model.weight_bytes(),
            load_ms: t.load_ms,
        })
    }

    fn install_target(
        &mut self,
        load: impl FnOnce(&GpuContext) -> Result<Model>,
        parts: (Option<Tokenizer>, Vec<u32>, String, String),
        start: Instant,
    ) -> Result<()> {
        // The old model's buffers go first: a browser tab has less GPU memory to spare.
        self.assistant = None;
        self.target = None;
        let (tokenizer, eos_ids, dtype, description) = parts;
        let model = load(&self.ctx)?;
        let stop_ids = match &tokenizer {
            Some(t) => t.stop_ids(&eos_ids),
            None => eos_ids,
        };
        self.target = Some(Target {
            model,
            tokenizer,
            stop_ids,
            dtype,
            description,
            load_ms: start.elapsed().as_secs_f64() * 1e3,
        });
        Ok(())
    }

    /// Loads a Hugging Face checkpoint (any assistant loaded before is dropped).
    pub fn load_checkpoint(
        &mut self,
        files: &CheckpointFiles,
        options: &LoadOptions,
    ) -> Result<ModelInfo> {
        let start = Instant::now();
        let model_options = options.model_options()?;
        let spec = parse_config(&files.config_json).context("config.json")?;
        let shards = files
            .shards
            .iter()
            .map(|(name, bytes)| (name.clone(), &bytes[..]))
            .collect();
        let ck = Checkpoint::from_shards(shards)?;
        let tokenizer = files
            .tokenizer_json
            .as_deref()
            .map(Tokenizer::from_bytes)
            .transpose()
            .context("tokenizer.json")?;
        let mut eos_ids = match &files.generation_config_json {
            Some(json) => generation_eos_ids(json)?,
            None => Vec::new(),
        };
        if eos_ids.is_empty() {
            eos_ids = spec.eos_ids();
        }
        let c = &spec.config;
        let description = format!(
            "Gemma 4 checkpoint ({} layers, hidden {}, vocab {}), {}",
            c.num_hidden_layers, c.hidden_size, c.vocab_size, options.dtype
        );
        let parts = (tokenizer, eos_ids, options.dtype.clone(), description);
        let load =
            |ctx: &GpuContext| Ok(Model::load(ctx, &ck, spec, model_options, &mut |_, _| {})?);
        self.install_target(load, parts, start)?;
        self.check_gpu_errors()?;
        self.model_info()
    }

    /// Loads a llama.cpp GGUF file (`gemma4`): config and tokenizer from its metadata,
    /// weights converted to `options.dtype` (Q4_0 into Q4 group 32 as it is).
    pub fn load_gguf(&mut self, bytes: &[u8], options: &LoadOptions) -> Result<ModelInfo> {
        let start = Instant::now();
        let model_options = options.model_options()?;
        let file = GgufFile::parse(bytes).context("GGUF")?;
        let spec = parse_config(&gguf::config_json(&file).context("GGUF metadata")?)
            .context("the config the GGUF metadata describes")?;
        let tokenizer = gguf::tokenizer::tokenizer_json(&file)
            .context("the GGUF tokenizer metadata")?
            .map(|json| Tokenizer::from_bytes(json.as_bytes()))
            .transpose()
            .context("the GGUF tokenizer metadata")?;
        let mut eos_ids = gguf::eos_ids(&file);
        if eos_ids.is_empty() {
            eos_ids = spec.eos_ids();
        }
        let c = &spec.config;
        let description = format!(
            "Gemma 4 GGUF ({} layers, hidden {}, vocab {}), {}",
            c.num_hidden_layers, c.hidden_size, c.vocab_size, options.dtype
        );
        let parts = (tokenizer, eos_ids, options.dtype.clone(), description);
        let weights = GgufWeights::new(&file);
        let load = |ctx: &GpuContext| {
            Ok(Model::load(
                ctx,
                &weights,
                spec,
                model_options,
                &mut |_, _| {},
            )?)
        };
        self.install_target(load, parts, start)?;
        self.check_gpu_errors()?;
        self.model_info()
    }

    /// Loads a model artifact (`wgemma convert`): the target, and its assistant when the
    /// artifact holds one. Weights are stored in their GPU layout already (no dtype choice);
    /// checksums are verified unless `options.verify` is false.
    pub fn load_artifact(&mut self, bytes: &[u8], options: &ArtifactOptions) -> Result<ModelInfo> {
        let start = Instant::now();
        let art = Artifact::parse(bytes).context("artifact")?;
        let m = art.manifest();
        let tokenizer = art
            .tokenizer_json(Which::Target)?
            .map(Tokenizer::from_bytes)
            .transpose()
            .context("the tokenizer stored in the artifact")?;
        let mut eos_ids = m
            .target
            .generation_config
            .as_ref()
            .map(eos_ids_of)
            .unwrap_or_default();
        if eos_ids.is_empty() {
            eos_ids = art.target_spec().eos_ids();
        }
        let model_options = ModelOptions {
            format: art.format(),
            max_context: options.context,
            prefill_chunk: options.prefill_chunk,
            ..ModelOptions::default()
        };
        let c = &art.target_spec().config;
        let dtype = m.quant.describe();
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
            Ok(artifact::load_target(ctx, &art, model_options, hooks)?)
        };
        self.install_target(load, (tokenizer, eos_ids, dtype, description), start)?;
        if art.assistant_spec().is_some() {
            let target = self.target()?;
            let assistant =
                artifact::load_assistant(&self.ctx, &art, &target.model, verify, &|_| {})
                    .context("loading the artifact's assistant")?;
            self.assistant = Some(assistant);
        }
        self.check_gpu_errors()?;
        self.model_info()
    }

    /// The built-in demo: `wgemma demo`'s synthetic tiny target (random weights from
    /// `seed`, vocab 4096, no tokenizer) with its centroid-head MTP assistant.
    pub fn load_demo(&mut self, options: &DemoOptions) -> Result<ModelInfo> {
        let start = Instant::now();
        let model_options = LoadOptions {
            dtype: options.dtype.clone(),
            context: options.context,
            ..LoadOptions::default()
        }
        .model_options()?;
        let spec = SyntheticShape::Tiny.spec();
        let c = &spec.config;
        let description = format!(
            "built-in demo: synthetic Gemma 4 ({} layers, hidden {}, vocab {}, random weights, \
             seed {}, no tokenizer) + MTP assistant, {}",
            c.num_hidden_layers, c.hidden_size, c.vocab_size, options.seed, options.dtype
        );
        let eos_ids = spec.eos_ids();
        let weights = SyntheticWeights { seed: options.seed };
        let parts = (None, eos_ids, options.dtype.clone(), description);
        let load = |ctx: &GpuContext| {
            Ok(Model::load(
                ctx,
                &weights,
                spec,
                model_options,
                &mut |_, _| {},
            )?)
        };
        self.install_target(load, parts, start)?;
        let source = SyntheticAssistant {
            target_seed: options.seed,
            seed: options.seed.wrapping_add(1),
        };
        let spec = parse_assistant_config(&source.config_json())?;
        self.install_assistant(&source, spec)?;
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
        let spec = parse_assistant_config(config_json).context("assistant config.json")?;
        let shards = shards
            .iter()
            .map(|(name, bytes)| (name.clone(), &bytes[..]))
            .collect();
        let ck = Checkpoint::from_shards(shards)?;
        self.install_assistant(&ck, spec)
            .context("loading the assistant")
    }

    fn install_assistant(
        &mut self,
        source: &dyn wgemma::model::assistant::AssistantSource,
        spec: wgemma::model::assistant::AssistantSpec,
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

    /// Generates for `request`; `on_token` sees every committed token and returns `false`
    /// to stop (the browser's abort goes through it).
    pub async fn generate(
        &mut self,
        request: &GenerateRequest,
        on_token: &mut dyn FnMut(&TokenEvent) -> bool,
    ) -> Result<GenerateResult> {
        self.check_gpu_errors()?;
        let target = self
            .target
            .as_mut()
            .context("no model loaded: call loadModel, loadModelFromUrls or loadDemo first")?;
        let prompt = prompt_ids(request, target.tokenizer.as_ref())?;
        let options = GenerateOptions {
            max_new_tokens: request.max_new_tokens,
            sampling: SamplingParams {
                temperature: request.temperature,
                top_k: request.top_k,
                top_p: request.top_p,
                seed: request.seed,
            },
            stop_ids: target.stop_ids.clone(),
        };
        let gpu_errors = self.gpu_errors.clone();
        let mut stream = target.tokenizer.as_ref().map(TextStream::new);
        let mut stream_error = None;
        let mut stopped_early = false;
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
            let text = match stream.as_mut().map(|s| s.push(id)).transpose() {
                Ok(piece) => piece.flatten(),
                Err(e) => {
                    stream_error = Some(e);
                    return false;
                }
            };
            let keep_going = on_token(&TokenEvent { index, id, text });
            index += 1;
            stopped_early |= !keep_going;
            keep_going
        };
        let (tokens, stats) = if request.speculative {
            let assistant = self.assistant.as_mut().context(
                "speculative decoding needs an assistant: call loadAssistant (or loadDemo, which \
                 brings one) first",
            )?;
            let spec = SpeculativeOptions {
                draft_tokens: request.draft_tokens,
                adaptive: request.adaptive_draft,
                ..SpeculativeOptions::default()
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
            (out.tokens, Stats::speculative(target.load_ms, &out.stats))
        } else {
            let (tokens, stats) = generate(
                &mut target.model,
                &self.ctx,
                &prompt,
                &options,
                &mut forward,
            )
            .await?;
            (tokens, Stats::plain(target.load_ms, &stats))
        };
        self.check_gpu_errors()?;
        if let Some(e) = stream_error {
            return Err(e.into());
        }
        let target = self.target()?;
        let text = target
            .tokenizer
            .as_ref()
            .map(|t| t.decode(&tokens))
            .transpose()?;
        Ok(GenerateResult {
            prompt_ids: prompt,
            tokens,
            text,
            stopped_early,
            stats,
        })
    }
}

/// The request's prompt as token ids: given ids, or text through the tokenizer.
fn prompt_ids(request: &GenerateRequest, tokenizer: Option<&Tokenizer>) -> Result<Vec<u32>> {
    match (&request.prompt, &request.prompt_ids) {
        (Some(text), None) => {
            let tok = tokenizer.context(
                "a text prompt needs a tokenizer (tokenizer.json with the checkpoint); this \
                 model has none: give promptIds instead",
            )?;
            Ok(if request.chat {
                tok.encode_chat(text)?
            } else {
                tok.encode_prompt(text)?
            })
        }
        (None, Some(ids)) => {
            if request.chat {
                bail!("chat applies to a text prompt, not to promptIds");
            }
            Ok(ids.clone())
        }
        (Some(_), Some(_)) => bail!("give one of prompt or promptIds, not both"),
        (None, None) => bail!("give a prompt (text) or promptIds (token ids)"),
    }
}

/// EOS ids named by generation_config.json (a number or an array), as the CLI reads them.
fn generation_eos_ids(json: &str) -> Result<Vec<u32>> {
    let v: serde_json::Value = serde_json::from_str(json).context("generation_config.json")?;
    Ok(eos_ids_of(&v))
}

fn eos_ids_of(generation_config: &serde_json::Value) -> Vec<u32> {
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
