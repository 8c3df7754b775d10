//! `wgemma logits` and `wgemma generate`.

use crate::artifact_file::peak_rss_mb;
use crate::load::{load_model, LoadRequest};
use anyhow::{bail, Context, Result};
use clap::Args;
use std::io::Write as _;
use std::path::PathBuf;
use wgemma::gpu::{ContextOptions, GpuContext};
use wgemma::model::sampling::SamplingParams;
use wgemma::model::speculative::MAX_DRAFT_TOKENS;
use wgemma::model::target::{ModelOptions, Want};
use wgemma::model::weights::WeightFormat;
use wgemma::session::{ChatMessage, GenerateRequest, TokenEvent};

/// Options shared by the commands that load a model.
#[derive(Args, Clone)]
pub struct ModelArgs {
    /// A Hugging Face checkpoint directory (config.json, *.safetensors, tokenizer.json), a
    /// model artifact file (`wgemma convert`) or a llama.cpp GGUF file (`gemma4`).
    #[arg(long, value_name = "DIR|FILE")]
    pub model: PathBuf,
    /// Weights on the GPU: q4 (group 32, the default for a directory), q4g64, q4g128, f16
    /// or f32 (parity). An artifact's weights are converted already: its own format is used,
    /// and asking for another is an error.
    #[arg(long)]
    pub dtype: Option<String>,
    /// KV cache positions (prompt + generated tokens).
    #[arg(long, default_value_t = 4096)]
    pub context: usize,
    /// Rows per prefill forward (default 64, or --context when that is smaller).
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
        if self.context == 0 {
            bail!("--context: expected at least 1 position, found 0");
        }
        let prefill_chunk = self.prefill_chunk.unwrap_or(64.min(self.context));
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

/// Parses `5,17,9`: at least one id, each a u32.
pub fn parse_ids(s: &str) -> Result<Vec<u32>> {
    wgemma::model::tokenizer::parse_prompt_ids(s).context("--prompt-ids")
}

/// Refuses a prompt plus `max_new_tokens` that cannot fit the KV cache, before any token
/// is generated (a limit found at the end would throw the generated tokens away).
fn check_budget(prompt: usize, max_new_tokens: usize, context: usize) -> Result<()> {
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

#[derive(Args)]
pub struct LogitsArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// Comma-separated prompt token ids.
    #[arg(long)]
    prompt_ids: String,
    /// Logits of every position, not only the last.
    #[arg(long)]
    all_positions: bool,
    /// Print JSON (the only output format; kept for scripts that pass it).
    #[arg(long)]
    json: bool,
}

pub fn run_logits(args: LogitsArgs) -> Result<()> {
    let ids = parse_ids(&args.prompt_ids)?;
    let request = args.model.request()?;
    check_budget(ids.len(), 0, args.model.context)?;
    let ctx = GpuContext::new_blocking(ContextOptions::default())?;
    let mut loaded = load_model(&ctx, &args.model.model, request)?;
    let want = if args.all_positions {
        Want::AllLogits
    } else {
        Want::LastLogits
    };
    let out = pollster::block_on(loaded.model.forward(&ctx, &ids, want))?;
    let vocab = loaded.model.spec.config.vocab_size;
    let rows: Vec<&[f32]> = out.logits.chunks(vocab).collect();
    let _ = args.json;
    let stdout = std::io::stdout();
    let mut w = std::io::BufWriter::new(stdout.lock());
    serde_json::to_writer(&mut w, &serde_json::json!({ "logits": rows }))?;
    writeln!(w)?;
    Ok(())
}

#[derive(Args)]
pub struct GenerateArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// Prompt text (needs tokenizer.json in the model directory).
    #[arg(long, conflicts_with = "prompt_ids")]
    prompt: Option<String>,
    /// Comma-separated prompt token ids.
    #[arg(long)]
    prompt_ids: Option<String>,
    /// Wrap the prompt in the checkpoint's chat template (chat_template.jinja,
    /// tokenizer_config.json or a GGUF's tokenizer.chat_template; Gemma 4's turn format
    /// when it has none) as one user turn.
    #[arg(long)]
    chat: bool,
    /// A system prompt before the user turn (with --chat).
    #[arg(long, requires = "chat")]
    system: Option<String>,
    #[arg(long, default_value_t = 128)]
    max_new_tokens: usize,
    /// 0 = greedy.
    #[arg(long, default_value_t = 0.0)]
    temperature: f32,
    /// 0 = no limit.
    #[arg(long, default_value_t = 0)]
    top_k: usize,
    #[arg(long, default_value_t = 1.0)]
    top_p: f32,
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Text that ends the generation (cut before it); repeat for several.
    #[arg(long, value_name = "TEXT")]
    stop: Vec<String>,
    /// One JSON object with tokens, text and stats instead of streamed text.
    #[arg(long)]
    json: bool,
    /// MTP speculative decoding with this Gemma 4 assistant: a checkpoint directory
    /// (`gemma4_assistant`: config.json + *.safetensors), a `gemma4-assistant` GGUF file or
    /// an artifact holding one (it may be the `--model` artifact itself).
    #[arg(long, value_name = "DIR|FILE")]
    assistant: Option<PathBuf>,
    /// Drafts per speculative round (1..=8).
    #[arg(long, default_value_t = 2, requires = "assistant")]
    draft_tokens: usize,
    /// Adaptive drafts per round: k in 0..=8 chosen from the acceptance and the round costs
    /// measured so far on this device (maximising expected tokens/s), plain pipelined
    /// decode steps when drafting does not pay; --draft-tokens is the first round's k.
    #[arg(long, requires = "assistant")]
    adaptive_draft: bool,
    /// Add every round's drafts to the JSON stats (`draft_rounds`).
    #[arg(long, requires = "assistant")]
    trace_drafts: bool,
}

