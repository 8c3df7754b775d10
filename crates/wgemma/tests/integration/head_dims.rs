//! Gemma 4 configs whose head dims are not powers of two (HF runs them: issue 17, item 12)
//! load and run through the generic attention route: prefill and step-by-step decode of
//! the same tokens give the same logits, and a power-of-two twin of the config still
//! takes the power-of-two kernels.

use wgemma::formats::synthetic::SyntheticWeights;
use wgemma::gpu::test_context;
use wgemma::model::state::KvState;
use wgemma::model::target::{ModelOptions, Want};
use wgemma::model::weights::WeightFormat;
use wgemma::model::{parse_config, PlanOptions};

fn config(head_dim: usize, full_head_dim: usize) -> String {
    serde_json::json!({
        "model_type": "gemma4_text", "vocab_size": 128, "hidden_size": 64,
        "intermediate_size": 64, "num_hidden_layers": 3, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": head_dim, "sliding_window": 4,
        "final_logit_softcapping": 30.0,
        "per_layer_config": {"2": {"head_dim": full_head_dim, "num_key_value_heads": 1}},
        "layer_types": ["sliding_attention", "sliding_attention", "full_attention"],
    })
    .to_string()
}

/// Logits of every position of `tokens`: in one prefill, and one token at a time.
fn prefill_and_stepwise(json: &str, tokens: &[u32]) -> (Vec<f32>, Vec<f32>) {
    let ctx = test_context();
    let spec = parse_config(json).unwrap();
    let options = ModelOptions {
        format: WeightFormat::F32,
        max_context: 64,
        prefill_chunk: 16,
        ..ModelOptions::default()
    };
    let mut state = KvState::load(
        ctx,
        &SyntheticWeights { seed: 7 },
        spec,
        options,
        &mut |_, _| {},
    )
    .unwrap();
    let all = pollster::block_on(state.forward(ctx, tokens, Want::AllLogits))
        .unwrap()
        .logits;
    state.reset();
    let mut steps = Vec::new();
    for &t in tokens {
        let out = pollster::block_on(state.forward(ctx, &[t], Want::LastLogits)).unwrap();
        steps.extend(out.logits);
    }
    (all, steps)
}

#[test]
fn head_dims_24_and_48_load_and_prefill_matches_decode() {
    let tokens = [3, 9, 27, 81, 115, 17, 51, 5, 15];
    for (d, full) in [(24, 48), (32, 64)] {
        let (all, steps) = prefill_and_stepwise(&config(d, full), &tokens);
        assert_eq!(all.len(), tokens.len() * 128);
        assert!(all.iter().all(|v| v.is_finite()), "D {d}/{full}");
        let worst = all
            .iter()
            .zip(&steps)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f32, f32::max);
        // Past the window (4) the sliding layers' rings wrap: both paths must agree.
        assert!(
            worst < 1e-3,
            "D {d}/{full}: prefill vs decode differ by {worst}"
        );
    }
}

/// Head dims 128 and 256 take the decode route's latency-shaped kernels where the device
/// builds them (lavapipe does: 8-lane subgroups): step-by-step decode through them, across
/// the sliding ring's wrap and past one tile of keys on the full layer (32 at D = 256: the
/// step's splits then meet in the combine), gives the classic decode kernels' logits.
#[test]
fn latency_decode_kernels_match_the_classic_ones_through_the_model() {
    let tokens: Vec<u32> = (0..40).map(|i| (i * 37 + 3) % 128).collect();
    let stepwise = |latency: bool| {
        let ctx = test_context();
        let mut state = KvState::load(
            ctx,
            &SyntheticWeights { seed: 7 },
            parse_config(&config(128, 256)).unwrap(),
            ModelOptions {
                format: WeightFormat::F32,
                max_context: 64,
                ..ModelOptions::default()
            },
            &mut |_, _| {},
        )
        .unwrap();
        state.set_plan_options(PlanOptions {
            latency_attention: latency,
            ..PlanOptions::default()
        });
        let mut logits = Vec::new();
        for &t in &tokens {
            let out = pollster::block_on(state.forward(ctx, &[t], Want::LastLogits)).unwrap();
            logits.extend(out.logits);
        }
        logits
    };
    let (latency, classic) = (stepwise(true), stepwise(false));
    assert_eq!(latency.len(), tokens.len() * 128);
    let worst = latency
        .iter()
        .zip(&classic)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    assert!(worst < 1e-4, "latency vs classic decode differ by {worst}");
}
