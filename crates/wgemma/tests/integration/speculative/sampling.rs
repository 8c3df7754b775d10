//! Speculative sampling keeps the plain sampling distribution.

use super::synthetic::synthetic_pair;
use super::*;

/// Chi-square critical value at p = 0.001 (Wilson-Hilferty).
fn chi2_critical(dof: usize) -> f64 {
    let d = dof as f64;
    let z = 3.09;
    d * (1.0 - 2.0 / (9.0 * d) + z * (2.0 / (9.0 * d)).sqrt()).powi(3)
}

const TEMPERATURE: f32 = 1.0;

/// Lossless speculative sampling on a tiny model: every seeded run's tokens are plain
/// sampling's with the same seed (draws are keyed by output position, drafts accepted while
/// they equal the target's draws), and the joint distribution of the first three tokens over
/// many seeds (temperature 1, top-k 3, two drafts per round) fits the exact distribution of
/// plain sampling, computed from the target's logits.
#[test]
fn speculative_sampling_has_the_plain_sampling_distribution() {
    use std::collections::HashMap;
    use wgemma::generate::sampling::Sampler;
    let mut pair = load_pair("e2b_like_assistant", WeightFormat::F32, 3);
    // The prompt and the first 4 greedy tokens, which end in 158: the target then tends to
    // repeat 158 and the echo drafter proposes it, so drafts are accepted AND rejected.
    let mut prompt = ids(&pair.hf["prompts"][0]["prompt"]);
    prompt.extend(&ids(&pair.hf["prompts"][0]["plain_greedy"])[..4]);
    assert_eq!(prompt.last(), Some(&158));
    let params = |seed| SamplingParams {
        temperature: TEMPERATURE,
        top_k: 3,
        top_p: 1.0,
        seed,
        ..SamplingParams::default()
    };
    let ctx = test_context();
    let mut dist = |tokens: &[u32]| -> Vec<(u32, f32)> {
        pair.target.reset();
        let out = pollster::block_on(pair.target.forward(ctx, tokens, Want::LastLogits)).unwrap();
        Sampler::new(params(0)).unwrap().distribution(&out.logits)
    };
    let mut exact: HashMap<[u32; 3], f64> = HashMap::new();
    for (a, pa) in dist(&prompt) {
        let pa_prompt: Vec<u32> = prompt.iter().copied().chain([a]).collect();
        for (b, pb) in dist(&pa_prompt) {
            let pb_prompt: Vec<u32> = pa_prompt.iter().copied().chain([b]).collect();
            for (c, pc) in dist(&pb_prompt) {
                exact.insert([a, b, c], pa as f64 * pb as f64 * pc as f64);
            }
        }
    }
    let runs = 200u64;
    let mut counts: HashMap<[u32; 3], usize> = HashMap::new();
    let (mut drafted, mut accepted) = (0, 0);
    for seed in 0..runs {
        let options = GenerateOptions {
            max_new_tokens: 3,
            sampling: params(seed),
            stop_ids: vec![],
        };
        let out = run(&mut pair, &prompt, &options, SpeculativeOptions::default());
        let plain_tokens = plain(&mut pair.target, &prompt, &options);
        assert_eq!(out.tokens, plain_tokens, "seed {seed}");
        drafted += out.stats.drafted;
        accepted += out.stats.accepted;
        *counts
            .entry([out.tokens[0], out.tokens[1], out.tokens[2]])
            .or_default() += 1;
    }
    for key in counts.keys() {
        assert!(
            exact.contains_key(key),
            "{key:?} has probability 0 under plain sampling"
        );
    }
    // Cells with an expected count < 5 are pooled.
    let mut cells: Vec<(f64, usize)> = Vec::new();
    let (mut pooled_e, mut pooled_c) = (0.0, 0);
    for (key, p) in &exact {
        let e = p * runs as f64;
        let c = counts.get(key).copied().unwrap_or(0);
        if e < 5.0 {
            pooled_e += e;
            pooled_c += c;
        } else {
            cells.push((e, c));
        }
    }
    if pooled_e > 0.0 {
        cells.push((pooled_e, pooled_c));
    }
    let chi2: f64 = cells.iter().map(|&(e, c)| (c as f64 - e).powi(2) / e).sum();
    let dof = cells.len() - 1;
    eprintln!(
        "chi2 {chi2:.1} over {} cells (critical {:.1}); drafts accepted {accepted}/{drafted}",
        cells.len(),
        chi2_critical(dof)
    );
    assert!(dof >= 4, "{cells:?}");
    assert!(accepted > 0 && accepted < drafted, "{accepted}/{drafted}");
    assert!(
        chi2 < chi2_critical(dof),
        "chi2 {chi2} >= {}",
        chi2_critical(dof)
    );
}

