//! The demo's report: what the timed runs say (identical outputs, the comparison), printed
//! as text with a legend of its figures, or as one JSON object.

use super::args::DemoArgs;
use super::runs::{Timed, TimedRuns};
use anyhow::Result;
use wgemma::session::bench::timing::{compare, Comparison};
use wgemma::text::tokenizer::Tokenizer;

/// Token ids as text: the pair's tokenizer's decoding, or the ids themselves (the
/// synthetic pair has no tokenizer).
pub(super) struct ShownText<'a>(pub(super) Option<&'a Tokenizer>);

impl ShownText<'_> {
    /// The decoded text, where there is a tokenizer (the JSON's `text` fields).
    pub(super) fn text(&self, ids: &[u32]) -> Result<Option<String>> {
        Ok(self.0.map(|t| t.decode(ids)).transpose()?)
    }

    pub(super) fn of(&self, ids: &[u32]) -> Result<String> {
        Ok(self.text(ids)?.unwrap_or_else(|| {
            ids.iter()
                .map(|t| t.to_string())
                .collect::<Vec<_>>()
                .join(" ")
        }))
    }
}

/// What the timed runs say.
pub(super) struct Summary {
    /// Every plain run gave the warm-up's tokens.
    pub(super) stable: bool,
    /// Stable, and every speculative run gave its plain run's tokens.
    pub(super) identical: bool,
    pub(super) comparison: Comparison,
    /// The run whose plain speed is the median's: its stats and outputs are shown.
    pub(super) shown: usize,
}

impl Summary {
    pub(super) fn of(runs: &TimedRuns, warm_plain: &[u32]) -> Summary {
        let stable = runs.runs.iter().all(|r| r.plain == warm_plain);
        let identical = stable && runs.runs.iter().all(|r| r.plain == r.speculative);
        let m = runs.plain_tps.median();
        let distance = |r: &Timed| (r.plain_stats.decode_tokens_per_s - m).abs();
        let shown = (0..runs.runs.len())
            .min_by(|&a, &b| distance(&runs.runs[a]).total_cmp(&distance(&runs.runs[b])))
            .expect("at least one timed run");
        Summary {
            stable,
            identical,
            comparison: compare(&runs.plain_tps, &runs.spec_tps),
            shown,
        }
    }
}

/// The text report after the streamed plain run: the speculative text where it may
/// differ, the speeds and the verdict.
pub(super) fn print_speeds(
    args: &DemoArgs,
    runs: &TimedRuns,
    summary: &Summary,
    shown_text: &ShownText,
    tokens: usize,
) -> Result<()> {
    let greedy = args.temperature <= 0.0;
    let shown = &runs.runs[summary.shown];
    if !(greedy && summary.identical) {
        println!(
            "--- speculative decoding\n{}",
            shown_text.of(&shown.speculative)?.trim_end()
        );
    }
    println!(
        "--- decode speed, warmed up: median of {} runs each (min, max)",
        args.repetitions
    );
    println!("plain       | {} tok/s", runs.plain_tps.median_range());
    println!(
        "speculative | {} tok/s | acceptance {:.2}, {:.2} tok/round{}",
        runs.spec_tps.median_range(),
        shown.speculative_stats.acceptance_rate,
        shown.speculative_stats.tokens_per_round,
        if args.fixed_draft {
            format!(", {} drafts per round", args.draft_tokens)
        } else {
            format!(
                ", adaptive drafts ({} tokens by plain steps)",
                shown.speculative_stats.plain_steps
            )
        }
    );
    println!("speedup     | {}", summary.comparison.describe());
    println!(
        "prompt      | {} tok, ttft {:.1} ms",
        shown.plain_stats.prompt_tokens, shown.plain_stats.ttft_ms
    );
    if greedy && summary.identical {
        println!(
            "outputs identical: {tokens} tokens in every run (greedy speculative == plain greedy)"
        );
    }
    println!("{LEGEND}");
    Ok(())
}

/// What the report's figures mean, printed under them.
const LEGEND: &str = "\
(acceptance: the share of drafted tokens the target kept; tok/round: tokens one verify
 round commits, the kept drafts and the target's own; adaptive drafts: each round drafts
 as many tokens as the measured acceptance and costs make pay, plain steps where none do;
 ttft: time to the first token, the prompt's prefill included)";

/// The `--json` report: both outputs, their stats, every run's speed, the comparison.
pub(super) struct JsonReport<'a> {
    pub(super) adapter: String,
    pub(super) describe: &'a str,
    pub(super) prompt: &'a [u32],
    pub(super) draft_schedule: wgemma::generate::speculative::DraftSchedule,
}

impl JsonReport<'_> {
    pub(super) fn print(
        &self,
        args: &DemoArgs,
        runs: &TimedRuns,
        summary: &Summary,
        shown_text: &ShownText,
    ) -> Result<()> {
        let shown = &runs.runs[summary.shown];
        let out = serde_json::json!({
            "adapter": self.adapter,
            "model": self.describe,
            "prompt": self.prompt,
            "prompt_text": shown_text.text(self.prompt)?,
            "temperature": args.temperature,
            "draft_tokens": args.draft_tokens,
            "draft_schedule": self.draft_schedule,
            "identical": summary.identical,
            "repetitions": args.repetitions,
            "speedup": summary.comparison.ratio,
            "measurable": summary.comparison.measurable,
            "verdict": summary.comparison.describe(),
            "plain_decode_tokens_per_s": runs.plain_tps.json(),
            "speculative_decode_tokens_per_s": runs.spec_tps.json(),
            "plain": {
                "tokens": shown.plain, "text": shown_text.text(&shown.plain)?,
                "stats": shown.plain_stats
            },
            "speculative": {
                "tokens": shown.speculative, "text": shown_text.text(&shown.speculative)?,
                "stats": shown.speculative_stats
            },
        });
        println!("{out}");
        Ok(())
    }
}
