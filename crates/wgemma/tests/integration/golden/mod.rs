//! Parity with HF transformers on the golden fixtures (tools/golden): logits at every
//! position, teacher-forced argmax, greedy continuations, Q4 against HF on the same
//! fake-quantised weights, and chunked prefill against token-by-token decode; the decoding
//! state's sequences and guards in [`sequences`], folded plans against their kernels in
//! [`folded`].

mod folded;
mod sequences;

use crate::common::{ids, Fixture};
use wgemma::generate::sampling::argmax;
use wgemma::gpu::test_context;
use wgemma::model::parse_config;
use wgemma::model::state::KvState;
use wgemma::model::target::{ModelOptions, Want};
use wgemma::model::weights::WeightFormat;

fn options(format: WeightFormat) -> ModelOptions {
    ModelOptions {
        format,
        max_context: 128,
        prefill_chunk: 16,
        max_verify_rows: 3,
        sequences: 1,
    }
}

/// Logits at every position of prompt + greedy continuation within `rel_tol` of HF (max
/// |diff| relative to the row's logit scale), and the same argmax everywhere.
fn check_all_positions(name: &str, format: WeightFormat, variant: &str, rel_tol: f32) {
    check_positions(name, format, variant, rel_tol, true);
}

fn check_positions(
    name: &str,
    format: WeightFormat,
    variant: &str,
    rel_tol: f32,
    argmax_too: bool,
) {
    let fx = Fixture::open(name);
    let mut state = fx.state(options(format));
    let vocab = state.model().spec.config.vocab_size;
    for (p, (prompt, info)) in fx.prompts().iter().enumerate() {
        let mut tokens = prompt.clone();
        tokens.extend(ids(&info[variant]["greedy"]));
        let (_, expected) = fx.tensor(info[variant]["logits_key"].as_str().unwrap());
        state.reset();
        let out =
            pollster::block_on(state.forward(test_context(), &tokens, Want::AllLogits)).unwrap();
        assert_eq!(
            out.logits.len(),
            expected.len(),
            "{name} p{p}: logits length"
        );
        for (t, (got, want)) in out
            .logits
            .chunks(vocab)
            .zip(expected.chunks(vocab))
            .enumerate()
        {
            let scale = want.iter().fold(1.0f32, |m, v| m.max(v.abs()));
            let diff = got
                .iter()
                .zip(want)
                .fold(0.0f32, |m, (a, b)| m.max((a - b).abs()));
            assert!(
                diff <= rel_tol * scale,
                "{name} {variant} p{p} position {t}: max |diff| {diff} > {rel_tol} x {scale}"
            );
            if argmax_too {
                assert_eq!(
                    argmax(got),
                    argmax(want),
                    "{name} {variant} p{p} position {t}: argmax"
                );
            }
        }
    }
}

/// Greedy decoding (prefill, then one token per forward) reproduces HF's continuation.
fn check_greedy(name: &str, format: WeightFormat, variant: &str) {
    let fx = Fixture::open(name);
    let mut state = fx.state(options(format));
    for (p, (prompt, info)) in fx.prompts().iter().enumerate() {
        let want = ids(&info[variant]["greedy"]);
        state.reset();
        let mut next = pollster::block_on(state.forward(test_context(), prompt, Want::NextToken))
            .unwrap()
            .next[0];
        let mut got = vec![next];
        while got.len() < want.len() {
            next = pollster::block_on(state.forward(test_context(), &[next], Want::NextToken))
                .unwrap()
                .next[0];
            got.push(next);
        }
        assert_eq!(got, want, "{name} {variant} p{p}: greedy continuation");

        // Pipelined decoding (next step submitted before the token is read) is identical.
        state.reset();
        let first = pollster::block_on(state.forward(test_context(), prompt, Want::NextToken))
            .unwrap()
            .next[0];
        let mut seen = Vec::new();
        let rest = pollster::block_on(state.decode_greedy(
            test_context(),
            first,
            want.len() - 1,
            &mut |t| {
                seen.push(t);
                true
            },
        ))
        .unwrap();
        assert_eq!(rest, seen, "{name} {variant} p{p}: callback order");
        assert_eq!(
            [vec![first], rest].concat(),
            want,
            "{name} {variant} p{p}: pipelined greedy continuation"
        );
        assert_eq!(state.len(), prompt.len() + want.len() - 1);
    }
}

