//! `wgemma demo`: MTP speculative decoding end to end with nothing to download. Loads the
//! trained pair shipped in the repository (`models/kjv-pair.wgemma`: a small Gemma 4 target
//! and its MTP drafter trained on the King James Bible, Q4, with its tokenizer; model card in
//! `models/README.md`), decodes a text prompt plainly and speculatively on whatever adapter
//! is present, prints both texts, their stats and the speedup, and checks that the greedy
//! outputs are identical (exit status 1 if not). `--synthetic` runs the random-weight
//! synthetic pair instead (token ids, no tokenizer).

use crate::load::{load_assistant, load_model, LoadRequest};
use anyhow::{bail, Context, Result};
use clap::Args;
use std::path::PathBuf;
use wgemma::gpu::{ContextOptions, GpuContext};
use wgemma::model::assistant::{parse_assistant_config, Assistant, AssistantOptions};
use wgemma::model::forward::LogitRows;
use wgemma::model::generate::{generate, GenerateOptions, GenerateStats};
use wgemma::model::sampling::SamplingParams;
use wgemma::model::speculative::{
    generate_speculative, DraftSchedule, SpeculativeOptions, SpeculativeStats, MAX_DRAFT_TOKENS,
};
use wgemma::model::synthetic::{SyntheticAssistant, SyntheticShape, SyntheticWeights};
use wgemma::model::target::{Model, ModelOptions};
use wgemma::model::tokenizer::Tokenizer;
use wgemma::model::weights::WeightFormat;
use wgemma::ops::opset::OpSet;

/// The shipped pair, found from the source tree (`./dev run`, `cargo run`).
pub const SHIPPED_PAIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../models/kjv-pair.wgemma");

/// The demo's prompt for the shipped pair (its text is in the training corpus' style).
const PROMPT_TEXT: &str = "And Jesus said unto them,";

/// The synthetic pair's prompt (token ids of its 4096-token vocabulary).
const SYNTHETIC_PROMPT: [u32; 8] = [2, 818, 5, 1207, 3301, 77, 2900, 1024];

#[derive(Args)]
pub struct DemoArgs {
    /// An artifact holding a target, its assistant and a tokenizer (`wgemma convert
    /// --assistant`); default: the pair shipped in models/.
    #[arg(long, value_name = "FILE", conflicts_with = "synthetic")]
    model: Option<PathBuf>,
    /// Prompt text (the shipped pair was trained on the King James Bible).
    #[arg(long, default_value = PROMPT_TEXT, conflicts_with = "synthetic")]
    prompt: String,
    #[arg(long, default_value_t = 64)]
    max_new_tokens: usize,
    /// Drafts per speculative round (1..=8; with the adaptive schedule, the first round's).
    #[arg(long, default_value_t = 3)]
    draft_tokens: usize,
    /// The adaptive schedule (the default): k in 0..=8 from the acceptance and the round
    /// costs measured on this device, plain pipelined steps when drafting does not pay.
    #[arg(long, conflicts_with = "fixed_draft")]
    adaptive_draft: bool,
    /// --draft-tokens drafts every round instead of the adaptive schedule.
    #[arg(long)]
    fixed_draft: bool,
    /// 0 = greedy (outputs checked identical); above 0 both runs sample with --seed, and
    /// speculative sampling keeps the distribution, not the exact tokens.
    #[arg(long, default_value_t = 0.0)]
    temperature: f32,
    /// Sampling seed; with --synthetic also the seed of the synthetic weights.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// The random-weight synthetic pair (tiny shape; token ids) instead of the shipped one.
    #[arg(long)]
    synthetic: bool,
    /// Weights of the synthetic pair: q4 (group 32), q4g64, q4g128, f16 or f32.
    #[arg(long, default_value = "q4", requires = "synthetic")]
    dtype: String,
    /// One JSON object (both outputs, their stats, the speedup and the comparison).
    #[arg(long)]
    json: bool,
}

struct Pair {
    target: Model,
    assistant: Assistant,
    tokenizer: Option<Tokenizer>,
    stop_ids: Vec<u32>,
    prompt: Vec<u32>,
    describe: String,
}

