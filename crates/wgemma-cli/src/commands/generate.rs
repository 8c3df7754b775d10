//! `wgemma logits` and `wgemma generate`, and the session loading and chat warning that
//! `chat` shares.

use crate::args::{
    check_budget, check_exists, no_penalty_when_drafting, parse_ids, DraftArgs, ModelArgs,
    PromptArgs, Sampling, SamplingArgs,
};
use crate::load::load_model;
use crate::progress::peak_rss_mb;
use anyhow::{bail, Result};
use clap::Args;
use std::io::Write as _;
use wgemma::gpu::GpuContext;
use wgemma::model::target::Want;
use wgemma::session::{ChatMessage, GenerateRequest, GenerateResult, Session, TokenEvent};

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
    args.model.warn_unused(None);
    check_budget(ids.len(), 0, args.model.context)?;
    let ctx = GpuContext::new_blocking(crate::gpu_args::context_options())?;
    let mut loaded = load_model(&ctx, &args.model.model, request)?;
    let want = if args.all_positions {
        Want::AllLogits
    } else {
        Want::LastLogits
    };
    let out = pollster::block_on(loaded.target.state.forward(&ctx, &ids, want))?;
    let vocab = loaded.target.state.model().spec.config.vocab_size;
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
    #[command(flatten)]
    prompt: PromptArgs,
    /// Wrap the prompt in the model's chat template (chat_template.jinja,
    /// tokenizer_config.json or a GGUF's tokenizer.chat_template; Gemma 4's turn format
    /// when it has none) as one user turn. `wgemma chat` holds a conversation.
    #[arg(long)]
    chat: bool,
    /// A system prompt before the user turn (with --chat).
    #[arg(long, requires = "chat")]
    system: Option<String>,
    /// Tokens to generate at most.
    #[arg(
        short = 'n',
        long,
        visible_alias = "n-predict",
        default_value_t = 128,
        value_name = "N"
    )]
    max_new_tokens: usize,
    #[command(flatten)]
    sampling: SamplingArgs,
    /// Text that ends the generation (cut before it); repeat for several.
    #[arg(long, value_name = "TEXT")]
    stop: Vec<String>,
    /// One JSON object with tokens, text and stats instead of streamed text.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    draft: DraftArgs,
    /// Add every round's drafts to the JSON stats (`draft_rounds`).
    #[arg(long, requires = "assistant")]
    trace_drafts: bool,
}

/// The chat warning: a model without its own chat template is prompted in Gemma 4's turn
/// format, which only a chat-tuned Gemma 4 answers.
pub fn warn_without_chat_template(session: &Session) -> Result<()> {
    if !session.model_info()?.has_chat_template {
        eprintln!(
            "warning: this model has no chat template; using Gemma 4's turn format, which \
             only a chat-tuned (instruction-tuned) Gemma 4 answers. A base or small model \
             (such as the shipped demo pair) will just continue the text."
        );
    }
    Ok(())
}

/// Loads `model` (and the assistant) into a session on a new context.
pub fn load_session(model: &ModelArgs, draft: &DraftArgs) -> Result<(Session, f64)> {
    let load_request = model.request()?;
    if let Some(path) = &draft.assistant {
        check_exists("--assistant", path)?;
    }
    model.warn_unused(draft.assistant.as_deref());
    let ctx = crate::gpu_args::open_context(crate::gpu_args::context_options())?;
    let loaded = load_model(&ctx, &model.model, load_request)?;
    let load_ms = loaded.target.load_ms;
    let session = loaded.into_session(
        ctx,
        &model.model,
        draft.assistant.as_deref(),
        !model.no_verify,
    )?;
    Ok((session, load_ms))
}

