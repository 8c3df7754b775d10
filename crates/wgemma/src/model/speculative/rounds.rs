//! The loop of [`super::generate_speculative`]: the prefill, then rounds (drafts + one verify
//! forward) or, under the adaptive schedule, chunks of plain pipelined decode steps.

use super::accept::{dense, draw_dense, speculative_accept};
use super::schedule::{AdaptiveDrafts, DraftSchedule, NextRound};
use super::{check_session, DraftRound, LastForward, SpeculativeOptions, SpeculativeOutput, OP};
use crate::error::{Error, Result};
use crate::gpu::{DType, GpuContext, Readback, Step, Tensor};
use crate::model::assistant::{Assistant, DraftView};
use crate::model::forward::LogitRows;
use crate::model::generate::GenerateOptions;
use crate::model::sampling::Sampler;
use crate::model::target::{Model, Want};
use crate::ops::embedding::write_token_ids;
use rand::SeedableRng;
use web_time::Instant;

fn per_second(count: usize, seconds: f64) -> f64 {
    if seconds > 0.0 {
        count as f64 / seconds
    } else {
        0.0
    }
}

/// Greedy: `n` plain pipelined steps after the last token of `tokens` (the seed, not yet in
/// the cache), each token through `on_token`. Returns the seconds per step (None when it
/// cannot be told: fewer than two tokens, or the decode plan was built on the way) and
/// whether the caller stopped (a stop token or `on_token`'s `false`).
async fn plain_chunk(
    target: &mut Model,
    ctx: &GpuContext,
    stop_ids: &[u32],
    n: usize,
    tokens: &mut Vec<u32>,
    on_token: &mut dyn FnMut(u32) -> bool,
) -> Result<(Option<f64>, bool)> {
    let seed = *tokens.last().expect("one token at least");
    let timed = target.built_plan(1, LogitRows::Last).is_some();
    let mut stamps = Vec::with_capacity(n);
    let mut stopped = false;
    let rest = target
        .decode_greedy(ctx, seed, n, &mut |t| {
            stamps.push(Instant::now());
            let go = on_token(t) && !stop_ids.contains(&t);
            stopped |= !go;
            go
        })
        .await?;
    tokens.extend(&rest);
    let seconds = match (timed, stamps.first(), stamps.last()) {
        (true, Some(a), Some(b)) if stamps.len() >= 2 => {
            Some(b.duration_since(*a).as_secs_f64() / (stamps.len() - 1) as f64)
        }
        _ => None,
    };
    Ok((seconds, stopped))
}

