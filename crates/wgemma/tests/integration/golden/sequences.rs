//! The decoding state on the golden fixtures: pipelined decode stopping and rolling back,
//! batched sequences against HF's greedy continuations, sequence slots, refused inputs and
//! rollbacks, and the bounded plan cache.

use super::options;
use crate::common::{ids, Fixture};
use wgemma::generate::sampling::argmax;
use wgemma::gpu::test_context;
use wgemma::model::target::{ModelOptions, Want};
use wgemma::model::weights::WeightFormat;

#[test]
fn pipelined_decode_stops_where_asked_and_rolls_back_the_step_ahead() {
    let fx = Fixture::open("e2b_like");
    let mut state = fx.state(options(WeightFormat::F32));
    let (prompt, info) = &fx.prompts()[0];
    let want = ids(&info["f32"]["greedy"]);
    let first = pollster::block_on(state.forward(test_context(), prompt, Want::NextToken))
        .unwrap()
        .next[0];
    // Stop at the third token: one more step has been submitted and must be undone.
    let mut count = 0;
    let got = pollster::block_on(state.decode_greedy(test_context(), first, 20, &mut |_| {
        count += 1;
        count < 3
    }))
    .unwrap();
    assert_eq!(got, want[1..4].to_vec());
    assert_eq!(
        state.len(),
        prompt.len() + 3,
        "fed: first + 2 produced tokens"
    );
    // Decoding on from there continues the same greedy sequence.
    let next = pollster::block_on(state.forward(test_context(), &[got[2]], Want::NextToken))
        .unwrap()
        .next[0];
    assert_eq!(next, want[4]);
    // A context that ends mid-run: the step that does not fit is an error only when needed.
    let mut tight = fx.state(ModelOptions {
        max_context: prompt.len() + 2,
        ..options(WeightFormat::F32)
    });
    let first = pollster::block_on(tight.forward(test_context(), prompt, Want::NextToken))
        .unwrap()
        .next[0];
    let two =
        pollster::block_on(tight.decode_greedy(test_context(), first, 2, &mut |_| true)).unwrap();
    assert_eq!(two, want[1..3].to_vec());
    tight.rollback(prompt.len()).unwrap();
    let err = pollster::block_on(tight.decode_greedy(test_context(), first, 3, &mut |_| true))
        .unwrap_err();
    assert!(err.to_string().contains("context length"), "{err}");
}

/// Continuous batching: each prompt prefilled in its own sequence (KV slot), then all of them
/// decoded together, one `forward_batch` row per unfinished sequence (rows leave the batch as
/// their continuations end), reproduce HF's greedy continuation of every prompt; the state's
/// own sequence is untouched.
fn check_batched_greedy(name: &str) {
    let fx = Fixture::open(name);
    let prompts = fx.prompts();
    let mut state = fx.state(ModelOptions {
        sequences: prompts.len() + 1,
        ..options(WeightFormat::F32)
    });
    let ctx = test_context();
    let mut seqs = Vec::new();
    let mut got: Vec<Vec<u32>> = Vec::new();
    let mut wants = Vec::new();
    for (prompt, info) in &prompts {
        let mut seq = state.new_sequence().unwrap();
        state.swap_sequence(&mut seq).unwrap();
        let first = pollster::block_on(state.forward(ctx, prompt, Want::NextToken))
            .unwrap()
            .next[0];
        state.swap_sequence(&mut seq).unwrap();
        assert_eq!(seq.len(), prompt.len());
        seqs.push(seq);
        got.push(vec![first]);
        wants.push(ids(&info["f32"]["greedy"]));
    }
    assert_eq!(
        state.len(),
        0,
        "{name}: the state's own sequence stays empty"
    );
    loop {
        let mut rows: Vec<(&mut wgemma::model::target::Sequence, u32)> = Vec::new();
        let mut which = Vec::new();
        for (i, seq) in seqs.iter_mut().enumerate() {
            if got[i].len() < wants[i].len() {
                rows.push((seq, *got[i].last().unwrap()));
                which.push(i);
            }
        }
        if rows.is_empty() {
            break;
        }
        let want = if which.len() % 2 == 0 {
            Want::AllNext
        } else {
            Want::AllLogits
        };
        let out = pollster::block_on(state.forward_batch(ctx, &mut rows, want)).unwrap();
        assert_eq!(out.next.len(), which.len());
        if want == Want::AllLogits {
            let vocab = state.model().spec.config.vocab_size;
            for (row, next) in out.logits.chunks(vocab).zip(&out.next) {
                assert_eq!(argmax(row), *next, "{name}: logits and greedy ids agree");
            }
        }
        for (i, next) in which.into_iter().zip(out.next) {
            got[i].push(next);
        }
    }
    for (p, (got, want)) in got.iter().zip(&wants).enumerate() {
        assert_eq!(got, want, "{name} p{p}: batched greedy continuation");
        assert_eq!(seqs[p].len(), prompts[p].0.len() + want.len() - 1);
    }
}

#[test]
fn e2b_like_batched_sequences_match_hf() {
    check_batched_greedy("e2b_like");
}

#[test]
fn dense_kv_batched_sequences_match_hf() {
    check_batched_greedy("dense_kv");
}

