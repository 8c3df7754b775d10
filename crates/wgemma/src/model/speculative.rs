//! MTP speculative decoding: the target with the Gemma 4 assistant drafter, round by round as
//! HF's assisted decoding does it with `SinglePositionMultiTokenCandidateGenerator`
//! (transformers 5.24, `generation/utils.py::_assisted_decoding`):
//!
//! 1. The first iteration drafts nothing: the target prefills the prompt and picks the first
//!    token (HF's `get_candidates` returns no candidates when `is_first_iteration`).
//! 2. Every round drafts k' = min(k, max_new_tokens - generated - 1) tokens at the constant
//!    position P (the seed's, seed = the last token, not yet in the target's cache), from
//!    the seed and the target's final-normed hidden state of the row that produced it (the
//!    prefill's last row, then row n of the last verify); k' = 0 is a plain target step.
//! 3. The target verifies [seed, d1..dk'] in ONE forward of k' + 1 rows; greedy acceptance is
//!    the longest prefix with d_i == argmax(row i - 1), plus the bonus token argmax(row n);
//!    the tokens are cut to the budget and after the first stop token; the target's caches
//!    roll back past the rejected rows.
//! 4. With `adaptive`, HF's heuristic schedule (`num_assistant_tokens_schedule =
//!    "heuristic"`): k += 2 after a round that accepted every draft, else k = max(1, k - 1),
//!    capped at [`MAX_DRAFT_TOKENS`] and the target's verify rows. (HF's MTP generator itself
//!    keeps k constant: it does not implement `update_candidate_strategy`.)
//!
//! Greedy rounds run in ONE submit and ONE wait: the k' draft passes (each draft stays on
//! the GPU: the argmax writes the token the next step embeds, and a buffer copy puts it in
//! the verify forward's token ids), then the verify pass, then the readback of the verify's
//! argmax ids and of the token ids (which hold the drafts).
//!
//! Temperature > 0: lossless speculative sampling (Leviathan et al. 2023, Algorithm 1):
//! draft d_i ~ q_i (the assistant's distribution through the same temperature / top-k /
//! top-p as the target's), accept with probability min(1, p_i(d_i) / q_i(d_i)), on the first
//! rejection draw from the normalised residual max(0, p_i - q_i), after k' acceptances draw
//! the bonus from p_{k'+1}. The output is distributed exactly as plain sampling's. (HF
//! differs here: its MTP generator drafts the assistant's argmax yet accepts with p/q of the
//! assistant's softmax, which is not lossless.) Drafts are sampled on the host, so a
//! sampling round waits once per draft step and once for the verify.

use super::assistant::{store_layer, Assistant, DraftView};
use super::config::LayerKind;
use super::forward::LogitRows;
use super::generate::{GenerateOptions, GenerateStats};
use super::sampling::Sampler;
use super::target::{Model, Want};
use crate::error::{Error, Result};
use crate::gpu::{GpuContext, Readback, Step};
use crate::ops::attention::KvLayout;
use crate::ops::embedding::write_token_ids;
use rand::{Rng as _, SeedableRng};
use web_time::Instant;

const OP: &str = "speculative";

/// The most drafts per round (`--draft-tokens` and the adaptive schedule).
pub const MAX_DRAFT_TOKENS: usize = 8;

/// How to draft.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpeculativeOptions {
    /// Drafts per round (HF `num_assistant_tokens`), 1..=8; default 2.
    pub draft_tokens: usize,
    /// HF's heuristic schedule: +2 after a fully accepted round, -1 otherwise.
    pub adaptive: bool,
    /// Keep a trace of every round ([`SpeculativeOutput::rounds`]).
    pub trace: bool,
    /// Read back every draft step's logits ([`SpeculativeOutput::draft_logits`]; for parity
    /// tests). Greedy drafts then go through the host, one submit per draft step.
    pub capture_draft_logits: bool,
}

impl Default for SpeculativeOptions {
    fn default() -> Self {
        SpeculativeOptions {
            draft_tokens: 2,
            adaptive: false,
            trace: false,
            capture_draft_logits: false,
        }
    }
}

