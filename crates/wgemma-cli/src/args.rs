//! The flags every command that loads a model, prompts it or samples shares (one name and
//! one default per concept), and the checks they need before anything is loaded.

use crate::files::is_gguf;
use crate::load::LoadRequest;
use anyhow::{bail, Context, Result};
use clap::Args;
use std::io::{IsTerminal as _, Read};
use std::path::{Path, PathBuf};
use wgemma::generate::sampling::SamplingParams;
use wgemma::generate::speculative::MAX_DRAFT_TOKENS;
use wgemma::model::target::ModelOptions;
use wgemma::model::weights::WeightFormat;
use wgemma::text::tokenizer::parse_prompt_ids;

/// Rows per prefill forward unless `--prefill-chunk` says otherwise (or `--context` is
/// smaller): every command that prefills uses it, `bench` included.
pub const DEFAULT_PREFILL_CHUNK: usize = 256;

/// Drafts of the first speculative round (the adaptive schedule then picks k per round).
pub const DEFAULT_DRAFT_TOKENS: usize = 2;

/// Options shared by the commands that load a model.
#[derive(Args, Clone)]
pub struct ModelArgs {
    /// A Hugging Face checkpoint directory (config.json, *.safetensors, tokenizer.json), a
    /// model artifact file (`wgemma convert`) or a llama.cpp GGUF file (`gemma4`).
    #[arg(short = 'm', long, value_name = "DIR|FILE")]
    pub model: PathBuf,
    /// Weights on the GPU: q4 (group 32, the default for a directory), q4g64, q4g128, f16
    /// or f32 (parity). An artifact's weights are converted already: its own format is used,
    /// and asking for another is an error.
    #[arg(long)]
    pub dtype: Option<String>,
    /// KV cache positions (prompt + generated tokens).
    #[arg(short = 'c', long, visible_alias = "ctx-size", default_value_t = 4096)]
    pub context: usize,
    /// Rows per prefill forward (default 256, or --context when that is smaller).
    #[arg(long)]
    pub prefill_chunk: Option<usize>,
    /// Skip the per-tensor checksums of an artifact (its structure is still checked).
    #[arg(long)]
    pub no_verify: bool,
    /// Load a checkpoint directory holding decoder tensors its config does not describe
    /// (more layers, say), with a warning naming them, instead of refusing it.
    #[arg(long)]
    pub allow_extra_tensors: bool,
}

impl ModelArgs {
    /// The load request, its sizes checked before anything is read or allocated.
    pub fn request(&self) -> Result<LoadRequest> {
        check_exists("--model", &self.model)?;
        if self.context == 0 {
            bail!("--context: expected at least 1 position, found 0");
        }
        let prefill_chunk = self
            .prefill_chunk
            .unwrap_or(DEFAULT_PREFILL_CHUNK.min(self.context));
        if prefill_chunk == 0 || prefill_chunk > self.context {
            bail!(
                "--prefill-chunk: expected 1..={} rows (at most --context), found {prefill_chunk}",
                self.context,
            );
        }
        Ok(LoadRequest {
            dtype: self.dtype.as_deref().map(WeightFormat::parse).transpose()?,
            options: ModelOptions {
                max_context: self.context,
                prefill_chunk,
                ..ModelOptions::default()
            },
            verify: !self.no_verify,
            allow_extra_tensors: self.allow_extra_tensors,
        })
    }
}

impl ModelArgs {
    /// Warns about the load flags that do nothing for these files: --no-verify with no
    /// artifact (only an artifact has checksums), --allow-extra-tensors with no checkpoint
    /// directory (the only source whose tensors a config may not describe).
    pub fn warn_unused(&self, assistant: Option<&Path>) {
        let artifact = |p: &Path| p.is_file() && !is_gguf(p);
        if self.no_verify && !artifact(&self.model) && !assistant.is_some_and(artifact) {
            eprintln!("warning: --no-verify is unused: only a model artifact has checksums");
        }
        if self.allow_extra_tensors && !self.model.is_dir() {
            eprintln!(
                "warning: --allow-extra-tensors is unused: only a checkpoint directory's \
                 tensors are checked against its config"
            );
        }
    }
}

