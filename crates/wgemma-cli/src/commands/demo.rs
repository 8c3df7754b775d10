//! `wgemma demo`: MTP speculative decoding end to end with nothing to download. Loads the
//! trained pair shipped in the repository (`models/kjv-pair.wgemma`: a small Gemma 4 target
//! and its MTP drafter trained on the King James Bible, Q4, with its tokenizer; model card in
//! `models/README.md`) and decodes a text prompt plainly (streamed: this first run also
//! compiles the GPU pipelines) and speculatively on whatever adapter is present. Then it
//! times both, warmed up, several times each and prints the medians with their spread; a
//! difference inside the spread is "no measurable speedup". The greedy outputs are checked
//! identical (exit status 1 if not). `--synthetic` runs the random-weight synthetic pair
//! instead (token ids, no tokenizer).

use crate::args::{DEFAULT_DRAFT_TOKENS, DEFAULT_PREFILL_CHUNK};
use crate::load::{load_assistant, load_model, LoadRequest};
use crate::progress::host_memory_bytes;
use anyhow::{bail, Context, Result};
use clap::Args;
use std::io::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use wgemma::formats::synthetic::SyntheticShape;
use wgemma::generate::plain::{generate, GenerateOptions, GenerateStats};
use wgemma::generate::sampling::SamplingParams;
use wgemma::generate::speculative::{
    generate_speculative, DraftSchedule, SpeculativeOptions, SpeculativeOutput, SpeculativeStats,
    MAX_DRAFT_TOKENS,
};
use wgemma::gpu::GpuContext;
use wgemma::model::assistant::Assistant;
use wgemma::model::forward::LogitRows;
use wgemma::model::state::KvState;
use wgemma::model::target::ModelOptions;
use wgemma::model::weights::WeightFormat;
use wgemma::session::bench::timing::{compare, Samples};
use wgemma::session::{load_target, AssistantFrom, LoadHooks, LoadSource, Step};
use wgemma::text::tokenizer::Tokenizer;

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
    #[arg(short = 'm', long, value_name = "FILE", conflicts_with = "synthetic")]
    model: Option<PathBuf>,
    /// Prompt text (the shipped pair was trained on the King James Bible).
    #[arg(short = 'p', long, default_value = PROMPT_TEXT, conflicts_with = "synthetic")]
    prompt: String,
    /// Tokens to generate in each run.
    #[arg(short = 'n', long, visible_alias = "n-predict", default_value_t = 64)]
    max_new_tokens: usize,
    /// Timed runs of each decode after the warm-up (the median and range are printed).
    #[arg(short = 'r', long, default_value_t = 5, value_name = "N")]
    repetitions: usize,
    /// Drafts per speculative round (1..=8; with the adaptive schedule, the first round's).
    #[arg(long, default_value_t = DEFAULT_DRAFT_TOKENS)]
    draft_tokens: usize,
    /// The adaptive schedule (the default): k in 0..=8 from the acceptance and the round
    /// costs measured on this device, plain pipelined steps when drafting does not pay.
    #[arg(long, conflicts_with = "fixed_draft")]
    adaptive_draft: bool,
    /// --draft-tokens drafts every round instead of the adaptive schedule.
    #[arg(long)]
    fixed_draft: bool,
    /// 0 = greedy, the default here (outputs checked identical); above 0 both runs sample
    /// with --seed, and speculative sampling keeps the distribution, not the exact tokens.
    #[arg(
        short = 't',
        long = "temp",
        visible_alias = "temperature",
        default_value_t = 0.0
    )]
    temperature: f32,
    /// Sampling seed; with --synthetic also the seed of the synthetic weights.
    #[arg(short = 's', long, default_value_t = 0)]
    seed: u64,
    /// The random-weight synthetic pair (tiny shape; token ids) instead of the shipped one.
    #[arg(long)]
    synthetic: bool,
    /// Weights of the synthetic pair: q4 (group 32), q4g64, q4g128, f16 or f32.
    #[arg(long, default_value = "q4", requires = "synthetic")]
    dtype: String,
    /// One JSON object (both outputs, their stats, every run's speed, the comparison).
    #[arg(long)]
    json: bool,
}