/// One round after the prefill.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct DraftRound {
    /// Tokens generated before the round.
    pub committed: usize,
    /// The assistant's drafts (empty: a plain target step).
    pub drafts: Vec<u32>,
    /// Drafts accepted (the round commits `accepted + 1` tokens, fewer at the end).
    pub accepted: usize,
}

/// [`GenerateStats`] plus the speculative counts.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct SpeculativeStats {
    #[serde(flatten)]
    pub base: GenerateStats,
    /// Target forwards after the prefill (each verifies one round's drafts).
    pub rounds: usize,
    /// Drafts proposed.
    pub drafted: usize,
    /// Drafts accepted.
    pub accepted: usize,
    /// accepted / drafted (0 when nothing was drafted).
    pub acceptance_rate: f64,
    /// Tokens committed per round: (generated - 1) / rounds (the first token comes from the
    /// prefill).
    pub tokens_per_round: f64,
}

impl SpeculativeStats {
    /// `GenerateStats::summary` plus `| 31 rounds, 1.94 tok/round, acceptance 0.47 (29/62)`.
    pub fn summary(&self) -> String {
        format!(
            "{} | {} rounds, {:.2} tok/round, acceptance {:.2} ({}/{})",
            self.base.summary(),
            self.rounds,
            self.tokens_per_round,
            self.acceptance_rate,
            self.accepted,
            self.drafted
        )
    }
}

/// What [`generate_speculative`] returns.
#[derive(Debug, Clone, Default)]
pub struct SpeculativeOutput {
    pub tokens: Vec<u32>,
    pub stats: SpeculativeStats,
    /// Every round after the prefill (with [`SpeculativeOptions::trace`]).
    pub rounds: Vec<DraftRound>,
    /// Every draft step's logits, in call order (with
    /// [`SpeculativeOptions::capture_draft_logits`]).
    pub draft_logits: Vec<Vec<f32>>,
}

/// The target forward the next round's view derives from.
#[derive(Debug, Clone, Copy)]
struct LastForward {
    /// Last row written (R) and rows (M).
    r: usize,
    m: usize,
    /// The plan holding its hidden states, and the seed's row in it.
    plan: (usize, LogitRows),
    row: usize,
}

/// Checks what a session needs before the first round: the assistant is bound to this
/// target, k fits the verify plans, and the target's sliding rings keep every row of the
/// assistant's view. Returns the largest k a round may use.
fn check_session(
    target: &Model,
    assistant: &Assistant,
    spec: &SpeculativeOptions,
) -> Result<usize> {
    if !(1..=MAX_DRAFT_TOKENS).contains(&spec.draft_tokens) {
        return Err(Error::invalid(
            OP,
            "draft tokens per round (--draft-tokens)",
            format!("1..={MAX_DRAFT_TOKENS}"),
            spec.draft_tokens,
        ));
    }
    let verify = target.options.max_verify_rows;
    if spec.draft_tokens + 1 > verify {
        return Err(Error::invalid(
            OP,
            "draft tokens per round",
            format!(
                "<= {} (the target's max_verify_rows - 1)",
                verify.saturating_sub(1)
            ),
            spec.draft_tokens,
        ));
    }
    let k_cap = if spec.adaptive {
        MAX_DRAFT_TOKENS.min(verify - 1)
    } else {
        spec.draft_tokens
    };
    if !assistant.is_bound_to(target) {
        return Err(Error::invalid(
            OP,
            "assistant",
            "loaded for this target (its attention reads the target's caches)",
            "an assistant loaded for another model instance",
        ));
    }
    let w_a = assistant.window();
    if let Some(cache) =
        store_layer(&target.spec, LayerKind::Sliding).and_then(|l| target.kv_cache(l))
    {
        if let KvLayout::Sliding { .. } = cache.config().layout {
            let need = w_a.saturating_add(k_cap.max(1));
            if cache.slots() < need {
                return Err(Error::invalid(
                    OP,
                    "slots of the target's sliding KV ring",
                    format!(
                        ">= {need} (the assistant's window {w_a} + {} drafts: raise the prefill \
                         chunk or the verify rows)",
                        k_cap.max(1)
                    ),
                    cache.slots(),
                ));
            }
        }
    }
    Ok(k_cap)
}