fn shipped(ctx: &GpuContext, args: &DemoArgs) -> Result<Pair> {
    let path = args
        .model
        .clone()
        .unwrap_or_else(|| PathBuf::from(SHIPPED_PAIR));
    if !path.exists() {
        bail!(
            "{}: expected the model artifact (the shipped pair is models/kjv-pair.wgemma in the \
             source tree; elsewhere pass --model FILE)",
            path.display()
        );
    }
    let request = LoadRequest {
        dtype: None,
        options: ModelOptions {
            max_context: 4096,
            ..ModelOptions::default()
        },
        verify: true,
        allow_extra_tensors: false,
    };
    let loaded = load_model(ctx, &path, request)?;
    let tokenizer = loaded.tokenizer.with_context(|| {
        format!(
            "{}: expected an artifact with a tokenizer, found none",
            path.display()
        )
    })?;
    let format = loaded.model.options.format;
    let assistant = load_assistant(ctx, &path, &loaded.model, format, true)?;
    let prompt = tokenizer.encode_prompt(&args.prompt)?;
    let c = &loaded.model.spec.config;
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
        stop_ids: tokenizer.stop_ids(&loaded.eos_ids),
        target: loaded.model,
        assistant,
        tokenizer: Some(tokenizer),
        prompt,
        describe,
    })
}