/// Refuses a path that is not there with the plain reason (a loader would only say that
/// it is not the checkpoint, artifact or GGUF file it expected). A dangling symlink is
/// there: the loader names it.
pub fn check_exists(flag: &str, path: &Path) -> Result<()> {
    check_exists_as(
        flag,
        path,
        "a checkpoint directory, a model artifact or a GGUF file",
    )
}

/// [`check_exists`] for a path that should hold `expected`.
pub fn check_exists_as(flag: &str, path: &Path, expected: &str) -> Result<()> {
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => bail!(
            "{flag} {}: no such file or directory (expected {expected}, found nothing there)",
            path.display()
        ),
        _ => Ok(()),
    }
}

/// Parses `5,17,9`: at least one id, each a u32.
pub fn parse_ids(s: &str) -> Result<Vec<u32>> {
    parse_prompt_ids(s).context("--prompt-ids")
}

/// Refuses a prompt plus `max_new_tokens` that cannot fit the KV cache, before any token
/// is generated (a limit found at the end would throw the generated tokens away).
pub fn check_budget(prompt: usize, max_new_tokens: usize, context: usize) -> Result<()> {
    // A prompt that alone leaves no room is the prompt's fault, whatever the budget.
    if prompt.saturating_add(max_new_tokens.min(1)) > context {
        bail!(
            "prompt: expected at most {} tokens (--context = {context} positions, less room \
             for a new token), found {prompt}",
            context.saturating_sub(max_new_tokens.min(1))
        );
    }
    match prompt.checked_add(max_new_tokens) {
        Some(total) if total <= context => Ok(()),
        total => bail!(
            "prompt + --max-new-tokens: expected at most --context = {context} positions, \
             found {prompt} prompt tokens + {max_new_tokens} = {}",
            total.map_or("more than 2^64".to_string(), |t| t.to_string())
        ),
    }
}

/// Sampling flags, shared by `generate` and `chat`. Where a person types a prompt the
/// defaults sample (llama.cpp's temperature, top-k and top-p, a repetition penalty, a
/// fresh seed); token-id prompts and `--greedy` decode greedily, where parity is the point.
#[derive(Args, Clone, Default)]
pub struct SamplingArgs {
    /// Sampling temperature; 0 = greedy [default: 0.8 for text, 0 for --prompt-ids]. (There
    /// is no thread count to set on a GPU: -t is the temperature.)
    #[arg(
        short = 't',
        long = "temp",
        visible_alias = "temperature",
        value_name = "T"
    )]
    pub temperature: Option<f32>,
    /// Keep the K most likely tokens; 0 = no limit [default: 40 for text, 0 for ids].
    #[arg(long, value_name = "K")]
    pub top_k: Option<usize>,
    /// Keep the smallest set of tokens whose probability reaches P [default: 0.95 for
    /// text, 1 for ids].
    #[arg(long, value_name = "P")]
    pub top_p: Option<f32>,
    /// Divide the positive logits (multiply the negative ones) of the tokens in the prompt
    /// or generated so far by this (1 = none) [default: 1.1 for text, 1 for ids].
    /// Speculative decoding samples without it.
    #[arg(long, visible_alias = "repetition-penalty", value_name = "X")]
    pub repeat_penalty: Option<f32>,
    /// Sampling seed [default: a fresh one, printed with the stats so a run can be
    /// repeated].
    #[arg(short = 's', long)]
    pub seed: Option<u64>,
    /// Greedy decoding: the most likely token every step (the model's own argmax, no
    /// penalty; the same tokens every run).
    #[arg(long, conflicts_with_all = ["temperature", "top_k", "top_p", "repeat_penalty"])]
    pub greedy: bool,
}