/// A token distribution as a dense probability row.
fn dense(dist: &[(u32, f32)], vocab: usize) -> Vec<f32> {
    let mut row = vec![0.0f32; vocab];
    for &(t, p) in dist {
        row[t as usize] = p;
    }
    row
}

/// Draws from a dense row of non-negative weights summing to `total`.
fn draw_dense(rng: &mut rand_chacha::ChaCha8Rng, row: &[f32], total: f64) -> u32 {
    let u = rng.random::<f64>() * total;
    let mut acc = 0.0f64;
    let mut last = 0;
    for (i, &p) in row.iter().enumerate() {
        if p > 0.0 {
            acc += p as f64;
            last = i;
            if u < acc {
                return i as u32;
            }
        }
    }
    last as u32
}

/// Lossless speculative sampling of one round: `p` has k + 1 dense target rows, `q` the k
/// dense draft rows the `drafts` were drawn from. Returns the committed tokens (accepted
/// drafts, then the resampled or bonus token) and the number of drafts accepted.
pub fn speculative_accept(
    rng: &mut rand_chacha::ChaCha8Rng,
    drafts: &[u32],
    p: &[Vec<f32>],
    q: &[Vec<f32>],
) -> (Vec<u32>, usize) {
    let mut out = Vec::with_capacity(drafts.len() + 1);
    for (i, &d) in drafts.iter().enumerate() {
        let (pd, qd) = (p[i][d as usize], q[i][d as usize]);
        // qd > 0: d was drawn from q.
        if qd > 0.0 && rng.random::<f64>() < (pd as f64 / qd as f64).min(1.0) {
            out.push(d);
            continue;
        }
        let residual: Vec<f32> = p[i]
            .iter()
            .zip(&q[i])
            .map(|(&a, &b)| (a - b).max(0.0))
            .collect();
        let total: f64 = residual.iter().map(|&v| v as f64).sum();
        let t = if total > 0.0 {
            draw_dense(rng, &residual, total)
        } else {
            // p == q up to rounding: the residual is empty, p itself is the answer.
            draw_dense(rng, &p[i], p[i].iter().map(|&v| v as f64).sum())
        };
        out.push(t);
        return (out, i);
    }
    let last = &p[drafts.len()];
    out.push(draw_dense(rng, last, last.iter().map(|&v| v as f64).sum()));
    (out, drafts.len())
}

fn per_second(count: usize, seconds: f64) -> f64 {
    if seconds > 0.0 {
        count as f64 / seconds
    } else {
        0.0
    }
}