fn synthetic(ctx: &GpuContext, args: &DemoArgs) -> Result<Pair> {
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
    spec.check_sizes(&crate::load::size_limits(ctx, &options))
        .context("the synthetic pair at --max-new-tokens")?;
    let target = Model::load(
        ctx,
        &SyntheticWeights { seed: args.seed },
        spec,
        options,
        &mut |_, _| {},
    )?;
    let source = SyntheticAssistant {
        target_seed: args.seed,
        seed: args.seed.wrapping_add(1),
    };
    let assistant = Assistant::load(
        ctx,
        &source,
        parse_assistant_config(&source.config_json())?,
        &target,
        &OpSet::with_mtp(),
        AssistantOptions { format },
    )?;
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

/// Decode tok/s of the speculative run over the plain run's.
fn speedup(plain: &GenerateStats, speculative: &SpeculativeStats) -> f64 {
    if plain.decode_tokens_per_s > 0.0 {
        speculative.base.decode_tokens_per_s / plain.decode_tokens_per_s
    } else {
        0.0
    }
}

pub fn run(args: DemoArgs) -> Result<()> {
    if !(1..=MAX_DRAFT_TOKENS).contains(&args.draft_tokens) {
        bail!(
            "--draft-tokens: expected 1..={MAX_DRAFT_TOKENS}, found {}",
            args.draft_tokens
        );
    }
    if args.max_new_tokens == 0 {
        bail!("--max-new-tokens: expected at least 1, found 0");
    }
    let ctx = GpuContext::new_blocking(ContextOptions::default())?;
    let mut pair = if args.synthetic {
        synthetic(&ctx, &args)?
    } else {
        shipped(&ctx, &args)?
    };
    // Before any buffer is sized by them: the prompt and the budget must fit the context.
    wgemma::session::check_budget(
        pair.prompt.len(),
        args.max_new_tokens,
        pair.target.options.max_context,
    )
    .context("--max-new-tokens")?;
    let greedy = args.temperature <= 0.0;
    let generate_options = GenerateOptions {
        max_new_tokens: args.max_new_tokens,
        sampling: SamplingParams {
            temperature: args.temperature.max(0.0),
            seed: args.seed,
            ..SamplingParams::default()
        },
        stop_ids: pair.stop_ids.clone(),
    };
    let spec_options = SpeculativeOptions {
        draft_tokens: args.draft_tokens,
        schedule: if args.fixed_draft {
            DraftSchedule::Fixed
        } else {
            DraftSchedule::Adaptive
        },
        trace: false,
        capture_draft_logits: false,
    };
    let Pair {
        target,
        assistant,
        prompt,
        ..
    } = &mut pair;
    // A warm-up of each builds every plan and pipeline, so the timed runs compare decoding:
    // long enough for a full round of k drafts (a verify of k + 1 rows) and the shorter
    // rounds at the end of the token budget.
    let warm = GenerateOptions {
        max_new_tokens: (2 * args.draft_tokens + 4).min(args.max_new_tokens),
        ..generate_options.clone()
    };
    pollster::block_on(generate(target, &ctx, prompt, &warm, &mut |_| true))?;
    // The adaptive schedule may verify any k + 1 rows: build every verify plan now.
    for m in 1..=target.options.max_verify_rows.min(MAX_DRAFT_TOKENS + 1) {
        target.plan(&ctx, m, LogitRows::All)?;
    }
    pollster::block_on(generate_speculative(
        target,
        assistant,
        &ctx,
        prompt,
        &warm,
        &spec_options,
        &mut |_| true,
    ))?;

    let (plain_tokens, plain) = pollster::block_on(generate(
        target,
        &ctx,
        prompt,
        &generate_options,
        &mut |_| true,
    ))?;
    let speculative = pollster::block_on(generate_speculative(
        target,
        assistant,
        &ctx,
        prompt,
        &generate_options,
        &spec_options,
        &mut |_| true,
    ))?;
    let identical = plain_tokens == speculative.tokens;
    let text = |ids: &[u32]| -> Result<Option<String>> {
        Ok(pair.tokenizer.as_ref().map(|t| t.decode(ids)).transpose()?)
    };
    let (prompt_text, plain_text, spec_text) = (
        text(&pair.prompt)?,
        text(&plain_tokens)?,
        text(&speculative.tokens)?,
    );
    let gain = speedup(&plain, &speculative.stats);
    if args.json {
        let out = serde_json::json!({
            "adapter": ctx.describe(),
            "model": pair.describe,
            "prompt": pair.prompt,
            "prompt_text": prompt_text,
            "temperature": args.temperature,
            "draft_tokens": args.draft_tokens,
            "draft_schedule": spec_options.schedule,
            "identical": identical,
            "speedup": gain,
            "plain": { "tokens": plain_tokens, "text": plain_text, "stats": plain },
            "speculative": {
                "tokens": speculative.tokens, "text": spec_text, "stats": speculative.stats
            },
        });
        println!("{out}");
    } else {
        println!("wgemma demo on {}", ctx.describe());
        println!("{}", pair.describe);
        let show = |label: &str, text: &Option<String>, ids: &[u32]| {
            let body = text.clone().unwrap_or_else(|| {
                ids.iter()
                    .map(|t| t.to_string())
                    .collect::<Vec<_>>()
                    .join(" ")
            });
            println!("--- {label}\n{}", body.trim_end());
        };
        show("prompt", &prompt_text, &pair.prompt);
        show("plain", &plain_text, &plain_tokens);
        if !(greedy && identical) {
            show("speculative", &spec_text, &speculative.tokens);
        }
        println!("---");
        println!("plain       | {}", plain.summary());
        println!("speculative | {}", speculative.stats.summary());
        if args.fixed_draft {
            println!(
                "speedup     | x{gain:.2} decode tok/s with {} drafts per round",
                args.draft_tokens
            );
        } else {
            println!(
                "speedup     | x{gain:.2} decode tok/s, adaptive drafts (k in 0..=8 from the \
                 measured acceptance and costs; {} plain steps)",
                speculative.stats.plain_steps
            );
        }
        if greedy && identical {
            println!(
                "outputs identical: {} tokens (greedy speculative == plain greedy)",
                plain_tokens.len()
            );
        }
    }
    if greedy && !identical {
        let first = plain_tokens
            .iter()
            .zip(&speculative.tokens)
            .position(|(a, b)| a != b)
            .unwrap_or(plain_tokens.len().min(speculative.tokens.len()));
        bail!(
            "speculative output differs from plain greedy output at token {first}: \
             plain {:?}, speculative {:?}",
            plain_tokens,
            speculative.tokens
        );
    }
    Ok(())
}