#[allow(clippy::too_many_arguments)]
pub(super) async fn run(
    target: &mut Model,
    assistant: &mut Assistant,
    ctx: &GpuContext,
    prompt: &[u32],
    options: &GenerateOptions,
    spec: &SpeculativeOptions,
    mut replace_drafts: Option<&mut dyn FnMut(usize, usize) -> Vec<u32>>,
    on_token: &mut dyn FnMut(u32) -> bool,
) -> Result<SpeculativeOutput> {
    if prompt.is_empty() {
        return Err(Error::invalid(OP, "prompt tokens", "at least one", 0));
    }
    let k_cap = check_session(target, assistant, spec)?;
    let params = options.sampling;
    let mut sampler = Sampler::new(params)?;
    let greedy = params.is_greedy();
    let host_drafts = !greedy || spec.capture_draft_logits;
    if replace_drafts.is_some() && host_drafts {
        return Err(Error::invalid(
            OP,
            "rounds whose drafts are replaced",
            "greedy, drafts chained on the GPU",
            "sampling or captured draft logits",
        ));
    }
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(params.seed);
    let vocab = target.spec.config.vocab_size;
    let (w_t, w_a) = (assistant.target_window(), assistant.window());
    let ids_readback = Readback::new(ctx, "speculative.ids", (k_cap as u64 + 1) * 4);
    // The replacement drafts, copied over the assistant's in the verify's token ids.
    let replacement = Tensor::zeros(ctx, "speculative.replacement", &[k_cap], DType::U32)?;
    let max_new = options.max_new_tokens;
    let mut out = SpeculativeOutput::default();
    out.stats.base.prompt_tokens = prompt.len();

    target.reset();
    let start = Instant::now();
    if max_new == 0 {
        return Ok(out);
    }
    // Round 0: the prefill, no drafts.
    let prefill = target
        .forward(
            ctx,
            prompt,
            if greedy {
                Want::NextToken
            } else {
                Want::LastLogits
            },
        )
        .await?;
    let first = if greedy {
        prefill.next[0]
    } else {
        let dist = sampler.distribution(&prefill.logits);
        draw_dense(&mut rng, &dense(&dist, vocab), 1.0)
    };
    let t_first = start.elapsed().as_secs_f64();
    let first_at = Instant::now();
    out.stats.base.ttft_ms = t_first * 1e3;
    out.stats.base.prefill_tokens_per_s = per_second(prompt.len(), t_first);
    let l = prompt.len();
    let m_last = (l - 1) % target.options.prefill_chunk + 1;
    let mut last = LastForward {
        r: l - 1,
        m: l,
        plan: (m_last, LogitRows::Last),
        row: m_last - 1,
    };
    let mut tokens = vec![first];
    let mut done = !on_token(first) || options.stop_ids.contains(&first);
    let mut k = spec.draft_tokens;
    let mut adaptive = (spec.schedule == DraftSchedule::Adaptive)
        .then(|| AdaptiveDrafts::new(spec.draft_tokens, k_cap));

    while !done && tokens.len() < max_new {
        let budget = max_new - tokens.len();
        let next = match adaptive.as_mut() {
            Some(schedule) => schedule.next(budget),
            None => NextRound::Draft(k),
        };
        if let (NextRound::Plain(n), true) = (next, greedy) {
            let committed = tokens.len();
            let (seconds, stopped) = plain_chunk(
                target,
                ctx,
                &options.stop_ids,
                n.min(budget),
                &mut tokens,
                on_token,
            )
            .await?;
            done = stopped;
            let steps = tokens.len() - committed;
            out.stats.plain_steps += steps;
            if spec.trace {
                out.rounds
                    .extend((committed..tokens.len()).map(|c| DraftRound {
                        committed: c,
                        drafts: Vec::new(),
                        accepted: 0,
                    }));
            }
            if let Some(schedule) = adaptive.as_mut() {
                schedule.record_plain(seconds);
            }
            last = LastForward {
                r: target.len() - 1,
                m: 1,
                plan: (1, LogitRows::Last),
                row: 0,
            };
            continue;
        }
        let round_start = Instant::now();
        let seed = *tokens.last().expect("one token at least");
        let p = l + tokens.len() - 1;
        let kk = match next {
            NextRound::Draft(k) => k.min(budget - 1),
            NextRound::Plain(_) => 0,
        };
        let m = kk + 1;
        // A round that builds its verify plan is not a measure of what rounds cost.
        let timed = target.built_plan(m, LogitRows::All).is_some();
        let seed_hidden = target
            .built_plan(last.plan.0, last.plan.1)
            .and_then(|plan| plan.head.as_ref())
            .map(|head| head.hidden.clone())
            .ok_or_else(|| {
                Error::invalid(
                    OP,
                    "hidden states of the last target forward",
                    "kept",
                    "none",
                )
            })?;
        let ids = target.plan(ctx, m, LogitRows::All)?.ids.clone();

        // Drafts, then the verify forward.
        let mut drafts = Vec::with_capacity(kk);
        let mut q_rows = Vec::new();
        let mut step = Step::new(ctx);
        if kk > 0 {
            // HF never drafts after a plain step past the window (its rounds always draft).
            let view = match DraftView::hf(p, last.r, last.m, w_t, w_a) {
                Err(_) if last.m == 1 => DraftView::after_plain_step(p, last.r),
                view => view?,
            };
            assistant.begin_round(ctx, view, target.sequence_slot());
            assistant.write_token(ctx, seed)?;
            assistant.record_seed_hidden(&mut step, &seed_hidden, last.row)?;
            if host_drafts {
                for i in 0..kk {
                    if i > 0 {
                        assistant.write_token(ctx, drafts[i - 1])?;
                    }
                    assistant.record_step(&mut step)?;
                    assistant.record_readback(&mut step, true)?;
                    std::mem::replace(&mut step, Step::new(ctx)).submit();
                    let logits = assistant.read_logits(ctx).await?;
                    let d = if greedy {
                        assistant.read_token(ctx).await?
                    } else {
                        let q = dense(&sampler.distribution(&logits), vocab);
                        let d = draw_dense(&mut rng, &q, 1.0);
                        q_rows.push(q);
                        d
                    };
                    if spec.capture_draft_logits {
                        out.draft_logits.push(logits);
                    }
                    drafts.push(d);
                }
            } else {
                for i in 0..kk {
                    assistant.record_step(&mut step)?;
                    assistant.record_token_copy(&mut step, &ids, i + 1)?;
                }
                if let Some(replace) = replace_drafts.as_mut() {
                    let mut with = replace(tokens.len(), kk);
                    if with.len() != kk {
                        return Err(Error::invalid(
                            OP,
                            "replacement drafts of a round",
                            kk,
                            with.len(),
                        ));
                    }
                    with.resize(k_cap, 0);
                    write_token_ids(ctx, &replacement, &with, vocab)?;
                    step.encoder().copy_buffer_to_buffer(
                        replacement.buffer(),
                        0,
                        ids.buffer(),
                        4,
                        kk as u64 * 4,
                    );
                }
            }
        }
        if host_drafts || kk == 0 {
            let mut all = Vec::with_capacity(m);
            all.push(seed);
            all.extend(&drafts);
            write_token_ids(ctx, &ids, &all, vocab)?;
        } else {
            // Slot 0 only: the drafts are copied into 1..=kk on the GPU.
            ids.write_bytes(ctx, bytemuck::bytes_of(&seed));
        }
        target.record_forward(ctx, &mut step, m, LogitRows::All)?;
        let plan = target.plan(ctx, m, LogitRows::All)?;
        let head = plan.head.as_ref().expect("a verify plan has logits");
        step.copy_to_readback(&head.next, &head.next_readback)?;
        if !greedy {
            step.copy_to_readback(&head.logits, &head.logits_readback)?;
        }
        if !host_drafts && kk > 0 {
            step.copy_to_readback(&ids, &ids_readback)?;
        }
        step.submit();
        let next_ids = head.next_readback.read_u32(ctx).await?;
        if !host_drafts && kk > 0 {
            drafts = ids_readback.read_u32(ctx).await?[1..m].to_vec();
        }

        // Acceptance.
        let (mut valid, accepted) = if greedy {
            let n = drafts
                .iter()
                .zip(&next_ids)
                .take_while(|(d, t)| d == t)
                .count();
            (next_ids[..=n].to_vec(), n)
        } else {
            let logits = head.logits_readback.read_f32(ctx).await?;
            let p_rows: Vec<Vec<f32>> = logits
                .chunks(vocab)
                .map(|row| dense(&sampler.distribution(row), vocab))
                .collect();
            speculative_accept(&mut rng, &drafts, &p_rows, &q_rows)
        };
        let seconds = timed.then(|| round_start.elapsed().as_secs_f64());
        valid.truncate(max_new - tokens.len());
        if let Some(i) = valid.iter().position(|t| options.stop_ids.contains(t)) {
            valid.truncate(i + 1);
        }
        let n = valid.len() - 1;
        target.rollback(p + n + 1)?;
        out.stats.rounds += 1;
        out.stats.drafted += kk;
        out.stats.accepted += n;
        if spec.trace {
            out.rounds.push(DraftRound {
                committed: tokens.len(),
                drafts: drafts.clone(),
                accepted: n,
            });
        }
        match (spec.schedule, adaptive.as_mut()) {
            (_, Some(schedule)) if kk == 0 => schedule.record_plain(seconds),
            (_, Some(schedule)) => schedule.record_round(kk, accepted, seconds),
            (DraftSchedule::Heuristic, None) if kk > 0 => {
                k = if n == kk {
                    (k + 2).min(k_cap)
                } else {
                    k.saturating_sub(1).max(1)
                };
            }
            _ => {}
        }
        last = LastForward {
            r: p + kk,
            m,
            plan: (m, LogitRows::All),
            row: n,
        };
        for t in valid {
            tokens.push(t);
            if !on_token(t) || options.stop_ids.contains(&t) {
                done = true;
                break;
            }
        }
    }
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
    out.tokens = tokens;
    Ok(out)
}
