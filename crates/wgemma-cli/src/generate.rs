//! `wgemma logits` and `wgemma generate`.

use crate::artifact_file::peak_rss_mb;
use crate::load::{load_assistant, load_model, LoadRequest, Loaded};
use anyhow::{bail, Context, Result};
use clap::Args;
use std::io::Write as _;
use std::path::PathBuf;
use wgemma::gpu::{ContextOptions, GpuContext};
use wgemma::model::generate::{generate, GenerateOptions};
use wgemma::model::sampling::SamplingParams;
use wgemma::model::speculative::{generate_speculative, SpeculativeOptions};
use wgemma::model::target::{ModelOptions, Want};
use wgemma::model::tokenizer::TextStream;
use wgemma::model::weights::WeightFormat;

/// Options shared by the commands that load a model.
#[derive(Args, Clone)]
pub struct ModelArgs {
    /// A Hugging Face checkpoint directory (config.json, *.safetensors, tokenizer.json) or
    /// a model artifact file (`wgemma convert`).
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
    /// Rows per prefill forward.
    #[arg(long, default_value_t = 64)]
    pub prefill_chunk: usize,
    /// Skip the per-tensor checksums of an artifact (its structure is still checked).
    #[arg(long)]
    pub no_verify: bool,
}

impl ModelArgs {
    pub fn request(&self) -> Result<LoadRequest> {
        Ok(LoadRequest {
            dtype: self.dtype.as_deref().map(WeightFormat::parse).transpose()?,
            options: ModelOptions {
                max_context: self.context,
                prefill_chunk: self.prefill_chunk,
                ..ModelOptions::default()
            },
            verify: !self.no_verify,
        })
    }
}

/// Parses `5,17,9`.
pub fn parse_ids(s: &str) -> Result<Vec<u32>> {
    s.split(',')
        .map(|t| {
            t.trim().parse::<u32>().with_context(|| {
                format!("--prompt-ids: expected comma-separated token ids, found {t:?}")
            })
        })
        .collect()
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
    let ctx = GpuContext::new_blocking(ContextOptions::default())?;
    let mut loaded = load_model(&ctx, &args.model.model, args.model.request()?)?;
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
    /// Wrap the prompt in Gemma 4's chat format (one user turn).
    #[arg(long)]
    chat: bool,
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
    /// One JSON object with tokens, text and stats instead of streamed text.
    #[arg(long)]
    json: bool,
    /// MTP speculative decoding with this Gemma 4 assistant: a checkpoint directory
    /// (`gemma4_assistant`: config.json + *.safetensors) or an artifact holding one (it
    /// may be the `--model` artifact itself).
    #[arg(long, value_name = "DIR|FILE")]
    assistant: Option<PathBuf>,
    /// Drafts per speculative round (1..=8).
    #[arg(long, default_value_t = 2, requires = "assistant")]
    draft_tokens: usize,
    /// HF's heuristic schedule: +2 drafts after a fully accepted round, -1 otherwise.
    #[arg(long, requires = "assistant")]
    adaptive_draft: bool,
    /// Add every round's drafts to the JSON stats (`draft_rounds`).
    #[arg(long, requires = "assistant")]
    trace_drafts: bool,
}

fn prompt_tokens(args: &GenerateArgs, loaded: &Loaded) -> Result<Vec<u32>> {
    match (&args.prompt, &args.prompt_ids) {
        (Some(text), None) => {
            let tok = loaded.tokenizer.as_ref().with_context(|| {
                format!(
                    "--prompt needs tokenizer.json in {}",
                    args.model.model.display()
                )
            })?;
            Ok(if args.chat {
                tok.encode_chat(text)?
            } else {
                tok.encode_prompt(text)?
            })
        }
        (None, Some(ids)) => {
            if args.chat {
                bail!("--chat applies to --prompt text, not to --prompt-ids");
            }
            parse_ids(ids)
        }
        _ => bail!("give exactly one of --prompt TEXT or --prompt-ids IDS"),
    }
}

pub fn run_generate(args: GenerateArgs) -> Result<()> {
    let ctx = GpuContext::new_blocking(ContextOptions::default())?;
    let mut loaded = load_model(&ctx, &args.model.model, args.model.request()?)?;
    let prompt = prompt_tokens(&args, &loaded)?;
    let stop_ids = match &loaded.tokenizer {
        Some(t) => t.stop_ids(&loaded.eos_ids),
        None => loaded.eos_ids.clone(),
    };
    let options = GenerateOptions {
        max_new_tokens: args.max_new_tokens,
        sampling: SamplingParams {
            temperature: args.temperature,
            top_k: args.top_k,
            top_p: args.top_p,
            seed: args.seed,
        },
        stop_ids,
    };
    let Loaded {
        model,
        tokenizer,
        load_ms,
        ..
    } = &mut loaded;
    let format = model.options.format;
    let mut assistant = args
        .assistant
        .as_ref()
        .map(|path| load_assistant(&ctx, path, model, format, !args.model.no_verify))
        .transpose()?;
    let mut stream = tokenizer.as_ref().map(TextStream::new);
    let mut stream_error = None;
    let json = args.json;
    let mut on_token = |id| {
        if let (false, Some(s)) = (json, stream.as_mut()) {
            match s.push(id) {
                Ok(Some(piece)) => {
                    print!("{piece}");
                    let _ = std::io::stdout().flush();
                }
                Ok(None) => {}
                Err(e) => {
                    stream_error = Some(e);
                    return false;
                }
            }
        }
        true
    };
    let (tokens, mut stats_json, summary) = match assistant.as_mut() {
        None => {
            let (tokens, stats) =
                pollster::block_on(generate(model, &ctx, &prompt, &options, &mut on_token))?;
            (tokens, serde_json::to_value(&stats)?, stats.summary())
        }
        Some(assistant) => {
            let spec = SpeculativeOptions {
                draft_tokens: args.draft_tokens,
                adaptive: args.adaptive_draft,
                trace: args.trace_drafts,
                capture_draft_logits: false,
            };
            let out = pollster::block_on(generate_speculative(
                model,
                assistant,
                &ctx,
                &prompt,
                &options,
                &spec,
                &mut on_token,
            ))?;
            let mut stats = serde_json::to_value(&out.stats)?;
            if args.trace_drafts {
                stats["draft_rounds"] = serde_json::to_value(&out.rounds)?;
            }
            (out.tokens, stats, out.stats.summary())
        }
    };
    if let Some(e) = stream_error {
        return Err(e.into());
    }
    let text = tokenizer.as_ref().map(|t| t.decode(&tokens)).transpose()?;
    if json {
        stats_json["load_ms"] = (*load_ms).into();
        stats_json["peak_rss_mb"] = peak_rss_mb().into();
        let out = serde_json::json!({ "tokens": tokens, "text": text, "stats": stats_json });
        println!("{out}");
    } else {
        if tokenizer.is_none() {
            println!(
                "{}",
                tokens
                    .iter()
                    .map(|t| t.to_string())
                    .collect::<Vec<_>>()
                    .join(" ")
            );
        } else {
            println!();
        }
        eprintln!("load {:.0} ms | {}", load_ms, summary);
    }
    Ok(())
}
