//! Tests of the decode route: the same reference and tolerances as the split_k route, on the
//! subgroup reduction (lavapipe has 8-lane subgroups) and on the portable one (a context
//! without optional features), plus route choice and the planner.
//! Route choice and the planner are in `routes`.

use super::super::decode::*;
use super::super::plan::{AttentionRoute, Geometry};
use super::super::*;
use crate::gpu::DType;
use crate::gpu::{ContextOptions, Grid};
use crate::harness::{assert_cases_pass, check, rng, test_context, OpCase};

mod routes;

fn decode(mut c: AttentionCase) -> AttentionCase {
    c.route = Some(AttentionRoute::Decode);
    c
}

fn boxed(cases: Vec<AttentionCase>) -> Vec<Box<dyn OpCase>> {
    cases
        .into_iter()
        .map(|c| Box::new(decode(c)) as Box<dyn OpCase>)
        .collect()
}

/// A context without optional features: the decode kernel reduces through workgroup memory.
fn portable_context() -> &'static GpuContext {
    static CTX: std::sync::OnceLock<GpuContext> = std::sync::OnceLock::new();
    CTX.get_or_init(|| {
        GpuContext::new_blocking(ContextOptions {
            portable: true,
            ..Default::default()
        })
        .unwrap_or_else(|e| panic!("{e}"))
    })
}

fn assert_pass_on(ctx: &GpuContext, cases: &[Box<dyn OpCase>], seeds: std::ops::Range<u64>) {
    let mut failures = Vec::new();
    for case in cases {
        for seed in seeds.clone() {
            match pollster::block_on(check(ctx, case.as_ref(), seed)) {
                Ok(report) if report.pass() => {}
                Ok(report) => failures.push(report.to_string()),
                Err(e) => failures.push(format!("{} (seed {seed}): error: {e}", case.name())),
            }
        }
    }
    assert!(
        failures.is_empty(),
        "failing cases:\n{}",
        failures.join("\n")
    );
}

/// An attention layer over a full cache of `max_len` positions, q of `rows` rows.
fn decode_layer(
    ctx: &GpuContext,
    (heads, kv_heads, d): (usize, usize, usize),
    rows: usize,
    max_len: usize,
) -> Attention {
    let cache = KvCache::new(
        ctx,
        "c",
        KvCacheConfig {
            kv_heads,
            head_dim: d,
            layout: KvLayout::Full { max_len },
            k_eq_v: false,
            max_binding_bytes: None,
            sequences: 1,
        },
    )
    .unwrap();
    let q = Tensor::zeros(ctx, "q", &[rows, heads, d], DType::F32).unwrap();
    let out = Tensor::zeros(ctx, "out", &[rows, heads, d], DType::F32).unwrap();
    let pos = Tensor::zeros(ctx, "pos", &[rows], DType::U32).unwrap();
    let scratch = AttentionScratch::for_head_dim(ctx, d).unwrap();
    Attention::new(
        ctx,
        AttentionInputs {
            fold_q: None,
            q: &q,
            positions: &pos,
            cache: &cache,
            out: &out,
            key_from_v: None,
        },
        &scratch,
    )
    .unwrap()
}

/// The decode kernels an attention layer of `case`'s shape gets on `ctx`.
fn decode_lanes(ctx: &GpuContext, heads: usize, kv_heads: usize, d: usize) -> Option<u32> {
    let attention = decode_layer(ctx, (heads, kv_heads, d), 1, 8);
    let route = attention.decode_route().expect("decode route built");
    route.subgroup_lanes()
}

#[test]
fn random_cases_pass_on_both_reductions() {
    let portable = portable_context();
    assert_eq!(decode_lanes(portable, 8, 1, 256), None);
    for seed in 0..3 {
        let cases = decode_random_cases(&mut rng(700 + seed));
        assert_cases_pass(&cases, seed..seed + 1);
        assert_pass_on(portable, &cases, seed..seed + 1);
    }
}

