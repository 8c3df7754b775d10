//! Plans with work folded into a neighbouring kernel (RMSNorm into the matvec prologues,
//! the K/V append into norm_rope, q_norm + RoPE into decode attention) against the plans
//! that run it as its own kernel, on the golden fixtures.

use super::options;
use crate::common::Fixture;
use wgemma::gpu::test_context;
use wgemma::model::target::{ModelOptions, Want};
use wgemma::model::weights::WeightFormat;
use wgemma::model::{parse_config, PlanOptions};

/// The RMSNorms folded into the matvecs' prologues (decode M = 1, verify M = 3) give the
/// logits of the plans that run them as kernels to 1e-5 of the largest (the decode
/// family applies 1 / rms to its row totals, not to x), on every Q4 fixture without MoE (the MoE
/// block keeps its kernels), and the prologue plans are the ones used by default.
#[test]
fn norm_prologues_equal_norm_kernels() {
    for name in ["e2b_like", "dense_kv"] {
        let fx = Fixture::open(name);
        let (prompt, _) = &fx.prompts()[1];
        for rows in [1, 3] {
            let run = |prologues: bool| {
                let mut state = fx.state(ModelOptions {
                    prefill_chunk: rows,
                    ..options(WeightFormat::Q4 { group: 32 })
                });
                state.set_plan_options(PlanOptions {
                    norm_prologue_rows: if prologues { 4 } else { 0 },
                    ..PlanOptions::default()
                });
                let out =
                    pollster::block_on(state.forward(test_context(), prompt, Want::AllLogits))
                        .unwrap();
                let used = state
                    .built_plan(rows, wgemma::model::forward::LogitRows::All)
                    .map(|p| p.norm_prologues);
                (out, used)
            };
            let (fused, fused_used) = run(true);
            let (kernels, kernels_used) = run(false);
            assert_eq!(fused_used, Some(true), "{name} M={rows}: prologue plan");
            assert_eq!(kernels_used, Some(false), "{name} M={rows}: kernel plan");
            let diff = fused
                .logits
                .iter()
                .zip(&kernels.logits)
                .fold(0.0f32, |m, (a, b)| m.max((a - b).abs()));
            let scale = kernels.logits.iter().fold(1.0f32, |m, v| m.max(v.abs()));
            assert!(
                diff <= 1e-5 * scale,
                "{name} M={rows}: max |diff| {diff} > 1e-5 x {scale}"
            );
            assert_eq!(fused.next, kernels.next, "{name} M={rows}");
        }
    }
}

/// The K/V append folded into norm_rope writes the same cache as the kv_append kernel: the
/// logits of a prompt are bit-identical both ways, in sequence slot 1 of 2, for one-row and
/// three-row forwards (sliding rings, full caches and K = V caches), with one dispatch less
/// per layer that owns its K/V.
#[test]
fn kv_append_in_norm_rope_equals_the_append_kernel() {
    for name in ["e2b_like", "dense_kv"] {
        let fx = Fixture::open(name);
        let (prompt, _) = &fx.prompts()[1];
        for rows in [1, 3] {
            let run = |fold: bool| {
                let mut state = fx.state(ModelOptions {
                    prefill_chunk: rows,
                    sequences: 2,
                    ..options(WeightFormat::F32)
                });
                state.set_plan_options(PlanOptions {
                    fold_kv_append: fold,
                    ..PlanOptions::default()
                });
                let mut seq = state.new_sequence().unwrap();
                state.swap_sequence(&mut seq).unwrap();
                let out =
                    pollster::block_on(state.forward(test_context(), prompt, Want::AllLogits))
                        .unwrap();
                let dispatches = state
                    .built_plan(rows, wgemma::model::forward::LogitRows::All)
                    .map(|p| p.dispatch_count())
                    .unwrap();
                (out, dispatches)
            };
            let (folded, folded_dispatches) = run(true);
            let (kernel, kernel_dispatches) = run(false);
            assert_eq!(folded.logits, kernel.logits, "{name} M={rows}: logits");
            assert_eq!(folded.next, kernel.next, "{name} M={rows}");
            let own_kv = parse_config(&fx.config)
                .unwrap()
                .layers
                .iter()
                .filter(|l| matches!(l.kv, wgemma::model::config::KvSource::Own))
                .count();
            assert_eq!(
                kernel_dispatches - folded_dispatches,
                own_kv,
                "{name} M={rows}: one append dispatch less per layer owning K/V"
            );
        }
    }
}

/// q_norm + RoPE folded into the decode attention of KV-shared layers gives the logits of
/// the norm_rope dispatch (up to the order of the norm's sum) for one-row and three-row
/// forwards, with one dispatch less per KV-shared layer; plans of more rows than the
/// decode route takes keep norm_rope.
#[test]
fn q_norm_rope_in_attention_equals_the_norm_rope_dispatch() {
    let fx = Fixture::open("e2b_like");
    let (prompt, _) = &fx.prompts()[1];
    let shared = parse_config(&fx.config)
        .unwrap()
        .layers
        .iter()
        .filter(|l| matches!(l.kv, wgemma::model::config::KvSource::Shared { .. }))
        .count();
    assert!(shared > 0, "the fixture has KV-shared layers");
    for rows in [1, 3, 12] {
        let run = |fold: bool| {
            let mut state = fx.state(ModelOptions {
                prefill_chunk: rows,
                ..options(WeightFormat::F32)
            });
            state.set_plan_options(PlanOptions {
                fold_q_norm_rope: fold,
                ..PlanOptions::default()
            });
            let out =
                pollster::block_on(state.forward(test_context(), prompt, Want::AllLogits)).unwrap();
            let dispatches = state
                .built_plan(rows, wgemma::model::forward::LogitRows::All)
                .map(|p| p.dispatch_count())
                .unwrap();
            (out, dispatches)
        };
        let (folded, folded_dispatches) = run(true);
        let (kernel, kernel_dispatches) = run(false);
        let diff = folded
            .logits
            .iter()
            .zip(&kernel.logits)
            .fold(0.0f32, |m, (a, b)| m.max((a - b).abs()));
        assert!(diff <= 1e-4, "M={rows}: max |diff| {diff}");
        assert_eq!(folded.next, kernel.next, "M={rows}");
        let expected = if rows <= wgemma::ops::attention::DECODE_MAX_ROWS {
            shared
        } else {
            0
        };
        assert_eq!(
            kernel_dispatches - folded_dispatches,
            expected,
            "M={rows}: one norm_rope dispatch less per KV-shared layer"
        );
    }
}
