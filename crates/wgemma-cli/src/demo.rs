//! `wgemma demo`: MTP speculative decoding end to end with nothing to download. Synthesises
//! a small deterministic random Gemma 4 target (the `tiny` synthetic shape) and a
//! centroid-head assistant for it in memory, decodes the same prompt plainly and
//! speculatively (greedy) on whatever adapter is present, checks that the two outputs are
//! identical (exit status 1 if not) and prints both stats lines.

use anyhow::{bail, Result};
use clap::Args;
use wgemma::gpu::{ContextOptions, GpuContext};
use wgemma::model::assistant::{parse_assistant_config, Assistant, AssistantOptions};
use wgemma::model::generate::{generate, GenerateOptions};
use wgemma::model::sampling::SamplingParams;
use wgemma::model::speculative::{generate_speculative, SpeculativeOptions};
use wgemma::model::synthetic::{SyntheticAssistant, SyntheticShape, SyntheticWeights};
use wgemma::model::target::{Model, ModelOptions};
use wgemma::model::weights::WeightFormat;
use wgemma::ops::opset::OpSet;

#[derive(Args)]
pub struct DemoArgs {
    #[arg(long, default_value_t = 64)]
    max_new_tokens: usize,
    /// Drafts per speculative round (1..=8).
    #[arg(long, default_value_t = 2)]
    draft_tokens: usize,
    /// HF's heuristic schedule: +2 drafts after a fully accepted round, -1 otherwise.
    #[arg(long)]
    adaptive_draft: bool,
    /// Weights: q4 (group 32), q4g64, q4g128, f16 or f32.
    #[arg(long, default_value = "q4")]
    dtype: String,
    /// Seed of the synthetic weights.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// One JSON object (both outputs' stats and the comparison) instead of text.
    #[arg(long)]
    json: bool,
}

/// The demo's prompt (token ids of the 4096-token synthetic vocabulary).
const PROMPT: [u32; 8] = [2, 818, 5, 1207, 3301, 77, 2900, 1024];

pub fn run(args: DemoArgs) -> Result<()> {
    let ctx = GpuContext::new_blocking(ContextOptions::default())?;
    let format = WeightFormat::parse(&args.dtype)?;
    let shape = SyntheticShape::Tiny;
    let spec = shape.spec();
    let c = &spec.config;
    let describe = format!(
        "synthetic Gemma 4 target ({} layers, hidden {}, vocab {}) + MTP assistant (4 layers, \
         centroid head 2048 -> 32), {}, seed {}",
        c.num_hidden_layers, c.hidden_size, c.vocab_size, args.dtype, args.seed
    );
    let options = ModelOptions {
        format,
        max_context: PROMPT.len() + args.max_new_tokens + 16,
        ..ModelOptions::default()
    };
    let mut target = Model::load(
        &ctx,
        &SyntheticWeights { seed: args.seed },
        spec,
        options,
        &mut |_, _| {},
    )?;
    let source = SyntheticAssistant {
        target_seed: args.seed,
        seed: args.seed.wrapping_add(1),
    };
    let mut assistant = Assistant::load(
        &ctx,
        &source,
        parse_assistant_config(&source.config_json())?,
        &target,
        &OpSet::with_mtp(),
        AssistantOptions { format },
    )?;
    let generate_options = GenerateOptions {
        max_new_tokens: args.max_new_tokens,
        sampling: SamplingParams::default(),
        stop_ids: Vec::new(),
    };
    let spec_options = SpeculativeOptions {
        draft_tokens: args.draft_tokens,
        adaptive: args.adaptive_draft,
        trace: false,
        capture_draft_logits: false,
    };
    // A warm-up of each builds every plan and pipeline, so the timed runs compare decoding.
    let warm = GenerateOptions {
        max_new_tokens: 4.min(args.max_new_tokens),
        ..generate_options.clone()
    };
    pollster::block_on(generate(&mut target, &ctx, &PROMPT, &warm, &mut |_| true))?;
    pollster::block_on(generate_speculative(
        &mut target,
        &mut assistant,
        &ctx,
        &PROMPT,
        &warm,
        &spec_options,
        &mut |_| true,
    ))?;

    let (plain_tokens, plain) = pollster::block_on(generate(
        &mut target,
        &ctx,
        &PROMPT,
        &generate_options,
        &mut |_| true,
    ))?;
    let speculative = pollster::block_on(generate_speculative(
        &mut target,
        &mut assistant,
        &ctx,
        &PROMPT,
        &generate_options,
        &spec_options,
        &mut |_| true,
    ))?;
    let identical = plain_tokens == speculative.tokens;
    if args.json {
        let out = serde_json::json!({
            "adapter": ctx.describe(),
            "model": describe,
            "prompt": PROMPT,
            "identical": identical,
            "plain": { "tokens": plain_tokens, "stats": plain },
            "speculative": { "tokens": speculative.tokens, "stats": speculative.stats },
        });
        println!("{out}");
    } else {
        println!("wgemma demo on {}", ctx.describe());
        println!("{describe}");
        println!("plain       | {}", plain.summary());
        println!("speculative | {}", speculative.stats.summary());
        if identical {
            println!(
                "outputs identical: {} tokens (greedy speculative == plain greedy)",
                plain_tokens.len()
            );
        }
    }
    if !identical {
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