#[test]
fn e2b_like_f32_logits_match_hf_at_every_position() {
    check_all_positions("e2b_like", WeightFormat::F32, "f32", 1e-3);
}

#[test]
fn e2b_like_greedy_matches_hf() {
    check_greedy("e2b_like", WeightFormat::F32, "f32");
}

#[test]
fn dense_kv_f32_logits_match_hf_at_every_position() {
    check_all_positions("dense_kv", WeightFormat::F32, "f32", 1e-3);
}

#[test]
fn dense_kv_greedy_matches_hf() {
    check_greedy("dense_kv", WeightFormat::F32, "f32");
}

/// Q4 weights against HF run on the same fake-quantised weights: same math, so the f32
/// tolerance holds.
#[test]
fn e2b_like_q4_matches_hf_on_fake_quantised_weights() {
    check_all_positions("e2b_like", WeightFormat::Q4 { group: 32 }, "q4", 1e-3);
    check_greedy("e2b_like", WeightFormat::Q4 { group: 32 }, "q4");
}

#[test]
fn dense_kv_q4_matches_hf_on_fake_quantised_weights() {
    check_all_positions("dense_kv", WeightFormat::Q4 { group: 32 }, "q4", 1e-3);
}

/// Prefill in chunks and token-by-token decode give the same logits.
#[test]
fn chunked_prefill_equals_token_by_token() {
    let fx = Fixture::open("e2b_like");
    let (prompt, _) = &fx.prompts()[1];
    let mut chunked = fx.state(ModelOptions {
        prefill_chunk: 5,
        ..options(WeightFormat::F32)
    });
    let a = pollster::block_on(chunked.forward(test_context(), prompt, Want::AllLogits)).unwrap();
    let mut single = fx.state(ModelOptions {
        prefill_chunk: 1,
        ..options(WeightFormat::F32)
    });
    let b = pollster::block_on(single.forward(test_context(), prompt, Want::AllLogits)).unwrap();
    let diff = a
        .logits
        .iter()
        .zip(&b.logits)
        .fold(0.0f32, |m, (x, y)| m.max((x - y).abs()));
    assert!(diff < 1e-4, "max |diff| {diff}");
    assert_eq!(a.next, b.next);
}

#[test]
fn moe_f32_logits_match_hf_at_every_position() {
    check_all_positions("moe", WeightFormat::F32, "f32", 1e-3);
}

#[test]
fn moe_greedy_matches_hf() {
    check_greedy("moe", WeightFormat::F32, "f32");
}

#[test]
fn moe_q4_matches_hf_on_fake_quantised_weights() {
    check_all_positions("moe", WeightFormat::Q4 { group: 32 }, "q4", 1e-3);
}

/// f16 weights (rounded from f32): within 3% of the logit scale of HF's f32 logits at every
/// position (measured: 1.2% worst case; this fixture's final norm is scaled x8, which
/// amplifies rounding). Argmax is not compared: near-ties may flip under f16 rounding.
#[test]
fn e2b_like_f16_weights_stay_close_to_hf() {
    check_positions("e2b_like", WeightFormat::F16, "f32", 3e-2, false);
}

/// Loads refuse decoder tensors their config does not describe (issue 30): every tensor of
/// every HF-written target fixture (dense, KV-shared, MoE, K-quant shapes) must be one a
/// load reads, or real checkpoints of those layouts would be refused.
#[test]
fn every_fixture_tensor_is_read_by_a_load() {
    for name in ["e2b_like", "dense_kv", "moe", "k_quant"] {
        let fx = Fixture::open(name);
        let ck = fx.checkpoint();
        let spec = parse_config(&fx.config).unwrap();
        KvState::load(
            test_context(),
            &ck,
            spec,
            options(WeightFormat::F32),
            &mut |_, _| {},
        )
        .unwrap();
        assert_eq!(ck.unread_tensors(), Vec::<String>::new(), "{name}");
        assert!(ck.check_all_read(false).is_ok());
    }
}
