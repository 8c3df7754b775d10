//! The measurements `wgemma bench` takes, platform-independent (no threads, no blocking):
//! the CLI blocks on them with pollster, the browser package awaits them, so a figure from
//! either is the same run of the same code. Each is one run of a test: the prefill of a
//! prompt (`ppN`), greedy decode after a context (`tgN @ dD`), speculative rounds with
//! oracle drafts, and pipelined speculative generations that run the assistant's draft
//! steps (or none) while the verify reads the target's own greedy tokens as drafts at a
//! chosen acceptance rate ([`drafted`]). [`timing`] repeats them as llama-bench does;
//! [`suite`] runs them all as both benches' tests, rows and report; [`profile`] says where
//! the GPU time of forwards and rounds goes; `lab` (with the `harness` feature) holds the
//! before/after comparisons of plan fusions.

pub mod drafted;
#[cfg(any(test, feature = "harness"))]
pub mod lab;
pub mod profile;
pub mod suite;
pub mod timing;

use crate::error::{Error, Result};
use crate::formats::synthetic::SyntheticShape;
use crate::gpu::{Activations, DispatchTime, GemmCeiling, GpuContext};
use crate::model::state::KvState;
use crate::model::target::{Model, Want};
use rand::{Rng, SeedableRng};
use web_time::Instant;

const OP: &str = "bench";

/// The bench's prompt: `len` seeded token ids below `vocab` (the prefill test reads the
/// first `n_prompt`, the decode tests the first `n_depth`).
pub fn bench_tokens(len: usize, vocab: usize, seed: u64) -> Vec<u32> {
    (0..len as u64)
        .map(|i| ((i.wrapping_mul(2654435761) ^ seed) % vocab as u64) as u32)
        .collect()
}

/// The synthetic shape `model` has (a synthetic model, a `synth-checkpoint` directory or
/// its artifact), among those with a published assistant: the bench's drafter rows run an
/// assistant of that shape.
pub fn assistant_shape(model: &Model) -> Option<SyntheticShape> {
    let c = &model.spec.config;
    [SyntheticShape::E2b, SyntheticShape::E4b]
        .into_iter()
        .find(|s| {
            let t = s.spec().config;
            (t.hidden_size, t.num_hidden_layers, t.vocab_size)
                == (c.hidden_size, c.num_hidden_layers, c.vocab_size)
        })
}

/// The GEMM family prefill runs on this context: the best the device has under the
/// ceiling, as the Q4 prefill routes choose it.
pub fn gemm_family(ctx: &GpuContext) -> &'static str {
    if ctx.has_coop_16x16_f16() {
        "tensor-core GEMM (cooperative matrices)"
    } else if ctx.gemm >= GemmCeiling::Int8 && ctx.activations() == Activations::Int8 {
        "int8 GEMM (integer dot products)"
    } else if ctx.gemm >= GemmCeiling::F16 && ctx.has(wgpu::Features::SHADER_F16) {
        "f16-tile GEMM"
    } else {
        "f32 GEMM"
    }
}

/// Tokens/s of one prefill of `prompt` from an empty cache.
pub async fn prefill_run(ctx: &GpuContext, state: &mut KvState, prompt: &[u32]) -> Result<f64> {
    state.reset();
    let t = Instant::now();
    state.forward(ctx, prompt, Want::NextToken).await?;
    Ok(prompt.len() as f64 / t.elapsed().as_secs_f64())
}

/// One greedy decode after a context.
pub struct DecodeRun {
    /// Generated tokens over the decode's wall time (the context's forward excluded).
    pub tokens_per_s: f64,
    /// The greedy tokens, the context forward's first.
    pub greedy: Vec<u32>,
    /// Counters of the decode steps: dispatches, submits, barriers.
    pub dispatches: u64,
    pub submits: u64,
    pub barriers: u64,
    /// Host time spent recording the decode steps.
    pub host_s: f64,
}

/// Resets, runs `context` and then `gen` greedy decode steps, timed.
pub async fn decode_run(
    ctx: &GpuContext,
    state: &mut KvState,
    context: &[u32],
    gen: usize,
) -> Result<DecodeRun> {
    state.reset();
    let next = state.forward(ctx, context, Want::NextToken).await?.next[0];
    let (d0, s0, _) = ctx.counters().snapshot();
    let b0 = ctx.counters().barriers();
    let host0 = state.host_encode_seconds();
    let t = Instant::now();
    let rest = state.decode_greedy(ctx, next, gen, &mut |_| true).await?;
    let seconds = t.elapsed().as_secs_f64();
    let (d1, s1, _) = ctx.counters().snapshot();
    Ok(DecodeRun {
        tokens_per_s: gen as f64 / seconds,
        greedy: std::iter::once(next).chain(rest).collect(),
        dispatches: d1 - d0,
        submits: s1 - s0,
        barriers: ctx.counters().barriers() - b0,
        host_s: state.host_encode_seconds() - host0,
    })
}

/// Milliseconds of one forward of `rows` copies of `token` at the model's position, each
/// submitted, waited for and rolled back (no pipelining): the mean of 32 after one.
pub async fn forward_ms(
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
    state.forward(ctx, &tokens, want).await?;
    state.rollback(base)?;
    let t = Instant::now();
    for _ in 0..32 {
        state.forward(ctx, &tokens, want).await?;
        state.rollback(base)?;
    }
    Ok(t.elapsed().as_secs_f64() * 1e3 / 32.0)
}