/// Generates after `prompt` with `assistant` drafting for `target` (the target is reset
/// first). Greedy output is token-identical to [`super::generate::generate`]'s; sampled
/// output has the same distribution. `on_token` sees each committed token and may return
/// `false` to stop.
pub async fn generate_speculative(
    target: &mut Model,
    assistant: &mut Assistant,
    ctx: &GpuContext,
    prompt: &[u32],
    options: &GenerateOptions,
    spec: &SpeculativeOptions,
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
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(params.seed);
    let vocab = target.spec.config.vocab_size;
    let (w_t, w_a) = (assistant.target_window(), assistant.window());
    let ids_readback = Readback::new(ctx, "speculative.ids", (k_cap as u64 + 1) * 4);
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

    while !done && tokens.len() < max_new {
        let seed = *tokens.last().expect("one token at least");
        let p = l + tokens.len() - 1;
        let kk = k.min(max_new - tokens.len() - 1);
        let m = kk + 1;
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
            assistant.begin_round(
                ctx,
                DraftView::hf(p, last.r, last.m, w_t, w_a)?,
                target.sequence_slot(),
            );
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
        let next = head.next_readback.read_u32(ctx).await?;
        if !host_drafts && kk > 0 {
            drafts = ids_readback.read_u32(ctx).await?[1..m].to_vec();
        }

        // Acceptance.
        let (mut valid, _) = if greedy {
            let n = drafts.iter().zip(&next).take_while(|(d, t)| d == t).count();
            (next[..=n].to_vec(), n)
        } else {
            let logits = head.logits_readback.read_f32(ctx).await?;
            let p_rows: Vec<Vec<f32>> = logits
                .chunks(vocab)
                .map(|row| dense(&sampler.distribution(row), vocab))
                .collect();
            speculative_accept(&mut rng, &drafts, &p_rows, &q_rows)
        };
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
        if spec.adaptive && kk > 0 {
            k = if n == kk {
                (k + 2).min(k_cap)
            } else {
                k.saturating_sub(1).max(1)
            };
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
        (tokens.len() - 1) as f64 / s.rounds as f64
    } else {
        0.0
    };
    out.tokens = tokens;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chi2(counts: &[usize], probs: &[f64]) -> f64 {
        let n: usize = counts.iter().sum();
        counts
            .iter()
            .zip(probs)
            .filter(|(_, &p)| p > 0.0)
            .map(|(&c, &p)| {
                let e = p * n as f64;
                (c as f64 - e).powi(2) / e
            })
            .sum()
    }

    #[test]
    fn speculative_accept_is_lossless_on_known_distributions() {
        // Target p and draft q over 5 tokens, two draft positions; p2 depends on nothing
        // (the test checks the marginal of the first two committed tokens).
        let p0 = vec![0.1f32, 0.4, 0.2, 0.3, 0.0];
        let p1 = vec![0.25f32, 0.25, 0.1, 0.1, 0.3];
        let p2 = vec![0.2f32, 0.2, 0.2, 0.2, 0.2];
        let q0 = vec![0.5f32, 0.1, 0.1, 0.1, 0.2];
        let q1 = vec![0.0f32, 0.6, 0.2, 0.1, 0.1];
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
        let (mut first, mut second) = ([0usize; 5], [0usize; 5]);
        let n = 60_000;
        for _ in 0..n {
            let d0 = draw_dense(&mut rng, &q0, 1.0);
            let d1 = draw_dense(&mut rng, &q1, 1.0);
            let (toks, acc) = speculative_accept(
                &mut rng,
                &[d0, d1],
                &[p0.clone(), p1.clone(), p2.clone()],
                &[q0.clone(), q1.clone()],
            );
            assert_eq!(toks.len(), acc + 1);
            first[toks[0] as usize] += 1;
            if toks.len() > 1 {
                second[toks[1] as usize] += 1;
            }
        }
        let p0f: Vec<f64> = p0.iter().map(|&v| v as f64).collect();
        // 3 dof (token 4 has p = 0 and must never appear): p = 0.001 at 16.27.
        assert_eq!(first[4], 0, "{first:?}");
        let c = chi2(&first, &p0f);
        assert!(c < 16.27, "first token chi2 {c}: {first:?}");
        // Given that the first draft was accepted, the second token follows p1.
        let total: usize = second.iter().sum();
        assert!(total > 10_000);
        let p1f: Vec<f64> = p1.iter().map(|&v| v as f64).collect();
        let c = chi2(&second, &p1f);
        assert!(c < 18.47, "second token chi2 {c}: {second:?}"); // 4 dof
    }

    #[test]
    fn a_lossy_rule_fails_the_same_test() {
        // Sanity check of the test itself: accepting every draft gives q's distribution.
        let p0 = [0.1f32, 0.4, 0.2, 0.3];
        let q0 = [0.5f32, 0.1, 0.1, 0.3];
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        let mut counts = [0usize; 4];
        for _ in 0..20_000 {
            counts[draw_dense(&mut rng, &q0, 1.0) as usize] += 1;
        }
        let p0f: Vec<f64> = p0.iter().map(|&v| v as f64).collect();
        assert!(chi2(&counts, &p0f) > 1000.0);
    }
}