struct Pair {
    target: KvState,
    assistant: Assistant,
    tokenizer: Option<Arc<Tokenizer>>,
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
            "{}: no such file (expected the model artifact; the shipped pair is \
             models/kjv-pair.wgemma in the source tree, elsewhere pass --model FILE)",
            path.display()
        );
    }
    let request = LoadRequest {
        dtype: None,
        options: ModelOptions {
            max_context: 4096,
            prefill_chunk: DEFAULT_PREFILL_CHUNK,
            ..ModelOptions::default()
        },
        verify: true,
        allow_extra_tensors: false,
    };
    let loaded = load_model(ctx, &path, request)?;
    let text = loaded.target.text;
    let tokenizer = text.tokenizer.with_context(|| {
        format!(
            "{}: expected an artifact with a tokenizer, found none",
            path.display()
        )
    })?;
    let target = loaded.target.state;
    let format = target.model().options.format;
    let assistant = load_assistant(ctx, &path, &target, true)?;
    let prompt = tokenizer.encode_prompt(&args.prompt)?;
    let c = &target.model().spec.config;
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
        stop_ids: tokenizer.stop_ids(&text.eos_ids),
        target,
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
    let source = LoadSource::Synthetic {
        shape: SyntheticShape::Tiny,
        seed: args.seed,
    };
    let hooks = LoadHooks {
        format: Some(format),
        options,
        check_sizes: true,
        host_memory_bytes: host_memory_bytes(),
        place: Some(Box::new(|step| {
            (step == Step::Sizes).then(|| "the synthetic pair at --max-new-tokens".to_string())
        })),
        ..LoadHooks::default()
    };
    let target = load_target(ctx, source, hooks)?.state;
    let from = AssistantFrom::Synthetic {
        target_seed: args.seed,
        seed: args.seed.wrapping_add(1),
    };
    let assistant = wgemma::session::load_assistant(ctx, &target, from, LoadHooks::default())?;
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

/// Prints a generation's text as its tokens arrive: the decoded prefix grows, and what
/// it adds is printed (nothing while a multi-byte character is incomplete). Without a
/// tokenizer, the ids.
struct Streamer<'a> {
    tokenizer: Option<&'a Tokenizer>,
    tokens: Vec<u32>,
    shown: String,
}

impl<'a> Streamer<'a> {
    fn new(tokenizer: Option<&'a Tokenizer>) -> Streamer<'a> {
        Streamer {
            tokenizer,
            tokens: Vec::new(),
            shown: String::new(),
        }
    }

    fn push(&mut self, id: u32) {
        self.tokens.push(id);
        let mut out = std::io::stdout();
        match self.tokenizer {
            None => {
                let _ = write!(out, " {id}");
            }
            Some(t) => {
                let Ok(text) = t.decode(&self.tokens) else {
                    return;
                };
                if text.starts_with(&self.shown) && !text.ends_with('\u{FFFD}') {
                    let _ = write!(out, "{}", &text[self.shown.len()..]);
                    self.shown = text;
                }
            }
        }
        let _ = out.flush();
    }
}

/// One timed generation of each kind.
struct Timed {
    plain: Vec<u32>,
    plain_stats: GenerateStats,
    speculative: Vec<u32>,
    speculative_stats: SpeculativeStats,
}

pub fn run(args: DemoArgs) -> Result<()> {
    check_args(&args)?;
    let ctx = GpuContext::new_blocking(crate::gpu_args::context_options())?;
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
        let shown = &runs.runs[summary.shown];
        let out = serde_json::json!({
            "adapter": ctx.describe(),
            "model": describe,
            "prompt": prompt,
            "prompt_text": shown_text.text(prompt)?,
            "temperature": args.temperature,
            "draft_tokens": args.draft_tokens,
            "draft_schedule": runner.speculative.schedule,
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
    } else {
        print_speeds(&args, &runs, &summary, &shown_text, warm_plain.len())?;
    }
    if args.temperature <= 0.0 {
        // Greedy decoding is deterministic: every run, warm-up included, gives the same
        // tokens.
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
    }
    Ok(())
}

fn check_args(args: &DemoArgs) -> Result<()> {
    if args.repetitions == 0 {
        bail!("--repetitions: expected at least 1 timed run, found 0");
    }
    if !(1..=MAX_DRAFT_TOKENS).contains(&args.draft_tokens) {
        bail!(
            "--draft-tokens: expected 1..={MAX_DRAFT_TOKENS}, found {}",
            args.draft_tokens
        );
    }
    if args.max_new_tokens == 0 {
        bail!("--max-new-tokens: expected at least 1, found 0");
    }
    Ok(())
}

/// Token ids as text: the pair's tokenizer's decoding, or the ids themselves (the
/// synthetic pair has no tokenizer).
struct ShownText<'a>(Option<&'a Tokenizer>);

impl ShownText<'_> {
    /// The decoded text, where there is a tokenizer (the JSON's `text` fields).
    fn text(&self, ids: &[u32]) -> Result<Option<String>> {
        Ok(self.0.map(|t| t.decode(ids)).transpose()?)
    }

    fn of(&self, ids: &[u32]) -> Result<String> {
        Ok(self.text(ids)?.unwrap_or_else(|| {
            ids.iter()
                .map(|t| t.to_string())
                .collect::<Vec<_>>()
                .join(" ")
        }))
    }
}