impl GenerateArgs {
    /// The session request these flags ask for.
    fn request(&self) -> Result<GenerateRequest> {
        let (prompt, messages) = match (&self.system, &self.prompt) {
            (Some(system), Some(text)) => (
                None,
                Some(vec![
                    ChatMessage::new("system", system),
                    ChatMessage::new("user", text),
                ]),
            ),
            _ => (self.prompt.clone(), None),
        };
        Ok(GenerateRequest {
            chat: self.chat && messages.is_none(),
            prompt,
            messages,
            prompt_ids: self.prompt_ids.as_deref().map(parse_ids).transpose()?,
            max_new_tokens: self.max_new_tokens,
            temperature: self.temperature,
            top_k: self.top_k,
            top_p: self.top_p,
            seed: self.seed,
            stop: self.stop.clone(),
            speculative: self.assistant.is_some(),
            draft_tokens: self.draft_tokens,
            adaptive_draft: self.adaptive_draft,
            trace_drafts: self.trace_drafts,
        })
    }
}

pub fn run_generate(args: GenerateArgs) -> Result<()> {
    // Everything the flags alone decide is checked before the GPU or the model is touched.
    let load_request = args.model.request()?;
    let sampling = SamplingParams {
        temperature: args.temperature,
        top_k: args.top_k,
        top_p: args.top_p,
        seed: args.seed,
    };
    sampling.validate()?;
    if args.prompt.is_none() && args.prompt_ids.is_none() {
        bail!("expected one of --prompt TEXT or --prompt-ids IDS, found neither");
    }
    if args.chat && args.prompt.is_none() {
        bail!(
            "--chat: expected --prompt TEXT (it wraps text in the chat format), found --prompt-ids"
        );
    }
    if args.trace_drafts && !args.json {
        bail!("--trace-drafts: expected --json as well (the drafts are reported in its stats), found text output");
    }
    if args.assistant.is_some() && !(1..=MAX_DRAFT_TOKENS).contains(&args.draft_tokens) {
        bail!(
            "--draft-tokens: expected 1..={MAX_DRAFT_TOKENS}, found {}",
            args.draft_tokens
        );
    }
    if let Some(ids) = &args.prompt_ids {
        check_budget(
            parse_ids(ids)?.len(),
            args.max_new_tokens,
            args.model.context,
        )?;
    } else {
        // A text prompt is at least one token (BOS).
        check_budget(1, args.max_new_tokens, args.model.context)?;
    }
    let request = args.request()?;
    let ctx = GpuContext::new_blocking(ContextOptions::default())?;
    let loaded = load_model(&ctx, &args.model.model, load_request)?;
    let load_ms = loaded.load_ms;
    let session = loaded.into_session(
        ctx,
        &args.model.model,
        args.assistant.as_deref(),
        !args.model.no_verify,
    )?;
    let prompt = session.prompt_ids(&request).map_err(|e| {
        let needs_tokenizer = session.tokenizer().is_none() && request.prompt_ids.is_none();
        if needs_tokenizer {
            anyhow::anyhow!(
                "--prompt: expected a tokenizer.json with {} to encode the text, found none \
                 (give --prompt-ids instead)",
                args.model.model.display()
            )
        } else {
            e.into()
        }
    })?;
    check_budget(prompt.len(), args.max_new_tokens, args.model.context)?;
    let json = args.json;
    let mut on_token = |t: &TokenEvent| {
        if let (false, Some(piece)) = (json, &t.text) {
            print!("{piece}");
            let _ = std::io::stdout().flush();
        }
        true
    };
    let mut session = session;
    let out = pollster::block_on(session.generate(&request, &mut on_token))?;
    if json {
        let mut stats = out.loop_stats.to_json();
        if args.trace_drafts {
            stats["draft_rounds"] = serde_json::to_value(&out.draft_rounds)?;
        }
        stats["load_ms"] = load_ms.into();
        stats["peak_rss_mb"] = peak_rss_mb().into();
        let line = serde_json::json!({ "tokens": out.tokens, "text": out.text, "stats": stats });
        println!("{line}");
    } else {
        if session.tokenizer().is_none() {
            println!(
                "{}",
                out.tokens
                    .iter()
                    .map(|t| t.to_string())
                    .collect::<Vec<_>>()
                    .join(" ")
            );
        } else {
            println!("{}", out.unstreamed_text);
        }
        eprintln!("load {:.0} ms | {}", load_ms, out.loop_stats.summary());
    }
    Ok(())
}
