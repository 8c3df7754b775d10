//! The tiled (flash-attention) prefill route against the f64 reference: head dims 256 and
//! 512, GQA groups smaller and larger than a tile, row counts that leave a partial tile,
//! sliding windows shorter than the chunk, rings far past their size, forced key splits,
//! large scores; and the planner's choice between tiled and split_k.

use super::tests::boxed;
use super::*;
use crate::harness::{assert_cases_pass, test_context};

fn tiled(mut c: AttentionCase) -> AttentionCase {
    c.route = Some(AttentionRoute::Tiled);
    c
}

#[test]
fn tiled_route_matches_the_reference() {
    let cases = vec![
        // E2B full layer from position 0: 4 rows x 8 heads per tile.
        tiled(AttentionCase::new(8, 1, 512, 16, 0)),
        // E2B sliding layer, a window shorter than the chunk, a partial last tile.
        tiled(AttentionCase::new(8, 1, 256, 37, 5).sliding(16, 37)),
        // 64-query tiles (8 rows x 8 heads) after earlier chunks, one partial tile.
        tiled(AttentionCase::new(8, 1, 256, 70, 100)),
        // Two kv heads, group 2.
        tiled(AttentionCase::new(4, 2, 256, 20, 30)),
        // Group 16 at D 512: two head tiles of 8 per kv head.
        tiled(AttentionCase::new(16, 1, 512, 17, 3)),
        // No GQA: 64 rows of one head per tile, then a tile of one row.
        tiled(AttentionCase::new(1, 1, 256, 65, 0)),
        // Group 2 over 3 kv heads.
        tiled(AttentionCase::new(6, 3, 512, 18, 9)),
        // A ring wrapped many times.
        tiled(AttentionCase::new(8, 1, 256, 24, 10_000).sliding(64, 24)),
    ];
    assert_cases_pass(&boxed(cases), 0..2);
}

#[test]
fn tiled_key_splits_agree_and_empty_splits_weigh_nothing() {
    let mut cases = Vec::new();
    for splits in [1, 2, 3, 5] {
        let mut c = tiled(AttentionCase::new(8, 1, 256, 33, 200).sliding(100, 33));
        c.splits = Some(splits);
        cases.push(c);
        // From position 0 the first tiles see a few keys: most of their splits are empty.
        let mut c = tiled(AttentionCase::new(8, 1, 512, 20, 0));
        c.splits = Some(splits);
        cases.push(c);
    }
    assert_cases_pass(&boxed(cases), 0..1);
}

#[test]
fn tiled_softmax_is_stable_for_large_scores() {
    // Scores of std ~32 and maxima past 88, where exp overflows f32 without the running max
    // (a larger scale only adds f32 rounding of the scores themselves, which grows with them).
    let mut cases = Vec::new();
    for splits in [None, Some(3)] {
        let mut c = tiled(AttentionCase::new(4, 1, 256, 16, 300));
        c.q_scale = 6.0;
        c.splits = splits;
        cases.push(c);
    }
    assert_cases_pass(&boxed(cases), 0..2);
}

#[test]
fn the_planner_takes_tiled_for_prefill_where_its_guards_pass() {
    let ctx = test_context();
    let build = |d: usize, rows: usize, k_eq_v: bool, chunk_bytes: Option<u64>| {
        let cache = KvCache::new(
            ctx,
            "c",
            KvCacheConfig {
                kv_heads: 1,
                head_dim: d,
                layout: KvLayout::Full { max_len: 256 },
                k_eq_v,
                max_binding_bytes: chunk_bytes,
                sequences: 1,
            },
        )
        .unwrap();
        let t = |shape: &[usize], dtype| Tensor::zeros(ctx, "t", shape, dtype).unwrap();
        let scratch = AttentionScratch::for_head_dim(ctx, d).unwrap();
        let rope = RopeConfig::gemma4_full(d);
        let k_norm_weight = vec![1.0; d];
        Attention::new(
            ctx,
            AttentionInputs {
                q: &t(&[rows, 8, d], DType::F32),
                positions: &t(&[rows], DType::U32),
                cache: &cache,
                out: &t(&[rows, 8, d], DType::F32),
                key_from_v: k_eq_v.then_some(KeyFromValue {
                    k_norm_weight: &k_norm_weight,
                    rope,
                }),
            },
            &scratch,
        )
        .unwrap()
    };
    let a = build(512, 64, false, None);
    assert!(a.tiled_route_failed().is_empty());
    assert_eq!(a.plan(64, 64).unwrap().route, AttentionRoute::Tiled);
    assert_eq!(a.plan(16, 20).unwrap().route, AttentionRoute::Tiled);
    assert_eq!(a.plan(15, 20).unwrap().route, AttentionRoute::SplitK);
    assert_eq!(a.plan(1, 20).unwrap().route, AttentionRoute::Decode);
    // Layers the kernel does not serve keep split_k, and a forced tiled plan names why.
    for (layer, why) in [
        (build(128, 32, false, None), "head_dim 128"),
        (build(512, 32, true, None), "K = V"),
        (build(256, 32, false, Some(256 * 4 * 64)), "cache chunks"),
    ] {
        assert!(
            layer.tiled_route_failed().iter().any(|f| f.contains(why)),
            "{:?}",
            layer.tiled_route_failed()
        );
        assert_eq!(layer.plan(32, 40).unwrap().route, AttentionRoute::SplitK);
        match layer.plan_route(AttentionRoute::Tiled, 32, 40, None) {
            Err(Error::NoRoute { failed, .. }) => assert!(failed.iter().any(|f| f.contains(why))),
            other => panic!("expected NoRoute, got {other:?}"),
        }
    }
}
