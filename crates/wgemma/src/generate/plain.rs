//! The plain decoding loop: prefill the prompt, then one token per forward, greedy on the
//! GPU (only the token id comes back) or sampled on the host, until a stop token or the
//! token budget.

use super::sampling::{Sampler, SamplingParams, TokenHistory};
use crate::error::{Error, Result};
use crate::gpu::GpuContext;
use crate::model::state::KvState;
use crate::model::target::Want;
use web_time::Instant;

/// What to generate.
#[derive(Debug, Clone)]
pub struct GenerateOptions {
    pub max_new_tokens: usize,
    pub sampling: SamplingParams,
    /// Generation stops after emitting one of these (it is included in the output, as HF
    /// does).
    pub stop_ids: Vec<u32>,
}

/// Timings and counts of one generation, in the units llama.cpp and ExecuTorch print.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct GenerateStats {
    pub prompt_tokens: usize,
    pub generated_tokens: usize,
    /// From the start of the prefill to the first generated token on the host.
    pub ttft_ms: f64,
    pub prefill_tokens_per_s: f64,
    /// Tokens after the first, over the time after the first.
    pub decode_tokens_per_s: f64,
}

impl GenerateStats {
    /// One line: `prompt 12 tok, 840.1 tok/s | generated 64 tok, 95.2 tok/s | ttft 14.3 ms`.
    pub fn summary(&self) -> String {
        format!(
            "prompt {} tok, {:.1} tok/s | generated {} tok, {:.1} tok/s | ttft {:.1} ms",
            self.prompt_tokens,
            self.prefill_tokens_per_s,
            self.generated_tokens,
            self.decode_tokens_per_s,
            self.ttft_ms
        )
    }
}

fn per_second(count: usize, seconds: f64) -> f64 {
    if seconds > 0.0 {
        count as f64 / seconds
    } else {
        0.0
    }
}

/// Generates after `prompt` (the state is reset first). `on_token` sees each token as it
/// is produced and may return `false` to stop early.
pub async fn generate(
    state: &mut KvState,
    ctx: &GpuContext,
    prompt: &[u32],
    options: &GenerateOptions,
    on_token: &mut dyn FnMut(u32) -> bool,
) -> Result<(Vec<u32>, GenerateStats)> {
    if prompt.is_empty() {
        return Err(Error::invalid(
            "generate",
            "prompt tokens",
            "at least one",
            0,
        ));
    }
    let mut sampler = Sampler::new(options.sampling)?;
    // The repetition penalty looks back over the prompt and the tokens drawn.
    let adjust = options.sampling.adjust();
    let mut history = TokenHistory::new(if adjust.is_identity() { &[] } else { prompt });
    state.reset();
    let want = if options.sampling.is_greedy() {
        Want::NextToken
    } else {
        Want::LastLogits
    };
    let start = Instant::now();
    // Never more than the KV cache holds: max_new_tokens is caller input (u64::MAX
    // overflowed the capacity).
    let mut tokens = Vec::with_capacity(
        options
            .max_new_tokens
            .min(state.model().options.max_context),
    );
    let mut stats = GenerateStats {
        prompt_tokens: prompt.len(),
        ..Default::default()
    };
    let mut input: Vec<u32> = prompt.to_vec();
    let mut first_token_at = None;
    while tokens.len() < options.max_new_tokens {
        let out = state.forward(ctx, &input, want).await?;
        let next = if options.sampling.is_greedy() {
            out.next[0]
        } else {
            let mut logits = out.logits;
            history.apply(&adjust, &mut logits);
            let token = sampler.sample(&logits, tokens.len() as u64);
            history.push(token);
            token
        };
        if first_token_at.is_none() {
            let t = start.elapsed().as_secs_f64();
            first_token_at = Some(Instant::now());
            stats.ttft_ms = t * 1e3;
            stats.prefill_tokens_per_s = per_second(prompt.len(), t);
        }
        tokens.push(next);
        let keep_going = on_token(next);
        if !keep_going || options.stop_ids.contains(&next) {
            break;
        }
        if options.sampling.is_greedy() {
            // Greedy: the rest runs pipelined, the token ids staying on the GPU.
            let budget = options.max_new_tokens - tokens.len();
            let stop_ids = &options.stop_ids;
            let rest = state
                .decode_greedy(ctx, next, budget, &mut |t| {
                    on_token(t) && !stop_ids.contains(&t)
                })
                .await?;
            tokens.extend(rest);
            break;
        }
        if tokens.len() < options.max_new_tokens {
            input.clear();
            input.push(next);
        }
    }
    stats.generated_tokens = tokens.len();
    if let Some(t0) = first_token_at {
        stats.decode_tokens_per_s =
            per_second(tokens.len().saturating_sub(1), t0.elapsed().as_secs_f64());
    }
    Ok((tokens, stats))
}