/// The latency-shaped kernels are built exactly where their guards pass (lavapipe's 8-lane
/// subgroups hold D = 256's 8 lanes per key, so the other decode tests run them there at
/// that head dim; D = 512 needs 16 lanes; D = 64 is outside), and the planner gives each
/// split one tile of keys.
#[test]
fn latency_kernels_are_built_where_their_guards_pass() {
    let ctx = test_context();
    for d in [64, 128, 256, 512] {
        let mut attention = decode_layer(ctx, (8, 1, d), 1, 4096);
        let built = attention.decode_route().unwrap().is_latency_shaped();
        assert_eq!(built, latency_lanes(ctx, d, false).is_ok(), "d {d}");
        let plan = attention.plan(1, LATENCY_MAX_KEYS).unwrap();
        assert_eq!(plan.latency, built, "d {d}");
        if built {
            let tiles = LATENCY_MAX_KEYS.div_ceil(latency_tile_keys(d));
            assert_eq!(plan.splits as usize, tiles, "d {d}");
        }
        // Longer steps run on the classic kernels, planned as before.
        let classic = plan_decode(attention.geometry(), 1, 4096, None).unwrap();
        assert!(!classic.latency);
        assert_eq!(attention.plan(1, 4096).unwrap(), classic);
        attention.disable_latency_decode();
        assert!(!attention.decode_route().unwrap().is_latency_shaped());
        let before = plan_decode(attention.geometry(), 1, LATENCY_MAX_KEYS, None).unwrap();
        assert_eq!(attention.plan(1, LATENCY_MAX_KEYS).unwrap(), before);
    }
    let portable = decode_layer(portable_context(), (8, 1, 256), 1, 64);
    assert!(!portable.decode_route().unwrap().is_latency_shaped());
    let failed = latency_lanes(portable_context(), 256, false).unwrap_err();
    assert!(failed.iter().any(|f| f.contains("SUBGROUP")), "{failed:?}");
    assert!(
        latency_lanes(ctx, 256, true).is_ok(),
        "{:?}",
        latency_lanes(ctx, 256, true)
    );
    assert!(latency_lanes(ctx, 64, false).unwrap_err()[0].contains("head_dim 64"));
}

/// The latency-shaped kernels against the reference where lavapipe builds them (D = 256),
/// beside the classic ones on the same steps: E2B's sliding layer at 4K (512 keys: 16 splits
/// of one tile), decode and verify rows, one split over many tiles (the online softmax
/// across tiles), a split count leaving splits empty, a chunked cache (a partial per chunk),
/// K = V, q_norm + RoPE folded, GQA groups of 2 and 12 (partial head tiles), and the
/// single-split step that writes the output directly.
#[test]
fn latency_kernels_match_the_reference() {
    let mut cases = Vec::new();
    for m in [1, 3, 9] {
        cases.push(AttentionCase::new(8, 1, 256, m, 4096 - m).sliding(512, 9));
    }
    let mut one_split = AttentionCase::new(8, 1, 256, 2, 700);
    one_split.splits = Some(1);
    cases.push(one_split);
    let mut sparse = AttentionCase::new(8, 1, 256, 9, 0);
    sparse.splits = Some(64);
    cases.push(sparse);
    let mut chunked = AttentionCase::new(8, 1, 256, 3, 600);
    chunked.max_len = 900;
    chunked.chunk_bytes = Some(256 * 4 * 128);
    cases.push(chunked);
    let mut kv = AttentionCase::new(8, 1, 256, 3, 300);
    kv.k_eq_v = true;
    cases.push(kv);
    let mut fold = AttentionCase::new(8, 1, 256, 3, 450).sliding(512, 9);
    fold.fold_q = true;
    cases.push(fold);
    let mut fold_kv = AttentionCase::new(8, 1, 256, 1, 200);
    fold_kv.fold_q = true;
    fold_kv.k_eq_v = true;
    cases.push(fold_kv);
    cases.push(AttentionCase::new(4, 2, 256, 3, 100));
    cases.push(AttentionCase::new(12, 1, 256, 1, 250));
    cases.push(AttentionCase::new(8, 1, 256, 1, 20)); // one split: direct
    let mut large_q = AttentionCase::new(8, 1, 256, 1, 1000);
    large_q.q_scale = 30.0;
    cases.push(large_q);
    let classic: Vec<AttentionCase> = cases
        .iter()
        .map(|c| AttentionCase {
            decode_kernels: DecodeKernelChoice::Classic,
            ..c.clone()
        })
        .collect();
    cases.extend(classic);
    assert_cases_pass(&boxed(cases), 0..2);
}

#[test]
fn subgroup_reduction_is_used_when_the_device_allows() {
    let ctx = test_context();
    let lanes = decode_lanes(ctx, 8, 1, 256);
    let (lo, hi) = (ctx.info.subgroup_min_size, ctx.info.subgroup_max_size);
    if ctx.has(wgpu::Features::SUBGROUP) && lo == hi && lo >= 4 && 64 % lo == 0 {
        assert_eq!(lanes, Some(lo));
    } else {
        assert_eq!(lanes, None);
    }
}