#[test]
fn sequences_hold_their_slots_until_dropped() {
    let fx = Fixture::open("e2b_like");
    let ctx = test_context();
    let mut state = fx.state(ModelOptions {
        sequences: 2,
        ..options(WeightFormat::F32)
    });
    let (prompt, info) = &fx.prompts()[0];
    let want = ids(&info["f32"]["greedy"]);
    let mut a = state.new_sequence().unwrap();
    assert_eq!(a.slot(), 1);
    let err = state.new_sequence().unwrap_err().to_string();
    assert!(err.contains("all held"), "{err}");
    // A sequence of another state (here another model's) is refused, and nothing moves.
    let other = fx.state(ModelOptions {
        sequences: 2,
        ..options(WeightFormat::F32)
    });
    let mut foreign = other.new_sequence().unwrap();
    assert!(state.swap_sequence(&mut foreign).is_err());
    let err = pollster::block_on(state.forward_batch(ctx, &mut [(&mut foreign, 1)], Want::AllNext))
        .unwrap_err()
        .to_string();
    assert!(err.contains("another KvState"), "{err}");
    assert!(foreign.is_empty());
    // The active sequence and `a` are independent: a prompt in `a`, then the state's own
    // sequence gets the same prompt and the same first token.
    state.swap_sequence(&mut a).unwrap();
    let first = pollster::block_on(state.forward(ctx, prompt, Want::NextToken))
        .unwrap()
        .next[0];
    assert_eq!(first, want[0]);
    state.swap_sequence(&mut a).unwrap();
    assert_eq!((state.len(), a.len()), (0, prompt.len()));
    let again = pollster::block_on(state.forward(ctx, prompt, Want::NextToken))
        .unwrap()
        .next[0];
    assert_eq!(again, first);
    // Rolling `a` back and re-feeding its last token gives the same next token.
    a.rollback(prompt.len() - 1).unwrap();
    let out = pollster::block_on(state.forward_batch(
        ctx,
        &mut [(&mut a, *prompt.last().unwrap())],
        Want::AllNext,
    ))
    .unwrap();
    assert_eq!(out.next, vec![first]);
    // Dropping `a` gives its slot back.
    drop(a);
    assert_eq!(state.new_sequence().unwrap().slot(), 1);
    drop(other.new_sequence());
}

/// Bad input: ids past the vocabulary and prompts past the context are clear errors.
#[test]
fn out_of_vocab_ids_and_overlong_prompts_are_refused() {
    let fx = Fixture::open("e2b_like");
    let mut state = fx.state(ModelOptions {
        max_context: 8,
        ..options(WeightFormat::F32)
    });
    let err = pollster::block_on(state.forward(test_context(), &[2, 512], Want::NextToken))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("token id at index 1") && err.contains("512"),
        "{err}"
    );
    let err = pollster::block_on(state.forward(test_context(), &[2; 9], Want::NextToken))
        .unwrap_err()
        .to_string();
    assert!(err.contains("--context") && err.contains('9'), "{err}");
    // Nothing was appended by the refused forwards.
    assert_eq!(state.len(), 0);
}

/// A rollback the sliding rings cannot honour is refused and moves no cache.
#[test]
fn refused_rollback_moves_nothing() {
    let fx = Fixture::open("e2b_like");
    let mut state = fx.state(ModelOptions {
        prefill_chunk: 4,
        ..options(WeightFormat::F32)
    });
    let (prompt, _) = &fx.prompts()[1];
    let ctx = test_context();
    pollster::block_on(state.forward(ctx, prompt, Want::NextToken)).unwrap();
    let len = state.len();
    // The rings keep only max_rows (4) positions below the furthest written.
    assert!(state.rollback(len - 10).is_err());
    assert_eq!(state.len(), len);
    // The model still decodes as if nothing happened: same next token as a fresh run.
    let a = pollster::block_on(state.forward(ctx, &[7], Want::NextToken)).unwrap();
    state.reset();
    pollster::block_on(state.forward(ctx, prompt, Want::NextToken)).unwrap();
    let b = pollster::block_on(state.forward(ctx, &[7], Want::NextToken)).unwrap();
    assert_eq!(a.next, b.next);
    // A legal rollback works.
    state.rollback(state.len() - 1).unwrap();
    assert_eq!(state.len(), len);
}

/// Forwards of 20 different row counts keep at most 16 plans (the least recently used
/// goes), and a sequence fed in such pieces still gives the whole prompt's next token.
#[test]
fn plan_cache_stays_bounded() {
    let fx = Fixture::open("e2b_like");
    let (prompt, info) = &fx.prompts()[0];
    let want = ids(&info["f32"]["greedy"])[0];
    let mut state = fx.state(ModelOptions {
        max_context: 256,
        prefill_chunk: 32,
        ..options(WeightFormat::F32)
    });
    for m in 1..=20 {
        let tokens: Vec<u32> = (0..m).map(|i| (i * 7 + 3) as u32).collect();
        state.reset();
        pollster::block_on(state.forward(test_context(), &tokens, Want::NextToken)).unwrap();
        assert!(state.plan_count() <= 16, "{} plans", state.plan_count());
    }
    state.reset();
    let mut next = 0;
    for piece in prompt.chunks(3) {
        next = pollster::block_on(state.forward(test_context(), piece, Want::NextToken))
            .unwrap()
            .next[0];
    }
    assert_eq!(next, want);
}
