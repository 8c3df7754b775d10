//! A model whose attention layers take the tiled prefill route (Gemma 4's head dims: 256 on
//! sliding layers, 512 on the full layer) gives the same logits at every position when its
//! prompt runs as prefill chunks (tiled attention, rows past the sliding window) and when it
//! runs one token at a time (decode attention).

use wgemma::formats::synthetic::SyntheticWeights;
use wgemma::gpu::test_context;
use wgemma::model::parse_config;
use wgemma::model::state::KvState;
use wgemma::model::target::{ModelOptions, Want};
use wgemma::model::weights::WeightFormat;

const CONFIG: &str = r#"{
    "model_type": "gemma4_text", "vocab_size": 128, "hidden_size": 64,
    "intermediate_size": 64, "num_hidden_layers": 3, "num_attention_heads": 8,
    "num_key_value_heads": 1, "head_dim": 256, "sliding_window": 8,
    "final_logit_softcapping": 30.0,
    "per_layer_config": {"2": {"head_dim": 512, "num_key_value_heads": 1}},
    "layer_types": ["sliding_attention", "sliding_attention", "full_attention"]
}"#;

#[test]
fn tiled_prefill_matches_token_by_token_decode() {
    let ctx = test_context();
    // 37 tokens in chunks of 24: a 24-row chunk on the tiled route, then 13 rows (under its
    // 16-row floor: split_k) reading the first chunk's keys, all far past the window of 8.
    let tokens: Vec<u32> = (0..37u32).map(|i| (i * 37 + 11) % 128).collect();
    let load = |prefill_chunk: usize| {
        let options = ModelOptions {
            format: WeightFormat::F32,
            max_context: 64,
            prefill_chunk,
            ..ModelOptions::default()
        };
        let spec = parse_config(CONFIG).unwrap();
        KvState::load(
            ctx,
            &SyntheticWeights { seed: 3 },
            spec,
            options,
            &mut |_, _| {},
        )
        .unwrap()
    };
    let mut chunked = load(24);
    let all = pollster::block_on(chunked.forward(ctx, &tokens, Want::AllLogits))
        .unwrap()
        .logits;
    let mut stepwise = load(24);
    let mut steps = Vec::new();
    for &t in &tokens {
        let out = pollster::block_on(stepwise.forward(ctx, &[t], Want::LastLogits)).unwrap();
        steps.extend(out.logits);
    }
    assert_eq!(all.len(), tokens.len() * 128);
    assert!(all.iter().all(|v| v.is_finite()));
    let worst = all
        .iter()
        .zip(&steps)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    assert!(worst < 1e-3, "chunked prefill vs decode differ by {worst}");
}