#[test]
fn head_dims_gqa_ratios_and_row_counts() {
    let mut cases = Vec::new();
    let gqa = [(8, 1), (4, 2), (32, 4), (6, 3), (12, 1), (9, 1), (1, 1)];
    for (i, d) in [64, 256, 512].into_iter().enumerate() {
        for (j, (h, kvh)) in gqa.into_iter().enumerate() {
            let m = 1 + (i * 7 + j * 3) % DECODE_MAX_ROWS;
            cases.push(AttentionCase::new(h, kvh, d, m, 29 * (i + j) + 3));
        }
    }
    let cases = boxed(cases);
    assert_cases_pass(&cases, 0..1);
    assert_pass_on(portable_context(), &cases, 0..1);
}

#[test]
fn sliding_windows_smaller_and_larger_than_the_context() {
    let cases = boxed(vec![
        // Window larger than the context: everything visible.
        AttentionCase::new(4, 2, 64, 3, 20).sliding(512, 3),
        // Window smaller than the context, verify rows at the edge of the window.
        AttentionCase::new(8, 1, 256, 9, 300).sliding(40, 9),
        // Window 1: each query sees only itself (output = own V row).
        AttentionCase::new(2, 1, 64, 3, 10).sliding(1, 3),
        // Exactly the window.
        AttentionCase::new(8, 1, 256, 1, 511).sliding(512, 1),
    ]);
    assert_cases_pass(&cases, 0..2);
}

#[test]
fn ring_wraps_far_beyond_its_slots() {
    let cases = boxed(vec![
        AttentionCase::new(4, 1, 64, 3, 100_003).sliding(16, 5),
        AttentionCase::new(2, 2, 64, 5, 200_000).sliding(16, 5),
        AttentionCase::new(8, 1, 256, 1, 70_001).sliding(512, 3),
    ]);
    assert_cases_pass(&cases, 0..2);
}

#[test]
fn forced_splits_agree_and_empty_splits_weigh_nothing() {
    let mut cases = Vec::new();
    for splits in [1, 2, 7, 64] {
        // From position 0: row r sees r + 1 keys, so most of 64 splits are empty.
        let mut c = AttentionCase::new(4, 2, 64, 9, 0);
        c.splits = Some(splits);
        cases.push(c);
        let mut c = AttentionCase::new(8, 1, 256, 1, 1000).sliding(300, 3);
        c.splits = Some(splits);
        cases.push(c);
    }
    assert_cases_pass(&boxed(cases), 0..1);
}

#[test]
fn chunked_full_cache_matches_the_reference() {
    let mut cases = Vec::new();
    for (m, k_eq_v, splits) in [(1, false, None), (3, false, Some(3)), (9, true, None)] {
        let mut c = AttentionCase::new(4, 2, 64, m, 700);
        c.max_len = 1200;
        c.chunk_bytes = Some(2 * 64 * 4 * 100); // 100 slots per chunk: 12 chunks, 8 active
        c.k_eq_v = k_eq_v;
        c.splits = splits;
        cases.push(c);
    }
    assert_cases_pass(&boxed(cases), 0..1);
}

#[test]
fn k_eq_v_rebuilds_keys_from_values() {
    let mut cases = Vec::new();
    for (d, m, start) in [(512, 1, 900), (512, 3, 40), (256, 9, 70), (64, 2, 5)] {
        let mut c = AttentionCase::new(8, 2, d, m, start);
        c.k_eq_v = true;
        cases.push(c);
    }
    // Near the position limit: the keys' rope angles are large.
    let mut far = AttentionCase::new(2, 1, 512, 1, 200_000).sliding(64, 1);
    far.k_eq_v = true;
    cases.push(far);
    let cases = boxed(cases);
    assert_cases_pass(&cases, 0..1);
    assert_pass_on(portable_context(), &cases, 0..1);
}

#[test]
fn softmax_is_stable_for_large_scores() {
    let mut cases = Vec::new();
    for splits in [None, Some(5)] {
        let mut c = AttentionCase::new(4, 1, 256, 3, 600);
        c.q_scale = 40.0;
        c.splits = splits;
        cases.push(c);
    }
    assert_cases_pass(&boxed(cases), 0..2);
}

#[test]
fn long_context_decode_and_verify() {
    // 8K keys at D 256 (several tiles per split), and the E2B full layer shape at 4K.
    let cases = boxed(vec![
        AttentionCase::new(8, 1, 256, 1, 8191),
        AttentionCase::new(8, 1, 512, 3, 4093),
        AttentionCase::new(8, 1, 256, 3, 8189).sliding(512, 3),
    ]);
    assert_cases_pass(&cases, 0..1);
    // One split: each workgroup walks thousands of keys in many tiles (online rescaling).
    let mut one = decode(AttentionCase::new(8, 1, 512, 1, 4095));
    one.splits = Some(1);
    assert_cases_pass(&[Box::new(one) as Box<dyn OpCase>], 0..1);
}

