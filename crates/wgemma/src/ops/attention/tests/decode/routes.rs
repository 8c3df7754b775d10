//! Route choice between the decode route and split_k, the guards a refusal names, and the
//! planner (splits that fill the GPU, 128K contexts, bad steps, tiles, bench shapes).

use super::*;

/// An attention layer for route-choice tests (no GPU work is recorded).
fn layer(heads: usize, kv_heads: usize, d: usize, rows: usize) -> Attention {
    let ctx = test_context();
    let cache = KvCache::new(
        ctx,
        "c",
        KvCacheConfig {
            kv_heads,
            head_dim: d,
            layout: KvLayout::Full { max_len: 64 },
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

#[test]
fn route_choice_decode_for_small_steps_split_k_otherwise() {
    let a = layer(8, 1, 64, 17);
    assert!(a.decode_route().is_ok());
    for m in 1..=DECODE_MAX_ROWS {
        let p = a.plan(m, 40).unwrap();
        assert_eq!(p.route, AttentionRoute::Decode, "m {m}");
        assert_eq!(p.partial_grid.y, m as u32);
        // The harness kernels of a decode plan are the decode kernels.
        assert!(a
            .kernels_for_plan(&p)
            .iter()
            .all(|k| k.name.starts_with("attention_decode")));
    }
    for m in [DECODE_MAX_ROWS + 1, 17] {
        assert_eq!(
            a.plan(m, 40).unwrap().route,
            AttentionRoute::SplitK,
            "m {m}"
        );
    }
    // Forcing: split_k for a decode-sized step; decode refuses more than 9 rows.
    let p = a.plan_route(AttentionRoute::SplitK, 1, 40, None).unwrap();
    assert_eq!(p.route, AttentionRoute::SplitK);
    assert!(a.kernels_for_plan(&p).iter().all(|k| k.name == "attention"));
    match a.plan_route(AttentionRoute::Decode, 10, 40, None) {
        Err(Error::NoRoute { failed, .. }) => {
            assert!(failed.iter().any(|f| f.contains("rows 10")), "{failed:?}")
        }
        other => panic!("expected NoRoute, got {other:?}"),
    }
    // A split count the planner cannot honour is refused, not silently changed.
    assert!(matches!(
        a.plan_route(AttentionRoute::Decode, 1, 40, Some(600)),
        Err(Error::Invalid { .. })
    ));
}

#[test]
fn layers_outside_the_decode_guards_keep_split_k() {
    // head_dim 16 is below the decode route's 32: the layer still has split_k.
    let a = layer(4, 2, 16, 3);
    let failed = a
        .decode_route()
        .expect_err("no decode route at head_dim 16");
    assert!(
        failed.iter().any(|f| f.contains("head_dim 16")),
        "{failed:?}"
    );
    assert_eq!(a.plan(1, 10).unwrap().route, AttentionRoute::SplitK);
    match a.plan_route(AttentionRoute::Decode, 1, 10, None) {
        Err(Error::NoRoute { failed, .. }) => {
            assert!(
                failed.iter().any(|f| f.contains("head_dim 16")),
                "{failed:?}"
            )
        }
        other => panic!("expected NoRoute, got {other:?}"),
    }
    // And it still computes attention (split_k) for a decode step.
    let case = AttentionCase::new(4, 2, 16, 1, 20);
    assert_cases_pass(&[Box::new(case) as Box<dyn OpCase>], 0..1);
}

#[test]
fn decode_guards_name_every_failure() {
    let geo = e2b(512, None, 1 << 31);
    let limits = wgpu::Limits {
        max_compute_workgroup_storage_size: 16_384,
        max_compute_invocations_per_workgroup: 128,
        ..Default::default()
    };
    let bad = Geometry {
        heads: 6,
        kv_heads: 4,
        head_dim: 96,
        ..geo.clone()
    };
    let failed = decode_guards(&bad, &limits);
    for needle in [
        "head_dim 96",
        "multiple of kv_heads",
        "256-thread",
        "workgroup memory",
    ] {
        assert!(
            failed.iter().any(|f| f.contains(needle)),
            "{needle}: {failed:?}"
        );
    }
    let ok = wgpu::Limits {
        max_compute_workgroup_storage_size: 32_768,
        max_compute_invocations_per_workgroup: 256,
        ..Default::default()
    };
    assert!(decode_guards(&geo, &ok).is_empty());
}

fn e2b(head_dim: usize, window: Option<usize>, max_binding: u64) -> Geometry {
    let slots = match window {
        Some(w) => w + 8,
        None => 131_072,
    };
    let chunks =
        crate::gpu::plan_row_chunks(slots, (head_dim * 4) as u64, max_binding, 1).expect("chunks");
    Geometry {
        heads: 8,
        kv_heads: 1,
        head_dim,
        window,
        ring: window.is_some(),
        slots,
        chunks,
        rows: 9,
        sequences: 1,
        max_query_splits: 16_384,
        max_per_dim: 65_535,
    }
}

#[test]
fn planner_fills_the_gpu_and_keeps_splits_mergeable() {
    // Sliding E2B layer (W 512): 16 splits of 32 keys at any context length.
    let sliding = e2b(256, Some(512), 1 << 31);
    for kv_len in [4096, 32_768] {
        let p = plan_decode(&sliding, 1, kv_len, None).unwrap();
        assert_eq!((p.splits, p.direct), (16, false));
        assert_eq!(p.partial_grid, Grid::new(16, 1, 1));
        assert_eq!(p.combine_grid, Grid::new(8, 8, 1)); // D/4/8 column blocks, heads, rows
    }
    // Full layer: splits grow with the context up to the target (>= 2 workgroups per SM of
    // a 132-SM GPU), each split keeping >= 32 keys.
    let full = e2b(512, None, 1 << 31);
    let p = plan_decode(&full, 1, 4096, None).unwrap();
    assert_eq!(p.splits, 128);
    let p = plan_decode(&full, 1, 32_768, None).unwrap();
    assert_eq!(
        p.splits as usize,
        DECODE_TARGET_WORKGROUPS.min(DECODE_MAX_SPLITS)
    );
    assert!(p.partial_grid.count() >= 264);
    // Verify M = 3: the workgroup target is shared by the rows.
    let p = plan_decode(&full, 3, 32_768, None).unwrap();
    assert_eq!(p.splits as usize, DECODE_TARGET_WORKGROUPS.div_ceil(3));
    assert_eq!(p.partial_grid.y, 3);
    // Short contexts: one split, written directly (one dispatch).
    let p = plan_decode(&full, 1, 20, None).unwrap();
    assert!(p.direct && p.splits == 1);
    // Large GQA groups are cut into tiles of <= 8 query heads.
    let wide = Geometry {
        heads: 32,
        kv_heads: 2,
        ..full.clone()
    };
    let p = plan_decode(&wide, 9, 32_768, None).unwrap();
    assert_eq!(p.partial_grid.z, 4);
    assert!(p.splits as usize * 9 * 32 <= wide.max_query_splits);
}

#[test]
fn planner_at_128k_with_a_chunked_cache_stays_within_limits() {
    // 128K keys x 512 x f32 = 256 MiB: two chunks under a 128 MiB binding.
    let geo = e2b(512, None, 128 << 20);
    assert_eq!(geo.chunks.len(), 2);
    let p = plan_decode(&geo, 1, 131_072, None).unwrap();
    assert_eq!(p.chunks, 2);
    assert!(!p.direct);
    let total = p.splits as usize * p.chunks;
    assert!(
        total <= DECODE_MAX_SPLITS && total * 8 <= geo.max_query_splits,
        "{p:?}"
    );
    assert!(p.partial_grid.count() as usize * p.chunks >= 264, "{p:?}");
    // Only chunks holding keys < kv_len are dispatched.
    assert_eq!(plan_decode(&geo, 1, 1000, None).unwrap().chunks, 1);
    // Scratch too small for a chunked cache fails closed.
    let tiny = Geometry {
        max_query_splits: 1,
        ..geo
    };
    assert!(matches!(
        plan_decode(&tiny, 1, 131_072, None),
        Err(Error::NoRoute { .. })
    ));
}

#[test]
fn planner_rejects_bad_steps() {
    let geo = e2b(512, None, 1 << 31);
    assert!(plan_decode(&geo, 0, 10, None).is_err());
    assert!(plan_decode(&geo, 10, 100, None).is_err()); // more rows than the route takes
    assert!(plan_decode(&geo, 3, 2, None).is_err()); // kv_len < rows
    assert!(plan_decode(&geo, 1, 131_073, None).is_err()); // past the cache
    assert!(plan_decode(&geo, 1, 4096, Some(513)).is_err()); // > DECODE_MAX_SPLITS
}

#[test]
fn decode_tiles_split_groups_evenly() {
    assert_eq!(decode_tiles(1), (1, 1));
    assert_eq!(decode_tiles(8), (8, 1));
    assert_eq!(decode_tiles(9), (5, 2)); // tiles of 5 and 4 heads
    assert_eq!(decode_tiles(12), (6, 2));
    assert_eq!(decode_tiles(16), (8, 2));
    assert_eq!(decode_tiles(32), (8, 4));
}

#[test]
fn shader_copies_are_identical() {
    let block = |name: &str, begin: &str, end: &str| -> String {
        let src = crate::gpu::registry::shader(name).unwrap().source;
        let a = src.find(begin).unwrap_or_else(|| panic!("{name}: {begin}"));
        let b = src.find(end).unwrap_or_else(|| panic!("{name}: {end}"));
        src[a..b].to_string()
    };
    let shared = |name| block(name, "// BEGIN decode_shared", "// END decode_shared");
    assert_eq!(shared("attention_decode"), shared("attention_decode_sg"));
    let sincos = |name| block(name, "fn rope_sincos", "// END rope_sincos");
    assert_eq!(sincos("rope"), sincos("attention_decode"));
}

#[test]
fn bench_cases_are_well_formed() {
    let cases = decode_bench_cases();
    assert_eq!(cases.len(), 60);
    let names: Vec<String> = cases.iter().map(|c| c.name()).collect();
    assert_eq!(
        names.iter().filter(|n| n.contains("route=decode")).count(),
        48
    );
    // The decode steps again with q_norm + RoPE folded in (KV-shared layers), each also
    // on the classic kernels.
    assert_eq!(
        names
            .iter()
            .filter(|n| n.contains("route=decode fold_q"))
            .count(),
        24
    );
    assert_eq!(names.iter().filter(|n| n.ends_with(" classic")).count(), 24);
    assert_eq!(
        names.iter().filter(|n| n.contains("route=split_k")).count(),
        12
    );
    for needle in [
        "sliding w=512",
        "m=1 start=639",
        "d=256",
        "copies=64",
        "route=decode",
    ] {
        assert!(names[0].contains(needle), "{needle}: {}", names[0]);
    }
    // A cheap one on lavapipe: that E2B sliding decode at 4K with one cache copy.
    let mut first = decode(AttentionCase::new(8, 1, 256, 1, 4095).sliding(512, 9));
    first.copies = 1;
    let report = pollster::block_on(check(test_context(), &first, 0)).unwrap();
    assert!(report.pass(), "{report}");
}
