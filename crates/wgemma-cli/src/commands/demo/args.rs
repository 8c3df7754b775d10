//! `wgemma demo`'s flags, its prompts and the checks of the flags alone.

use crate::args::DEFAULT_DRAFT_TOKENS;
use anyhow::{bail, Result};
use clap::Args;
use std::path::PathBuf;
use wgemma::generate::speculative::MAX_DRAFT_TOKENS;

/// The shipped pair, found from the source tree (`./dev run`, `cargo run`).
pub(super) const SHIPPED_PAIR: &str =
    concat!(env!("CARGO_MANIFEST_DIR"), "/../../models/kjv-pair.wgemma");

/// The demo's prompt for the shipped pair (its text is in the training corpus' style).
const PROMPT_TEXT: &str = "And Jesus said unto them,";

/// The synthetic pair's prompt (token ids of its 4096-token vocabulary).
pub(super) const SYNTHETIC_PROMPT: [u32; 8] = [2, 818, 5, 1207, 3301, 77, 2900, 1024];

#[derive(Args)]
pub struct DemoArgs {
    /// An artifact holding a target, its assistant and a tokenizer (`wgemma convert
    /// --assistant`); default: the pair shipped in models/.
    #[arg(short = 'm', long, value_name = "FILE", conflicts_with = "synthetic")]
    pub(super) model: Option<PathBuf>,
    /// Prompt text (the shipped pair was trained on the King James Bible).
    #[arg(short = 'p', long, default_value = PROMPT_TEXT, conflicts_with = "synthetic")]
    pub(super) prompt: String,
    /// Tokens to generate in each run.
    #[arg(short = 'n', long, visible_alias = "n-predict", default_value_t = 64)]
    pub(super) max_new_tokens: usize,
    /// Timed runs of each decode after the warm-up (the median and range are printed).
    #[arg(short = 'r', long, default_value_t = 5, value_name = "N")]
    pub(super) repetitions: usize,
    /// Drafts per speculative round (1..=8; with the adaptive schedule, the first round's).
    #[arg(long, default_value_t = DEFAULT_DRAFT_TOKENS)]
    pub(super) draft_tokens: usize,
    /// The adaptive schedule (the default): k in 0..=8 from the acceptance and the round
    /// costs measured on this device, plain pipelined steps when drafting does not pay.
    #[arg(long, conflicts_with = "fixed_draft")]
    pub(super) adaptive_draft: bool,
    /// --draft-tokens drafts every round instead of the adaptive schedule.
    #[arg(long)]
    pub(super) fixed_draft: bool,
    /// 0 = greedy, the default here (outputs checked identical); above 0 both runs sample
    /// with --seed, and speculative sampling keeps the distribution, not the exact tokens.
    #[arg(
        short = 't',
        long = "temp",
        visible_alias = "temperature",
        default_value_t = 0.0
    )]
    pub(super) temperature: f32,
    /// Sampling seed; with --synthetic also the seed of the synthetic weights.
    #[arg(short = 's', long, default_value_t = 0)]
    pub(super) seed: u64,
    /// The random-weight synthetic pair (tiny shape; token ids) instead of the shipped one.
    #[arg(long)]
    pub(super) synthetic: bool,
    /// Weights of the synthetic pair: q4 (group 32), q4g64, q4g128, f16 or f32.
    #[arg(long, default_value = "q4", requires = "synthetic")]
    pub(super) dtype: String,
    /// One JSON object (both outputs, their stats, every run's speed, the comparison).
    #[arg(long)]
    pub(super) json: bool,
}

impl DemoArgs {
    /// Refuses what no run could do, before the GPU opens; warns about what does nothing.
    pub(super) fn check(&self) -> Result<()> {
        if self.repetitions == 0 {
            bail!("--repetitions: expected at least 1 timed run, found 0");
        }
        if !(1..=MAX_DRAFT_TOKENS).contains(&self.draft_tokens) {
            bail!(
                "--draft-tokens: expected 1..={MAX_DRAFT_TOKENS}, found {}",
                self.draft_tokens
            );
        }
        if self.max_new_tokens == 0 {
            bail!("--max-new-tokens: expected at least 1, found 0");
        }
        // Greedy decoding draws nothing: the seed would only matter to --synthetic's weights.
        if self.seed != 0 && self.temperature <= 0.0 && !self.synthetic {
            eprintln!("warning: --seed is unused: greedy decoding (-t 0) draws nothing");
        }
        Ok(())
    }
}