pub fn run_generate(args: GenerateArgs) -> Result<()> {
    // Everything the flags alone decide is checked before the GPU or the model is touched.
    args.model.request()?;
    if args.trace_drafts && !args.json {
        bail!("--trace-drafts: expected --json as well (the drafts are reported in its stats), found text output");
    }
    args.draft.check()?;
    let given_text = args.prompt.prompt.is_some() || args.prompt.file.is_some();
    let mut sampling = args.sampling.resolve(given_text)?;
    if args.draft.assistant.is_some() {
        no_penalty_when_drafting(&mut sampling, &args.sampling);
    }
    if !given_text && args.prompt.prompt_ids.is_none() {
        bail!("expected one of --prompt TEXT, --file FILE or --prompt-ids IDS, found none");
    }
    if args.chat && !given_text {
        bail!(
            "--chat: expected --prompt TEXT (it wraps text in the chat format), found --prompt-ids"
        );
    }
    // Read last among the flag checks: it may wait on standard input.
    let text = args.prompt.text()?;
    let prompt_ids = args
        .prompt
        .prompt_ids
        .as_deref()
        .map(parse_ids)
        .transpose()?;
    // A text prompt is at least one token (BOS).
    let min_prompt = prompt_ids.as_ref().map_or(1, Vec::len);
    check_budget(min_prompt, args.max_new_tokens, args.model.context)?;
    let (prompt, messages) = match (&args.system, &text) {
        (Some(system), Some(text)) => (
            None,
            Some(vec![
                ChatMessage::new("system", system),
                ChatMessage::new("user", text),
            ]),
        ),
        _ => (text.clone(), None),
    };
    let p = sampling.params;
    let request = GenerateRequest {
        chat: args.chat && messages.is_none(),
        prompt,
        messages,
        prompt_ids,
        tools: Vec::new(),
        template_kwargs: Default::default(),
        max_new_tokens: args.max_new_tokens,
        temperature: p.temperature,
        top_k: p.top_k,
        top_p: p.top_p,
        seed: p.seed,
        repeat_penalty: p.repeat_penalty,
        stop: args.stop.clone(),
        speculative: args.draft.assistant.is_some(),
        draft_tokens: args.draft.draft_tokens,
        adaptive_draft: !args.draft.fixed_draft,
        trace_drafts: args.trace_drafts,
        keep_tool_markers: false,
    };
    let (mut session, load_ms) = load_session(&args.model, &args.draft)?;
    if args.chat {
        warn_without_chat_template(&session)?;
    }
    if !args.stop.is_empty() && session.tokenizer().is_none() {
        eprintln!("warning: --stop is unused: the model has no tokenizer to decode text with");
    }
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
    // The model's context: --context, or the model's positions when it asked for more.
    let context = session.model_info()?.context;
    check_budget(prompt.len(), args.max_new_tokens, context)?;
    let json = args.json;
    let mut on_token = |t: &TokenEvent| {
        if let (false, Some(piece)) = (json, &t.text) {
            print!("{piece}");
            let _ = std::io::stdout().flush();
        }
        true
    };
    let out = pollster::block_on(session.generate(&request, &mut on_token))?;
    if json {
        print_json(&out, &args, load_ms, &sampling)
    } else {
        if session.tokenizer().is_none() {
            let ids: Vec<String> = out.tokens.iter().map(|t| t.to_string()).collect();
            println!("{}", ids.join(" "));
        } else {
            println!("{}", out.unstreamed_text);
        }
        eprintln!(
            "{}",
            stats_line(load_ms, &out.loop_stats.summary(), &sampling)
        );
        Ok(())
    }
}

/// `--json`'s line: the tokens, the text and the stats with the load and the sampling.
fn print_json(
    out: &GenerateResult,
    args: &GenerateArgs,
    load_ms: f64,
    sampling: &Sampling,
) -> Result<()> {
    let mut stats = out.loop_stats.to_json();
    if args.trace_drafts {
        stats["draft_rounds"] = serde_json::to_value(&out.draft_rounds)?;
    }
    stats["load_ms"] = load_ms.into();
    stats["peak_rss_mb"] = peak_rss_mb().into();
    stats["seed"] = sampling.params.seed.into();
    stats["temperature"] = sampling.params.temperature.into();
    let line = serde_json::json!({ "tokens": out.tokens, "text": out.text, "stats": stats });
    println!("{line}");
    Ok(())
}

/// The stats after a generation, saying what the figures are: one run, the process's
/// first, so its speed includes compiling the pipelines it used.
pub fn stats_line(load_ms: f64, summary: &str, sampling: &Sampling) -> String {
    let p = &sampling.params;
    let how = if p.is_greedy() {
        "greedy".to_string()
    } else {
        format!(
            "temp {} top-k {} top-p {} repeat-penalty {} seed {}{}",
            p.temperature,
            p.top_k,
            p.top_p,
            p.repeat_penalty,
            p.seed,
            if sampling.seed_chosen {
                " (pass -s to repeat)"
            } else {
                ""
            }
        )
    };
    format!(
        "load {load_ms:.0} ms | {summary} | {how}\n(one cold run: its speed includes compiling \
         the GPU pipelines on first use; `wgemma bench -m MODEL` measures warmed-up speed)"
    )
}