/// Pipelined greedy rounds (round r + 1 submitted before round r is read; the accepted
/// prefix, the bonus token, the positions and the assistant's view computed on the GPU) are
/// token-identical to plain greedy decoding over many rounds with partial acceptance, with
/// a prompt past the sliding window (32), and leave the target where plain decoding does.
#[test]
fn pipelined_rounds_equal_plain_greedy() {
    let (mut target, mut assistant) = synthetic_pair(WeightFormat::Q4 { group: 32 });
    for prompt_len in [7u32, 40] {
        let prompt: Vec<u32> = (0..prompt_len).map(|i| (i * 977 + 13) % 4096).collect();
        let options = greedy_options(80);
        let want = plain(&mut target, &prompt, &options);
        let plain_len = target.len();
        for (k, schedule) in [
            (2, DraftSchedule::Fixed),
            (4, DraftSchedule::Fixed),
            (8, DraftSchedule::Fixed),
            (3, DraftSchedule::Heuristic),
            (2, DraftSchedule::Adaptive),
        ] {
            let spec = SpeculativeOptions {
                draft_tokens: k,
                schedule,
                trace: true,
                ..Default::default()
            };
            let out = run_on(&mut target, &mut assistant, &prompt, &options, spec);
            let name = format!("prompt {prompt_len} k {k} {schedule:?}");
            assert_eq!(out.tokens, want, "{name}: {}", out.stats.summary());
            assert_eq!(target.len(), plain_len, "{name}: cache length");
            let s = &out.stats;
            // Every token is accounted for, round by round.
            let mut committed = 1;
            for r in &out.rounds {
                assert_eq!(r.committed, committed, "{name}: {:?}", out.rounds);
                committed += if r.drafts.is_empty() {
                    1
                } else {
                    r.accepted + 1
                };
            }
            assert_eq!(committed, out.tokens.len(), "{name}");
            match schedule {
                // HF's heuristic k follows each round's n: never pipelined. A ring of 16
                // rows cannot take back 8 + 9 rows run ahead: k = 8 drains every round.
                DraftSchedule::Heuristic => assert_eq!(s.pipelined_rounds, 0, "{name}"),
                _ if k == 8 => assert_eq!(s.pipelined_rounds, 0, "{name}"),
                DraftSchedule::Fixed => {
                    assert!(s.pipelined_rounds * 2 > s.rounds, "{name}: {s:?}");
                    assert!(s.accepted > 0 && s.accepted < s.drafted, "{name}: {s:?}");
                }
                DraftSchedule::Adaptive => {}
            }
            if schedule == DraftSchedule::Fixed {
                // HF's k sequence: k' = min(k, budget - 1) every round.
                for r in &out.rounds {
                    assert_eq!(r.drafts.len(), k.min(80 - r.committed - 1), "{name}");
                }
            }
        }
    }
}

/// A budget that ends inside a round, stop tokens found by the round before the last one
/// submitted, and a caller that stops: the output is plain greedy's, cut the same way,
/// and the run-ahead round is rolled back (the next forward continues like plain's).
#[test]
fn pipelined_rounds_stop_like_plain_decoding() {
    let (mut target, mut assistant) = synthetic_pair(WeightFormat::Q4 { group: 32 });
    let prompt: Vec<u32> = (0..40u32).map(|i| (i * 131 + 7) % 4096).collect();
    let long = plain(&mut target, &prompt, &greedy_options(60));
    let spec = |k| SpeculativeOptions {
        draft_tokens: k,
        trace: true,
        ..Default::default()
    };
    // Budgets ending at every offset of a round.
    for max_new in (3..24).chain([37, 41]) {
        for k in [2, 3] {
            let out = run_on(
                &mut target,
                &mut assistant,
                &prompt,
                &greedy_options(max_new),
                spec(k),
            );
            assert_eq!(out.tokens, long[..max_new], "max_new {max_new} k {k}");
            assert_eq!(target.len(), prompt.len() + max_new - 1);
        }
    }
    // Stop tokens: each of several positions (the first occurrence ends the output).
    for at in [1, 4, 9, 17, 30, 45] {
        let stop = long[at];
        let options = GenerateOptions {
            stop_ids: vec![stop],
            ..greedy_options(60)
        };
        let want = plain(&mut target, &prompt, &options);
        assert_eq!(*want.last().unwrap(), stop);
        let plain_len = target.len();
        // What plain decoding produces next from there.
        let after = |target: &mut KvState| {
            pollster::block_on(target.forward(test_context(), &[stop], Want::NextToken))
                .unwrap()
                .next
        };
        let plain_next = after(&mut target);
        for k in [2, 4] {
            let out = run_on(&mut target, &mut assistant, &prompt, &options, spec(k));
            assert_eq!(out.tokens, want, "stop at {at} k {k}");
            assert_eq!(target.len(), plain_len, "stop at {at} k {k}");
            assert_eq!(after(&mut target), plain_next, "stop at {at} k {k}");
        }
    }
    // The caller stops after 11 tokens.
    let mut seen = 0;
    let out = pollster::block_on(generate_speculative(
        &mut target,
        &mut assistant,
        test_context(),
        &prompt,
        &greedy_options(60),
        &spec(2),
        &mut |_| {
            seen += 1;
            seen < 11
        },
    ))
    .unwrap();
    assert_eq!(out.tokens, long[..11]);
    assert_eq!(target.len(), prompt.len() + 10);
}
