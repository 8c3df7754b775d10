//! The plain tests (`ppN`, `tgN`): the seeded prompt's prefill and the greedy decode timed,
//! and the tokens the speculative and profiled tests start from.

use super::args::{BenchArgs, Sizes};
use super::table::{timed, TestRow};
use anyhow::Result;
use wgemma::gpu::GpuContext;
use wgemma::model::state::KvState;
use wgemma::session::bench;
use wgemma::session::bench::timing::Samples;

/// The plain tests (`ppN`, `tgN`) and what the later tests start from.
pub(super) struct PlainRun {
    /// Seeded tokens: the prompt is the first `prompt_len`, the decode context the first
    /// `context_len`.
    pub(super) tokens: Vec<u32>,
    pub(super) prompt_len: usize,
    pub(super) pp: Samples,
    pub(super) tg: Samples,
    pub(super) tg_name: String,
    /// The last decode run's greedy tokens (the first from the context's forward).
    pub(super) greedy: Vec<u32>,
    /// The last decode run's counters: (dispatches, submits, barriers), host encode time.
    pub(super) counts: (u64, u64, u64),
    pub(super) host_s: f64,
    /// GPU memory held by tensors after the prefill test.
    pub(super) memory_bytes: u64,
    /// The `ppN` and `tgN` rows (taken into the outcome's table).
    pub(super) rows: Vec<TestRow>,
}

impl PlainRun {
    pub(super) fn measure(
        args: &BenchArgs,
        sizes: &Sizes,
        ctx: &GpuContext,
        state: &mut KvState,
        context_len: usize,
    ) -> Result<PlainRun> {
        let (prompt_len, gen, repetitions) = (sizes.prompt_len, sizes.gen, sizes.repetitions);
        let vocab = state.model().spec.config.vocab_size;
        let tokens = bench::bench_tokens(prompt_len.max(context_len), vocab, args.seed);
        let prompt = &tokens[..prompt_len];
        let context = &tokens[..context_len];

        let pp_name = format!("pp{prompt_len}");
        let pp = timed(&pp_name, repetitions, || {
            Ok(pollster::block_on(bench::prefill_run(ctx, state, prompt))?)
        })?;
        let memory_bytes = ctx
            .counters()
            .tensor_bytes
            .load(std::sync::atomic::Ordering::Relaxed);

        let tg_name = if args.depth > 0 {
            format!("tg{gen} @ d{}", args.depth)
        } else {
            format!("tg{gen}")
        };
        let mut greedy = Vec::new();
        let (mut counts, mut host_s) = ((0, 0, 0), 0.0);
        let tg = timed(&tg_name, repetitions, || {
            let run = pollster::block_on(bench::decode_run(ctx, state, context, gen))?;
            counts = (run.dispatches, run.submits, run.barriers);
            host_s = run.host_s;
            greedy = run.greedy;
            Ok(run.tokens_per_s)
        })?;
        let rows = vec![
            TestRow {
                test: pp_name,
                n_prompt: prompt_len,
                n_gen: 0,
                tokens_per_s: pp.clone(),
                vs_tg: None,
            },
            TestRow {
                test: tg_name.clone(),
                n_prompt: args.depth,
                n_gen: gen,
                tokens_per_s: tg.clone(),
                vs_tg: None,
            },
        ];
        Ok(PlainRun {
            tokens,
            prompt_len,
            pp,
            tg,
            tg_name,
            greedy,
            counts,
            host_s,
            memory_bytes,
            rows,
        })
    }

    pub(super) fn prompt(&self) -> &[u32] {
        &self.tokens[..self.prompt_len]
    }

    pub(super) fn context(&self, context_len: usize) -> &[u32] {
        &self.tokens[..context_len]
    }

    /// The decode context: what the tg test's forward read before its first token.
    pub(super) fn decode_context(&self, depth: usize) -> &[u32] {
        self.context(depth.max(1))
    }
}

/// [`bench::forward_ms`]: one forward of `rows` rows at the model's position, unpipelined.
pub(super) fn forward_ms(
    ctx: &GpuContext,
    state: &mut KvState,
    token: u32,
    rows: usize,
) -> Result<f64> {
    Ok(pollster::block_on(bench::forward_ms(
        ctx, state, token, rows,
    ))?)
}
