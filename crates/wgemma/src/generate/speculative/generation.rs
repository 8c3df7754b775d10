//! The loop of [`super::generate_speculative`]: the prefill, then rounds (drafts + one verify
//! forward) or, under the adaptive schedule, chunks of plain pipelined decode steps; the
//! rounds run on the host ([`super::rounds`]) or pipelined on the GPU ([`super::pipeline`]).

use super::oracle::DraftSource;
use super::pipeline;
use super::rounds::Session;
use super::schedule::{AdaptiveDrafts, DraftCosts, DraftSchedule};
use super::{check_session, LastForward, Phase, SpeculativeOptions, SpeculativeOutput, OP};
use crate::error::{Error, Result};
use crate::generate::plain::GenerateOptions;
use crate::generate::sampling::Sampler;
use crate::gpu::GpuContext;
use crate::model::assistant::Assistant;
use crate::model::forward::LogitRows;
use crate::model::state::KvState;
use crate::model::target::Want;
use web_time::Instant;

/// What one generation is asked for: the prompt and the options it runs with.
pub(super) struct Request<'a> {
    pub prompt: &'a [u32],
    pub options: &'a GenerateOptions,
    pub spec: &'a SpeculativeOptions,
}

fn per_second(count: usize, seconds: f64) -> f64 {
    if seconds > 0.0 {
        count as f64 / seconds
    } else {
        0.0
    }
}

/// Generates after `request.prompt` (see [`super::generate_speculative`]) with the drafts
/// of `source` (an oracle only for benchmarks' pipelined rounds).
pub(super) async fn run(
    target: &mut KvState,
    assistant: &mut Assistant,
    ctx: &GpuContext,
    request: Request<'_>,
    source: DraftSource,
    on_token: &mut dyn FnMut(u32) -> bool,
) -> Result<SpeculativeOutput> {
    let (prompt, options, spec) = (request.prompt, request.options, request.spec);
    if prompt.is_empty() {
        return Err(Error::invalid(OP, "prompt tokens", "at least one", 0));
    }
    let k_cap = check_session(target, assistant, spec)?;
    let params = options.sampling;
    let greedy = params.is_greedy();
    let host_drafts = !greedy || spec.capture_draft_logits;
    if matches!(source, DraftSource::Oracle(_)) && host_drafts {
        return Err(Error::invalid(
            OP,
            "rounds with oracle drafts",
            "greedy, drafts chained on the GPU",
            "sampling or captured draft logits",
        ));
    }
    let mut sampler = Sampler::new(params)?;
    let mut out = SpeculativeOutput::default();
    out.stats.base.prompt_tokens = prompt.len();
    target.reset();
    let marked = (ctx.counters().snapshot().0, ctx.counters().barriers());
    let start = Instant::now();
    if options.max_new_tokens == 0 {
        return Ok(out);
    }
    // Round 0: the prefill, no drafts.
    let want = if greedy {
        Want::NextToken
    } else {
        Want::LastLogits
    };
    let prefill = target.forward(ctx, prompt, want).await?;
    let first = if greedy {
        prefill.next[0]
    } else {
        let dist = sampler.distribution(&prefill.logits);
        sampler.draw(&dist, 0)
    };
    let t_first = start.elapsed().as_secs_f64();
    let first_at = Instant::now();
    out.stats.base.ttft_ms = t_first * 1e3;
    out.stats.base.prefill_tokens_per_s = per_second(prompt.len(), t_first);
    let l = prompt.len();
    let measured_costs = assistant.draft_costs;
    let m_last = (l - 1) % target.model().options.prefill_chunk + 1;
    let mut session = Session {
        target,
        assistant,
        ctx,
        options,
        spec,
        k_cap,
        prompt_len: l,
        out,
        tokens: Vec::with_capacity(options.max_new_tokens),
        done: false,
        k: spec.draft_tokens,
        // The costs of earlier greedy generations hold for this one's pipelined rounds (host
        // rounds, which wait for every draft, start afresh and are not kept).
        adaptive: (spec.schedule == DraftSchedule::Adaptive).then(|| {
            let costs = if host_drafts {
                DraftCosts::default()
            } else {
                measured_costs
            };
            AdaptiveDrafts::new(spec.draft_tokens, k_cap, costs)
        }),
        last: LastForward {
            r: l - 1,
            m: l,
            plan: (m_last, LogitRows::Last),
            row: m_last - 1,
        },
        wait_s: 0.0,
        marked,
        costs: measured_costs,
        plain_end: None,
        sampler,
    };
    session.stream(vec![first], on_token);
    if host_drafts {
        session.host_rounds(on_token).await?;
    } else {
        pipeline::run(&mut session, source, on_token).await?;
    }
    session.mark(Phase::Target, 0, 0);
    if !host_drafts {
        session.assistant.draft_costs = match &session.adaptive {
            Some(schedule) => schedule.costs,
            None => session.costs,
        };
    }
    let Session {
        mut out,
        tokens,
        wait_s,
        ..
    } = session;
    let s = &mut out.stats;
    s.base.generated_tokens = tokens.len();
    s.base.decode_tokens_per_s = per_second(tokens.len() - 1, first_at.elapsed().as_secs_f64());
    s.acceptance_rate = if s.drafted > 0 {
        s.accepted as f64 / s.drafted as f64
    } else {
        0.0
    };
    s.tokens_per_round = if s.rounds > 0 {
        (tokens.len() - 1 - s.plain_steps) as f64 / s.rounds as f64
    } else {
        0.0
    };
    s.host_wait_ms_per_round = if s.rounds > 0 {
        wait_s * 1e3 / s.rounds as f64
    } else {
        0.0
    };
    out.tokens = tokens;
    Ok(out)
}
