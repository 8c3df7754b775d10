//! `wgemma demo`: MTP speculative decoding end to end with nothing to download. Loads the
//! trained pair shipped in the repository (`models/kjv-pair.wgemma`: a small Gemma 4 target
//! and its MTP drafter trained on the King James Bible, Q4, with its tokenizer; model card in
//! `models/README.md`) and decodes a text prompt plainly (streamed: this first run also
//! compiles the GPU pipelines) and speculatively on whatever adapter is present. Then it
//! times both, warmed up, several times each and prints the medians with their spread; a
//! difference inside the spread is "no measurable speedup". The greedy outputs are checked
//! identical (exit status 1 if not). `--synthetic` runs the random-weight synthetic pair
//! instead (token ids, no tokenizer).

mod args;
mod pair;
mod report;
mod runs;

pub use args::DemoArgs;

use anyhow::{bail, Context, Result};
use pair::{shipped, synthetic, Pair};
use report::{print_speeds, JsonReport, ShownText, Summary};
use runs::{Runner, TimedRuns};

pub fn run(args: DemoArgs) -> Result<()> {
    args.check()?;
    let ctx = crate::gpu_args::open_context(crate::gpu_args::context_options())?;
    let text_out = !args.json;
    if text_out {
        println!("wgemma demo on {}", ctx.describe());
        eprintln!("loading the pair ...");
    }
    let mut pair = if args.synthetic {
        synthetic(&ctx, &args)?
    } else {
        shipped(&ctx, &args)?
    };
    // Before any buffer is sized by them: the prompt and the budget must fit the context.
    wgemma::session::check_budget(
        pair.prompt.len(),
        args.max_new_tokens,
        pair.target.model().options.max_context,
    )
    .context("--max-new-tokens")?;
    let Pair {
        target,
        assistant,
        prompt,
        tokenizer,
        describe,
        stop_ids,
    } = &mut pair;
    let runner = Runner::new(&ctx, &args, prompt, stop_ids);
    let shown_text = ShownText(tokenizer.as_deref());
    if text_out {
        println!("{describe}");
        println!("--- prompt\n{}", shown_text.of(prompt)?.trim_end());
        println!("--- plain decoding (streamed; this first run also compiles the GPU pipelines)");
    }
    let warm_plain = runner.warm_up(target, assistant, tokenizer.as_deref(), text_out)?;
    let runs = runner.timed_runs(target, assistant, args.repetitions, text_out)?;
    let summary = Summary::of(&runs, &warm_plain);
    if args.json {
        let report = JsonReport {
            adapter: ctx.describe(),
            describe,
            prompt,
            draft_schedule: runner.speculative.schedule,
        };
        report.print(&args, &runs, &summary, &shown_text)?;
    } else {
        print_speeds(&args, &runs, &summary, &shown_text, warm_plain.len())?;
    }
    if args.temperature <= 0.0 {
        check_greedy_outputs(&runs, &summary)?;
    }
    Ok(())
}

/// Greedy decoding is deterministic: every run, warm-up included, gives the same tokens.
fn check_greedy_outputs(runs: &TimedRuns, summary: &Summary) -> Result<()> {
    if let Some(r) = runs.runs.iter().find(|r| r.plain != r.speculative) {
        let (plain, speculative) = (&r.plain, &r.speculative);
        let first = plain
            .iter()
            .zip(speculative)
            .position(|(x, y)| x != y)
            .unwrap_or(plain.len().min(speculative.len()));
        bail!(
            "speculative output differs from plain greedy output at token {first}: \
             plain {plain:?}, speculative {speculative:?}"
        );
    }
    if !summary.stable {
        bail!("plain greedy output differs between runs of the same prompt");
    }
    Ok(())
}