/// One generation of each kind, as the demo runs them: the prompt and the options.
struct Runner<'a> {
    ctx: &'a GpuContext,
    prompt: &'a [u32],
    generate: GenerateOptions,
    speculative: SpeculativeOptions,
}

/// The timed runs and their speeds.
struct TimedRuns {
    runs: Vec<Timed>,
    plain_tps: Samples,
    spec_tps: Samples,
}

impl<'a> Runner<'a> {
    fn new(
        ctx: &'a GpuContext,
        args: &DemoArgs,
        prompt: &'a [u32],
        stop_ids: &[u32],
    ) -> Runner<'a> {
        Runner {
            ctx,
            prompt,
            generate: GenerateOptions {
                max_new_tokens: args.max_new_tokens,
                sampling: SamplingParams {
                    temperature: args.temperature.max(0.0),
                    seed: args.seed,
                    ..SamplingParams::default()
                },
                stop_ids: stop_ids.to_vec(),
            },
            speculative: SpeculativeOptions {
                draft_tokens: args.draft_tokens,
                schedule: if args.fixed_draft {
                    DraftSchedule::Fixed
                } else {
                    DraftSchedule::Adaptive
                },
                trace: false,
                capture_draft_logits: false,
            },
        }
    }

    fn plain(
        &self,
        target: &mut KvState,
        on_token: &mut dyn FnMut(u32) -> bool,
    ) -> Result<(Vec<u32>, GenerateStats)> {
        Ok(pollster::block_on(generate(
            target,
            self.ctx,
            self.prompt,
            &self.generate,
            on_token,
        ))?)
    }

    fn speculative(
        &self,
        target: &mut KvState,
        assistant: &mut Assistant,
    ) -> Result<SpeculativeOutput> {
        Ok(pollster::block_on(generate_speculative(
            target,
            assistant,
            self.ctx,
            self.prompt,
            &self.generate,
            &self.speculative,
            &mut |_| true,
        ))?)
    }

    /// The warm-up runs are whole generations: every plan and pipeline the timed runs use
    /// is built here, and the user reads the streamed plain text meanwhile. Returns the
    /// plain tokens.
    fn warm_up(
        &self,
        target: &mut KvState,
        assistant: &mut Assistant,
        tokenizer: Option<&Tokenizer>,
        text_out: bool,
    ) -> Result<Vec<u32>> {
        let mut streamer = Streamer::new(tokenizer);
        let (warm_plain, _) = self.plain(target, &mut |id| {
            if text_out {
                streamer.push(id);
            }
            true
        })?;
        if text_out {
            println!();
            eprintln!("warming up speculative decoding (building its verify plans) ...");
        }
        // The adaptive schedule may verify any k + 1 rows: build every verify plan now.
        for m in 1..=target
            .model()
            .options
            .max_verify_rows
            .min(MAX_DRAFT_TOKENS + 1)
        {
            target.plan(self.ctx, m, LogitRows::All)?;
        }
        self.speculative(target, assistant)?;
        Ok(warm_plain)
    }

    /// Timed runs, plain and speculative alternating, so that a drift of the device
    /// (clocks, other work) reaches both alike.
    fn timed_runs(
        &self,
        target: &mut KvState,
        assistant: &mut Assistant,
        repetitions: usize,
        text_out: bool,
    ) -> Result<TimedRuns> {
        let mut out = TimedRuns {
            runs: Vec::with_capacity(repetitions),
            plain_tps: Samples::default(),
            spec_tps: Samples::default(),
        };
        for i in 0..repetitions {
            let (plain, plain_stats) = self.plain(target, &mut |_| true)?;
            let spec = self.speculative(target, assistant)?;
            out.plain_tps.push(plain_stats.decode_tokens_per_s);
            out.spec_tps.push(spec.stats.base.decode_tokens_per_s);
            if text_out {
                eprintln!(
                    "timed run {}/{}: plain {:.1} tok/s, speculative {:.1} tok/s",
                    i + 1,
                    repetitions,
                    plain_stats.decode_tokens_per_s,
                    spec.stats.base.decode_tokens_per_s
                );
            }
            out.runs.push(Timed {
                plain,
                plain_stats,
                speculative: spec.tokens,
                speculative_stats: spec.stats,
            });
        }
        Ok(out)
    }
}

/// What the timed runs say.
struct Summary {
    /// Every plain run gave the warm-up's tokens.
    stable: bool,
    /// Stable, and every speculative run gave its plain run's tokens.
    identical: bool,
    comparison: wgemma::session::bench::timing::Comparison,
    /// The run whose plain speed is the median's: its stats and outputs are shown.
    shown: usize,
}

impl Summary {
    fn of(runs: &TimedRuns, warm_plain: &[u32]) -> Summary {
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
fn print_speeds(
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
                ", adaptive drafts ({} plain steps)",
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
    Ok(())
}