/// Drafts at a fixed acceptance rate: each of the target's own greedy tokens kept with
/// probability `acceptance`, else replaced by a token the target rejects. One random
/// stream (seed 7) for every run, so runs at one rate see the same pattern.
pub struct FixedRateDrafts {
    rng: rand_chacha::ChaCha8Rng,
    acceptance: f64,
    vocab: u32,
}

impl FixedRateDrafts {
    pub fn new(acceptance: f64, vocab: usize) -> FixedRateDrafts {
        FixedRateDrafts {
            rng: rand_chacha::ChaCha8Rng::seed_from_u64(7),
            acceptance,
            vocab: vocab as u32,
        }
    }

    /// Which of the next `k` drafts keep the target's token.
    pub fn keep(&mut self, k: usize) -> Vec<bool> {
        (0..k)
            .map(|_| self.rng.random_bool(self.acceptance))
            .collect()
    }

    /// The drafts standing for `greedy` (the target's tokens at those positions).
    pub fn drafts(&mut self, greedy: &[u32]) -> Vec<u32> {
        let keep = self.keep(greedy.len());
        greedy
            .iter()
            .zip(keep)
            .map(|(&t, kept)| if kept { t } else { (t + 1) % self.vocab })
            .collect()
    }
}

/// Speculative rounds with oracle drafts: the drafts are the target's own greedy tokens
/// from the plain run, each kept with probability `acceptance` and otherwise replaced by
/// a token the target will reject (acceptance 1.0 = every draft accepted), so the cost of
/// a verify round is measured independently of draft quality. The assistant's draft steps
/// are not included.
pub struct OracleRun {
    pub target_acceptance: f64,
    pub tokens_per_s: f64,
    pub rounds: usize,
    pub accepted: usize,
    pub drafted: usize,
    pub ms_per_round: f64,
    pub host_ms_per_round: f64,
    /// Inside `KvState::forward` (record, submit, wait, read back).
    pub forward_ms_per_round: f64,
    /// Every verify forward's dispatch times, when profiling (else empty).
    pub profile: Vec<DispatchTime>,
}

impl OracleRun {
    pub fn json(&self, plain_tps: f64) -> serde_json::Value {
        serde_json::json!({
            "target_acceptance": self.target_acceptance,
            "tokens_per_s": self.tokens_per_s,
            "speedup": self.tokens_per_s / plain_tps,
            "rounds": self.rounds,
            "acceptance_rate": self.accepted as f64 / self.drafted.max(1) as f64,
            "tokens_per_round": (self.accepted + self.rounds) as f64 / self.rounds.max(1) as f64,
            "ms_per_round": self.ms_per_round,
            "host_ms_per_round": self.host_ms_per_round,
            "forward_ms_per_round": self.forward_ms_per_round,
        })
    }
}

/// One set of oracle rounds after `prompt` that must reproduce `greedy` (the plain greedy
/// continuation, first token included): `k` drafts a round at `acceptance`.
/// `profiling`: read the profiler after each round (a context with profiling enabled).
pub async fn oracle_rounds(
    ctx: &GpuContext,
    state: &mut KvState,
    (prompt, greedy): (&[u32], &[u32]),
    (k, acceptance): (usize, f64),
    profiling: bool,
) -> Result<OracleRun> {
    let mut oracle = FixedRateDrafts::new(acceptance, state.model().spec.config.vocab_size);
    state.reset();
    let first = state.forward(ctx, prompt, Want::NextToken).await?.next[0];
    let host0 = state.host_encode_seconds();
    let t0 = Instant::now();
    let mut committed = vec![first];
    let (mut rounds, mut accepted, mut drafted) = (0, 0, 0);
    let mut forward_s = 0.0;
    let mut profile = Vec::new();
    ctx.read_profile().await?;
    while committed.len() < greedy.len() {
        let seed = *committed.last().expect("at least the first token");
        let at = committed.len();
        let drafts = oracle.drafts(&greedy[at..(at + k).min(greedy.len())]);
        let mut input = vec![seed];
        input.extend(&drafts);
        let base = state.len();
        let tf = Instant::now();
        let next = state.forward(ctx, &input, Want::AllNext).await?.next;
        forward_s += tf.elapsed().as_secs_f64();
        if profiling {
            profile.extend(ctx.read_profile().await?);
        }
        let ok = drafts.iter().zip(&next).take_while(|(d, n)| d == n).count();
        committed.extend(&drafts[..ok]);
        committed.push(next[ok]);
        state.rollback(base + 1 + ok)?;
        rounds += 1;
        accepted += ok;
        drafted += drafts.len();
    }
    if committed[..greedy.len()] != *greedy {
        return Err(diverged("oracle speculative rounds"));
    }
    let elapsed = t0.elapsed().as_secs_f64();
    let per_round = |s: f64| s * 1e3 / rounds.max(1) as f64;
    Ok(OracleRun {
        target_acceptance: acceptance,
        tokens_per_s: (committed.len() - 1) as f64 / elapsed,
        rounds,
        accepted,
        drafted,
        ms_per_round: per_round(elapsed),
        host_ms_per_round: per_round(state.host_encode_seconds() - host0),
        forward_ms_per_round: per_round(forward_s),
        profile,
    })
}

/// Speculative output that is not the plain greedy one: a bug, never a figure.
fn diverged(what: &str) -> Error {
    Error::invalid(
        OP,
        what,
        "the plain greedy tokens",
        "a different continuation",
    )
}
