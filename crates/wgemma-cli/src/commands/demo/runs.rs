//! The demo's generations: the streamed warm-up, then plain and speculative decoding timed
//! alternately.

use super::args::DemoArgs;
use anyhow::Result;
use std::io::Write as _;
use wgemma::generate::plain::{generate, GenerateOptions, GenerateStats};
use wgemma::generate::sampling::SamplingParams;
use wgemma::generate::speculative::{
    generate_speculative, DraftSchedule, SpeculativeOptions, SpeculativeOutput, SpeculativeStats,
};
use wgemma::gpu::GpuContext;
use wgemma::model::assistant::Assistant;
use wgemma::model::state::KvState;
use wgemma::session::bench::drafted::build_verify_plans;
use wgemma::session::bench::timing::Samples;
use wgemma::text::tokenizer::{TextStream, Tokenizer};

/// Prints a generation's text as its tokens arrive (nothing while a multi-byte character
/// is incomplete); without a tokenizer, the ids.
struct Streamer<'a> {
    tokenizer: Option<&'a Tokenizer>,
    text: TextStream,
}

impl Streamer<'_> {
    fn push(&mut self, id: u32) {
        let mut out = std::io::stdout();
        match self.tokenizer {
            None => {
                let _ = write!(out, " {id}");
            }
            Some(t) => {
                if let Ok(Some(piece)) = self.text.push(t, id) {
                    let _ = write!(out, "{piece}");
                }
            }
        }
        let _ = out.flush();
    }
}

/// One timed generation of each kind.
pub(super) struct Timed {
    pub(super) plain: Vec<u32>,
    pub(super) plain_stats: GenerateStats,
    pub(super) speculative: Vec<u32>,
    pub(super) speculative_stats: SpeculativeStats,
}

/// One generation of each kind, as the demo runs them: the prompt and the options.
pub(super) struct Runner<'a> {
    ctx: &'a GpuContext,
    prompt: &'a [u32],
    generate: GenerateOptions,
    pub(super) speculative: SpeculativeOptions,
}

/// The timed runs and their speeds.
pub(super) struct TimedRuns {
    pub(super) runs: Vec<Timed>,
    pub(super) plain_tps: Samples,
    pub(super) spec_tps: Samples,
}

impl<'a> Runner<'a> {
    pub(super) fn new(
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
    pub(super) fn warm_up(
        &self,
        target: &mut KvState,
        assistant: &mut Assistant,
        tokenizer: Option<&Tokenizer>,
        text_out: bool,
    ) -> Result<Vec<u32>> {
        let mut streamer = Streamer {
            tokenizer,
            text: TextStream::new(),
        };
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
        build_verify_plans(self.ctx, target)?;
        self.speculative(target, assistant)?;
        Ok(warm_plain)
    }

    /// Timed runs, plain and speculative alternating, so that a drift of the device
    /// (clocks, other work) reaches both alike.
    pub(super) fn timed_runs(
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