/// Sampling as resolved from [`SamplingArgs`] and the kind of prompt.
#[derive(Debug, Clone, Copy)]
pub struct Sampling {
    pub params: SamplingParams,
    /// The seed was chosen here, not given.
    pub seed_chosen: bool,
}

impl SamplingArgs {
    /// The sampling these flags ask for; `text`: a person's prompt (sampling defaults),
    /// else token ids (greedy defaults).
    pub fn resolve(&self, text: bool) -> Result<Sampling> {
        let sample = text && !self.greedy;
        let params = SamplingParams {
            temperature: self.temperature.unwrap_or(if sample { 0.8 } else { 0.0 }),
            top_k: self.top_k.unwrap_or(if sample { 40 } else { 0 }),
            top_p: self.top_p.unwrap_or(if sample { 0.95 } else { 1.0 }),
            repeat_penalty: self
                .repeat_penalty
                .unwrap_or(if sample { 1.1 } else { 1.0 }),
            seed: self.seed.unwrap_or_else(fresh_seed),
        };
        params.validate()?;
        self.warn_unused_by_greedy(&params);
        if params.temperature > 2.0 {
            eprintln!(
                "warning: --temp {} is far above the usual 0.1..1.5 (llama.cpp's -t is a \
                 thread count; here -t is the temperature)",
                params.temperature
            );
        }
        Ok(Sampling {
            params,
            seed_chosen: self.seed.is_none(),
        })
    }
}

impl SamplingArgs {
    /// Greedy decoding takes the argmax of the model's own logits: the sampling flags given
    /// with it do nothing, and each is named (llama.cpp applies its penalties even at
    /// temperature 0; here they are not applied).
    fn warn_unused_by_greedy(&self, params: &SamplingParams) {
        if !params.is_greedy() {
            return;
        }
        let unused: Vec<&str> = [
            (self.top_k.is_some(), "--top-k"),
            (self.top_p.is_some(), "--top-p"),
            (self.repeat_penalty.is_some(), "--repeat-penalty"),
            (self.seed.is_some(), "--seed"),
        ]
        .into_iter()
        .filter_map(|(given, flag)| given.then_some(flag))
        .collect();
        if !unused.is_empty() {
            eprintln!(
                "warning: {} unused: greedy decoding (temperature 0) takes the most likely \
                 token, without penalty or draws",
                unused.join(", ")
            );
        }
    }
}

/// Speculative rounds sample without the repetition penalty (their accept/reject test
/// compares the drafter's and the target's plain distributions): say so when it was asked
/// for, and report what runs.
pub fn no_penalty_when_drafting(sampling: &mut Sampling, args: &SamplingArgs) {
    if args.repeat_penalty.is_some_and(|p| p != 1.0) {
        eprintln!(
            "warning: --repeat-penalty is not applied with --assistant (speculative sampling)"
        );
    }
    sampling.params.repeat_penalty = 1.0;
}

/// A seed from the clock and the process id (sampling needs variety, not secrecy).
fn fresh_seed() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    nanos ^ (u64::from(std::process::id()) << 32)
}

/// Where the prompt comes from: text, a file (`-`: standard input) or token ids.
#[derive(Args, Clone)]
pub struct PromptArgs {
    /// Prompt text (encoded with the model's tokenizer).
    #[arg(short = 'p', long, conflicts_with_all = ["prompt_ids", "file"])]
    pub prompt: Option<String>,
    /// Read the prompt text from FILE; `-` reads standard input.
    #[arg(short = 'f', long, value_name = "FILE", conflicts_with = "prompt_ids")]
    pub file: Option<PathBuf>,
    /// Comma-separated prompt token ids (greedy by default: for parity checks).
    #[arg(long)]
    pub prompt_ids: Option<String>,
}

