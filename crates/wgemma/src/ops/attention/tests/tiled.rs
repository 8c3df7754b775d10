//! The tiled (flash-attention) prefill route against the f64 reference: head dims 256 and
//! 512, GQA groups smaller and larger than a tile, row counts that leave a partial tile,
//! sliding windows shorter than the chunk, rings far past their size, forced key splits,
//! large scores; and the planner's choice between tiled and split_k.

use super::super::*;
use super::boxed;
use crate::gpu::DType;
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
                fold_q: None,
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
    // The tensor-core kernel exactly where its guards pass (never on lavapipe).
    let coop = super::super::tiled::coop_guards(&super::super::tiled::CoopCaps::of(ctx)).is_empty();
    assert_eq!(a.tiled_on_tensor_cores(), coop);
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

#[test]
fn the_tensor_core_kernel_takes_the_tiled_tiles_and_fails_closed() {
    use super::super::tiled::{coop_block, coop_guards, CoopCaps};
    for d in [256, 512] {
        let (tile_queries, _) = plan::tiled_tile(d).unwrap();
        let (block_keys, slices) = coop_block(d).unwrap();
        // 8 subgroups = (tile_queries / 16) query tiles x slices of 128 columns.
        assert_eq!((tile_queries / 16) * slices, 8, "d {d}");
        assert_eq!(slices * 128, d);
        // The K / V block: 8 vec4 loads per invocation of 256, 16-key matrix tiles.
        assert_eq!(block_keys * d / 4, 8 * 256, "d {d}");
        assert_eq!(block_keys % 16, 0);
    }
    assert_eq!(coop_block(128), None);
    let h200 = CoopCaps {
        coop_16x16_f16: true,
        subgroups: true,
        subgroup_min_size: 32,
        subgroup_max_size: 32,
        workgroup_storage: 49_152,
    };
    assert!(coop_guards(&h200).is_empty());
    for (caps, why) in [
        (
            CoopCaps {
                coop_16x16_f16: false,
                ..h200
            },
            "cooperative matrices",
        ),
        (
            CoopCaps {
                subgroups: false,
                ..h200
            },
            "subgroup operations",
        ),
        (
            CoopCaps {
                subgroup_min_size: 16,
                subgroup_max_size: 64,
                ..h200
            },
            "exactly 32",
        ),
        (
            CoopCaps {
                workgroup_storage: 32_768,
                ..h200
            },
            "workgroup memory",
        ),
    ] {
        let failed = coop_guards(&caps);
        assert!(failed.iter().any(|f| f.contains(why)), "{why}: {failed:?}");
    }
    // This device (lavapipe: no cooperative matrices) keeps the f32 kernel.
    let ctx = test_context();
    let caps = CoopCaps::of(ctx);
    if !ctx.has_coop_16x16_f16() {
        assert!(!coop_guards(&caps).is_empty());
    }
}

#[test]
fn the_prefill_check_cases_name_the_tiled_route_and_e2b_shapes() {
    let names: Vec<String> = prefill_check_cases().iter().map(|c| c.name()).collect();
    assert!(names
        .iter()
        .all(|n| n.contains("route=tiled") && n.starts_with("attention")));
    for shape in [
        "full m=512 start=0 heads=8 kv_heads=1 d=512",
        "sliding w=512 max_rows=512 m=512 start=0 heads=8 kv_heads=1 d=256",
        "start=16000",
        "q_scale=6",
        "splits=5",
    ] {
        assert!(
            names.iter().any(|n| n.contains(shape)),
            "{shape}: {names:?}"
        );
    }
}

/// lavapipe cannot build the tensor-core kernel (no cooperative matrices), so at least its
/// override sets must get through naga's SPIR-V back end here (the H200 builds the rest).
#[cfg(any(target_os = "linux", target_os = "windows"))]
#[test]
fn the_tensor_core_kernel_compiles_to_spirv_for_both_head_dims() {
    let src = crate::gpu::registry::shader("attention_tiled_coop")
        .unwrap()
        .source;
    let module = naga::front::wgsl::parse_str(src).unwrap();
    let info = naga::valid::Validator::new(
        naga::valid::ValidationFlags::all(),
        naga::valid::Capabilities::all(),
    )
    .validate(&module)
    .unwrap();
    for d in [256, 512] {
        let (bq, _) = plan::tiled_tile(d).unwrap();
        let (bk, ns) = super::super::tiled::coop_block(d).unwrap();
        for direct in [0.0, 1.0] {
            let mut c = naga::back::PipelineConstants::default();
            c.insert("BQ".to_string(), bq as f64);
            c.insert("BK".to_string(), bk as f64);
            c.insert("NS".to_string(), ns as f64);
            c.insert("DIRECT".to_string(), direct);
            let (m, i) =
                naga::back::pipeline_constants::process_overrides(&module, &info, None, &c)
                    .unwrap();
            let opts = naga::back::spv::Options {
                lang_version: (1, 6),
                ..Default::default()
            };
            let words = naga::back::spv::write_vec(&m, &i, &opts, None).unwrap();
            assert!(words.len() > 100);
        }
    }
}
