//! Synthetic pairs: lossless on every route, the adaptive schedule, replaced drafts.

use super::*;

/// The demo's pair: the Tiny synthetic target and the synthetic centroid-head assistant at
/// the E2B head shape (2048 centroids -> top 32: the fast TopK route, certified scatter).
pub(crate) fn synthetic_pair(format: WeightFormat) -> (KvState, Assistant) {
    use wgemma::formats::synthetic::{SyntheticAssistant, SyntheticShape, SyntheticWeights};
    let ctx = test_context();
    let target = KvState::load(
        ctx,
        &SyntheticWeights { seed: 1 },
        SyntheticShape::Tiny.spec(),
        ModelOptions {
            format,
            max_context: 256,
            prefill_chunk: 16,
            max_verify_rows: 9,
            sequences: 1,
        },
        &mut |_, _| {},
    )
    .unwrap();
    let source = SyntheticAssistant {
        target_seed: 1,
        seed: 2,
    };
    let assistant = Assistant::load(
        ctx,
        &source,
        parse_assistant_config(&source.config_json()).unwrap(),
        &target,
        &OpSet::with_mtp(),
        AssistantOptions { format },
    )
    .unwrap();
    (target, assistant)
}

#[test]
fn synthetic_pair_is_lossless_on_the_fast_routes() {
    let (target, assistant) = synthetic_pair(WeightFormat::Q4 { group: 32 });
    assert_eq!(assistant.head_routes().topk, Some(TopKRoute::Fast2048To32));
    assert_eq!(
        assistant.head_routes().scatter,
        Some(ScatterRoute::ParallelUnique)
    );
    let (mut target, mut assistant) = (target, assistant);
    let prompt: Vec<u32> = vec![2, 17, 391, 3000, 45, 45, 1024];
    let options = greedy_options(24);
    let want = plain(&mut target, &prompt, &options);
    for (k, schedule) in [
        (2, DraftSchedule::Fixed),
        (1, DraftSchedule::Fixed),
        (4, DraftSchedule::Fixed),
        (2, DraftSchedule::Heuristic),
    ] {
        let spec = SpeculativeOptions {
            draft_tokens: k,
            schedule,
            trace: true,
            ..Default::default()
        };
        let out = run_on(&mut target, &mut assistant, &prompt, &options, spec);
        assert_eq!(out.tokens, want, "k {k} {schedule:?}");
        // The synthetic drafter's first draft of a round matches, later ones drift: with
        // k >= 2 every round rejects something (rollback), with k = 1 none does.
        let s = &out.stats;
        if k == 1 {
            assert_eq!(s.accepted, s.drafted, "{}", s.summary());
        } else {
            assert!(s.accepted > 0 && s.accepted < s.drafted, "{}", s.summary());
        }
    }
}

/// The adaptive schedule (k in 0..=8 from measured acceptance and costs, plain pipelined
/// chunks at k = 0) keeps the output token-identical to plain greedy, with a prompt longer
/// than the sliding window so that rounds after plain steps draft with
/// `DraftView::after_plain_step` (whether a round follows a plain chunk within the budget
/// depends on the measured costs; the E2B bench's probes do, and check their output).
#[test]
fn adaptive_schedule_equals_plain_greedy() {
    let (mut target, mut assistant) = synthetic_pair(WeightFormat::Q4 { group: 32 });
    let prompt: Vec<u32> = (0..40u32).map(|i| (i * 977 + 13) % 4096).collect();
    let options = greedy_options(96);
    let want = plain(&mut target, &prompt, &options);
    let spec = SpeculativeOptions {
        draft_tokens: 2,
        schedule: DraftSchedule::Adaptive,
        trace: true,
        ..Default::default()
    };
    let out = run_on(&mut target, &mut assistant, &prompt, &options, spec);
    assert_eq!(out.tokens, want, "{}", out.stats.summary());
    let s = &out.stats;
    assert!(s.plain_steps >= 8, "{}", s.summary());
    assert!(s.drafted > 0, "{}", s.summary());
    // Every token is accounted for: the prefill's, the rounds' and the plain steps'.
    let committed: usize = out
        .rounds
        .iter()
        .map(|r| {
            if r.drafts.is_empty() {
                1
            } else {
                r.accepted + 1
            }
        })
        .sum();
    assert_eq!(committed + 1, out.tokens.len());
}