impl PromptArgs {
    /// The prompt text (`--prompt` or `--file`), None for token ids.
    pub fn text(&self) -> Result<Option<String>> {
        match (&self.prompt, &self.file) {
            (Some(text), _) => Ok(Some(text.clone())),
            (None, Some(path)) => read_prompt_file(path).map(Some),
            (None, None) => Ok(None),
        }
    }
}

/// Bytes a prompt file (or standard input) may hold: far past any context (a 128K-token
/// prompt is about 0.5 MB), and `-f /dev/zero` ends here instead of when memory runs out.
pub const MAX_PROMPT_FILE_BYTES: u64 = 64 << 20;

/// The prompt text in `path` (`-`: standard input), without one trailing newline.
pub fn read_prompt_file(path: &Path) -> Result<String> {
    let what = format!("--file {}", path.display());
    let bytes = if path == Path::new("-") {
        if std::io::stdin().is_terminal() {
            eprintln!("reading the prompt from standard input (end it with Ctrl-D)");
        }
        read_capped(std::io::stdin().lock(), &what)?
    } else {
        check_exists_as("--file", path, "a text file holding the prompt")?;
        let file = std::fs::File::open(path).with_context(|| format!("{what}: opening"))?;
        read_capped(file, &what)?
    };
    let mut text = String::from_utf8(bytes).map_err(|e| {
        anyhow::anyhow!(
            "{what}: expected UTF-8 text, found invalid bytes at byte {}",
            e.utf8_error().valid_up_to()
        )
    })?;
    if text.ends_with('\n') {
        text.pop();
        if text.ends_with('\r') {
            text.pop();
        }
    }
    if text.is_empty() {
        bail!("{what}: expected prompt text, found an empty file");
    }
    Ok(text)
}

/// At most [`MAX_PROMPT_FILE_BYTES`] of `reader`, refusing more.
fn read_capped(reader: impl Read, what: &str) -> Result<Vec<u8>> {
    let mut bytes = Vec::new();
    reader
        .take(MAX_PROMPT_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .with_context(|| format!("{what}: reading the prompt"))?;
    if bytes.len() as u64 > MAX_PROMPT_FILE_BYTES {
        bail!("{what}: expected at most {MAX_PROMPT_FILE_BYTES} bytes of prompt text, found more");
    }
    Ok(bytes)
}

/// Speculative decoding flags, shared by `generate` and `chat`.
#[derive(Args, Clone)]
pub struct DraftArgs {
    /// MTP speculative decoding with this Gemma 4 assistant: a checkpoint directory
    /// (`gemma4_assistant`: config.json + *.safetensors), a `gemma4-assistant` GGUF file or
    /// an artifact holding one (it may be the `--model` artifact itself).
    #[arg(long, value_name = "DIR|FILE")]
    pub assistant: Option<PathBuf>,
    /// Drafts of the first speculative round (1..=8); the adaptive schedule then picks k in
    /// 0..=8 per round from the acceptance and round costs measured on this device (plain
    /// pipelined steps when drafting does not pay).
    #[arg(long, default_value_t = DEFAULT_DRAFT_TOKENS, requires = "assistant")]
    pub draft_tokens: usize,
    /// --draft-tokens drafts every round instead of the adaptive schedule.
    #[arg(long, requires = "assistant")]
    pub fixed_draft: bool,
    /// The adaptive schedule (the default; kept for scripts that pass it).
    #[arg(
        long,
        requires = "assistant",
        conflicts_with = "fixed_draft",
        hide = true
    )]
    pub adaptive_draft: bool,
}

impl DraftArgs {
    /// The flags alone (the assistant's path is checked when it is loaded).
    pub fn check(&self) -> Result<()> {
        if self.assistant.is_some() && !(1..=MAX_DRAFT_TOKENS).contains(&self.draft_tokens) {
            bail!(
                "--draft-tokens: expected 1..={MAX_DRAFT_TOKENS}, found {}",
                self.draft_tokens
            );
        }
        Ok(())
    }
}
