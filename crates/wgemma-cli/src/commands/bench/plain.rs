//! The plain tests (`ppN`, `tgN`) and one forward's time.

use super::args::{BenchArgs, Sizes};
use super::table::{timed, TestRow};
use crate::timing::Samples;
use anyhow::Result;
use std::time::Instant;
use wgemma::gpu::GpuContext;
use wgemma::model::state::KvState;
use wgemma::model::target::Want;

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
        let vocab = state.model().spec.config.vocab_size as u64;
        let tokens: Vec<u32> = (0..prompt_len.max(context_len) as u64)
            .map(|i| ((i.wrapping_mul(2654435761) ^ args.seed) % vocab) as u32)
            .collect();
        let prompt = &tokens[..prompt_len];
        let context = &tokens[..context_len];

        let pp_name = format!("pp{prompt_len}");
        let pp = timed(&pp_name, repetitions, || {
            state.reset();
            let t = Instant::now();
            pollster::block_on(state.forward(ctx, prompt, Want::NextToken))?;
            Ok(prompt_len as f64 / t.elapsed().as_secs_f64())
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
            state.reset();
            let next = pollster::block_on(state.forward(ctx, context, Want::NextToken))?.next[0];
            let (d0, s0, _) = ctx.counters().snapshot();
            let b0 = ctx.counters().barriers();
            let host0 = state.host_encode_seconds();
            let t = Instant::now();
            let rest = pollster::block_on(state.decode_greedy(ctx, next, gen, &mut |_| true))?;
            let seconds = t.elapsed().as_secs_f64();
            let (d1, s1, _) = ctx.counters().snapshot();
            counts = (d1 - d0, s1 - s0, ctx.counters().barriers() - b0);
            host_s = state.host_encode_seconds() - host0;
            greedy = std::iter::once(next).chain(rest).collect();
            Ok(gen as f64 / seconds)
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

/// Milliseconds of one forward of `rows` copies of `token` at the model's position, each
/// submitted, waited for and rolled back (no pipelining).
pub(super) fn forward_ms(
    ctx: &GpuContext,
    state: &mut KvState,
    token: u32,
    rows: usize,
) -> Result<f64> {
    let tokens = vec![token; rows];
    let want = if rows == 1 {
        Want::NextToken
    } else {
        Want::AllNext
    };
    let base = state.len();
    pollster::block_on(state.forward(ctx, &tokens, want))?;
    state.rollback(base)?;
    let t = Instant::now();
    for _ in 0..32 {
        pollster::block_on(state.forward(ctx, &tokens, want))?;
        state.rollback(base)?;
    }
    Ok(t.elapsed().as_secs_f64() * 1e3 / 32.0)
}