/// The benchmarks' rounds: the assistant's draft steps run while the verify reads an
/// oracle's drafts. With the target's own tokens every draft is accepted; with tokens it
/// rejects none is; the output is plain greedy's either way.
#[test]
fn replaced_drafts_set_the_acceptance() {
    use wgemma::generate::speculative::{generate_speculative_with_oracle, OracleDrafts, Phase};
    let (mut target, mut assistant) = synthetic_pair(WeightFormat::Q4 { group: 32 });
    let prompt: Vec<u32> = vec![2, 17, 391, 3000, 45, 45, 1024];
    let options = greedy_options(20);
    let want = plain(&mut target, &prompt, &options);
    for (shift, schedule, drafter) in [
        (0u32, DraftSchedule::Fixed, true),
        (1, DraftSchedule::Fixed, true),
        (0, DraftSchedule::Adaptive, true),
        (0, DraftSchedule::Fixed, false),
    ] {
        let ctx = test_context();
        let before = ctx.counters().snapshot().0;
        let spec = SpeculativeOptions {
            draft_tokens: 3,
            schedule,
            ..Default::default()
        };
        let out = pollster::block_on(generate_speculative_with_oracle(
            &mut target,
            &mut assistant,
            test_context(),
            &prompt,
            &options,
            &spec,
            OracleDrafts {
                reference: want.clone(),
                keep: Box::new(move |k| vec![shift == 0; k]),
                drafter,
            },
        ))
        .unwrap();
        assert_eq!(out.tokens, want, "shift {shift} {schedule:?}");
        // The phases cover the generation's dispatches, a verify and a commit per round,
        // the drafter's steps in every round that drafts. (The counters are the shared
        // context's: tests running beside this one add dispatches, never remove any.)
        let spans = &out.phases;
        let total: u64 = spans.iter().map(|p| p.dispatches).sum();
        assert!(total > 0 && total <= ctx.counters().snapshot().0 - before);
        let count = |phase: Phase| spans.iter().filter(|p| p.phase == phase).count();
        let verifies = count(Phase::Verify);
        assert!(verifies >= out.stats.rounds, "{spans:?}");
        assert_eq!(count(Phase::Commit), verifies);
        if drafter {
            let drafting = spans
                .iter()
                .filter(|p| p.phase == Phase::Verify && p.drafts > 0)
                .count();
            assert_eq!(count(Phase::Drafter), drafting, "{spans:?}");
        }
        let s = &out.stats;
        assert!(s.drafted > 0, "{}", s.summary());
        let expected = if shift == 0 { s.drafted } else { 0 };
        assert_eq!(
            s.accepted,
            expected,
            "shift {shift} {schedule:?}: {}",
            s.summary()
        );
    }
}

/// Q4 target and assistant: still token-identical to plain Q4 greedy (and to HF on the
/// fake-quantised target weights).
#[test]
fn e2b_like_q4_speculative_equals_plain() {
    let mut pair = load_pair("e2b_like_assistant", WeightFormat::Q4 { group: 32 }, 3);
    let tf = Fixture::open("e2b_like");
    for p in tf.expected["prompts"].as_array().unwrap() {
        let prompt = ids(&p["prompt"]);
        let want = ids(&p["q4"]["greedy"]);
        let options = greedy_options(want.len());
        let out = run(&mut pair, &prompt, &options, SpeculativeOptions::default());
        assert_eq!(out.tokens, want);
        assert_eq!(plain(&mut pair.target, &prompt, &options), want);
    }
}

/// HF's heuristic schedule: +2 after a fully accepted round, -1 otherwise (min 1), capped
/// by the budget and 8 drafts; the output stays the plain greedy one.
#[test]
fn adaptive_schedule_follows_hf_heuristic() {
    let mut pair = load_pair("e2b_like_assistant", WeightFormat::F32, 9);
    let prompts = pair.hf["prompts"].as_array().unwrap().clone();
    for p in prompts {
        let prompt = ids(&p["prompt"]);
        let want = ids(&p["plain_greedy"]);
        let spec = SpeculativeOptions {
            schedule: DraftSchedule::Heuristic,
            trace: true,
            ..Default::default()
        };
        let out = run(&mut pair, &prompt, &greedy_options(want.len()), spec);
        assert_eq!(out.tokens, want);
        let mut k = 2usize;
        let mut grew = false;
        for r in &out.rounds {
            let kk = k.min(want.len() - r.committed - 1);
            assert_eq!(r.drafts.len(), kk, "{:?}", out.rounds);
            if kk > 0 {
                let next = if r.accepted == kk {
                    (k + 2).min(8)
                } else {
                    (k - 1).max(1)
                };
                grew |= next > k;
                k = next;
            }
        }
        assert!(grew || out.rounds.iter().all(|r| r.accepted < r.drafts.len()));
    }
}