#[test]
fn rollback_then_decode_uses_the_decode_route() {
    // The split_k test of rollback runs through Attention::record; check that it now plans
    // decode-route steps for its verify (4 rows) and decode (1 row) forwards.
    let ctx = test_context();
    let cache = KvCache::new(
        ctx,
        "c",
        KvCacheConfig {
            kv_heads: 1,
            head_dim: 64,
            layout: KvLayout::Sliding {
                window: 8,
                max_rows: 4,
            },
            k_eq_v: false,
            max_binding_bytes: None,
            sequences: 1,
        },
    )
    .unwrap();
    let q = Tensor::zeros(ctx, "q", &[4, 4, 64], DType::F32).unwrap();
    let out = Tensor::zeros(ctx, "out", &[4, 4, 64], DType::F32).unwrap();
    let pos = Tensor::zeros(ctx, "pos", &[4], DType::U32).unwrap();
    let scratch = AttentionScratch::for_head_dim(ctx, 64).unwrap();
    let inputs = AttentionInputs {
        fold_q: None,
        q: &q,
        positions: &pos,
        cache: &cache,
        out: &out,
        key_from_v: None,
    };
    let attention = Attention::new(ctx, inputs, &scratch).unwrap();
    for m in [1, 4] {
        assert_eq!(attention.plan(m, 44).unwrap().route, AttentionRoute::Decode);
    }
}

/// q_norm + RoPE folded into the partial (KV-shared layers) against the reference's
/// q_norm, RoPE and attention: E2B's head dims (256 sliding, 512 full with proportional,
/// partial rotation) and 64, decode and verify rows, a K = V cache, both reductions.
#[test]
fn folded_q_norm_rope_matches_the_reference() {
    let mut cases = Vec::new();
    for (d, rows, start) in [(256, 1, 700), (512, 3, 300), (64, 9, 40)] {
        let mut full = AttentionCase::new(8, 1, d, rows, start);
        full.fold_q = true;
        let mut sliding = AttentionCase::new(8, 1, d, rows, start).sliding(128, 9);
        sliding.fold_q = true;
        cases.push(full.clone());
        cases.push(sliding);
        full.k_eq_v = true;
        cases.push(full);
    }
    let cases = boxed(cases);
    assert_cases_pass(&cases, 0..2);
    assert_pass_on(portable_context(), &cases, 0..1);
}

/// A folded layer has only the decode route: other routes and steps of more rows than it
/// takes have no plan, instead of attending with q as q_proj wrote it.
#[test]
fn folded_q_norm_rope_has_no_other_route() {
    let ctx = test_context();
    let d = 64;
    let cache = KvCache::new(
        ctx,
        "c",
        KvCacheConfig {
            kv_heads: 1,
            head_dim: d,
            layout: KvLayout::Full { max_len: 64 },
            k_eq_v: false,
            max_binding_bytes: None,
            sequences: 1,
        },
    )
    .unwrap();
    let q = Tensor::zeros(ctx, "q", &[16, 4, d], DType::F32).unwrap();
    let out = Tensor::zeros(ctx, "out", &[16, 4, d], DType::F32).unwrap();
    let pos = Tensor::zeros(ctx, "pos", &[16], DType::U32).unwrap();
    let scratch = AttentionScratch::for_head_dim(ctx, d).unwrap();
    let folded = |norm_weight: &[f32]| {
        Attention::new(
            ctx,
            AttentionInputs {
                fold_q: Some(FoldQ {
                    norm_weight,
                    rope: crate::ops::rope::RopeConfig::gemma4_sliding(d),
                    eps: 1e-6,
                }),
                q: &q,
                positions: &pos,
                cache: &cache,
                out: &out,
                key_from_v: None,
            },
            &scratch,
        )
    };
    let attention = folded(&vec![1.0; d]).unwrap();
    assert_eq!(attention.plan(1, 20).unwrap().route, AttentionRoute::Decode);
    assert!(attention.plan(16, 40).is_err(), "16 rows: no decode plan");
    for route in [AttentionRoute::SplitK, AttentionRoute::Tiled] {
        let err = attention.plan_route(route, 1, 20, None).unwrap_err();
        assert!(err.to_string().contains("folded"), "{err}");
    }
    // A weight of the wrong length is refused when the layer is built.
    let err = folded(&vec![1.0; d - 1]).unwrap_err();
    assert!(err.to_string().contains("fold_q"), "{err}");
}
