//! Tests of the route plans: splits, tiles and the dispatch limits at E2B shapes.

use crate::error::Error;
use crate::gpu::Grid;
use crate::ops::attention::plan::*;

fn e2b_full(slots: usize, max_binding: u64) -> Geometry {
    let row_bytes = 512 * 4;
    let chunks = crate::gpu::plan_row_chunks(slots, row_bytes, max_binding, 1).expect("chunks");
    Geometry {
        heads: 8,
        kv_heads: 1,
        head_dim: 512,
        window: None,
        ring: false,
        slots,
        chunks,
        rows: 9,
        sequences: 1,
        max_query_splits: 16_384,
        max_per_dim: 65_535,
    }
}

#[test]
fn decode_at_128k_fits_dispatch_limits_and_fills_the_gpu() {
    // 128K keys x 512 x f32 = 256 MiB per tensor: two chunks under a 128 MiB binding.
    let geo = e2b_full(131_072, 128 << 20);
    assert_eq!(geo.chunks.len(), 2);
    let p = plan(&geo, 1, 131_072).unwrap();
    assert_eq!(p.chunks, 2);
    assert!(!p.direct);
    let total = p.splits as usize * p.chunks;
    assert!(total <= MAX_SPLITS && total * 8 <= geo.max_query_splits);
    assert!(p.partial_grid.x <= 65_535 && p.partial_grid.y <= 65_535);
    // Enough workgroups for a 132-SM GPU even at M = 1 with one kv head.
    assert!(p.partial_grid.count() as usize * p.chunks >= 256, "{p:?}");
    // Every key of each chunk is covered by exactly one split.
    for c in &geo.chunks {
        let mut next = c.start;
        for s in 0..p.splits as usize {
            let r = split_range(c.start, c.end, p.splits as usize, s);
            if !r.is_empty() {
                assert_eq!(r.start, next);
                next = r.end;
            }
        }
        assert_eq!(next, c.end);
    }
    // One binding large enough: a single chunk, same parallelism.
    let one = plan(&e2b_full(131_072, 1 << 31), 1, 131_072).unwrap();
    assert_eq!(one.chunks, 1);
    assert!(one.partial_grid.count() >= 256);
    // Only chunks holding keys < kv_len are dispatched.
    assert_eq!(plan(&geo, 1, 1000).unwrap().chunks, 1);
}

#[test]
fn short_contexts_and_prefill_go_direct() {
    let geo = e2b_full(4096, 1 << 31);
    let p = plan(&geo, 1, 40).unwrap();
    assert!(p.direct && p.splits == 1);
    let prefill = Geometry {
        rows: 512,
        ..geo.clone()
    };
    let p = plan(&prefill, 512, 512).unwrap();
    assert_eq!(p.partial_grid, Grid::new(p.splits, 512, 1));
    assert!(p.splits <= 2);
    // Scratch too small for any split: a single chunk still has the direct route.
    let tiny = Geometry {
        max_query_splits: 10,
        ..prefill
    };
    assert!(plan(&tiny, 512, 4096).unwrap().direct);
}

#[test]
fn plans_reject_bad_steps() {
    let geo = e2b_full(4096, 1 << 31);
    assert!(plan(&geo, 0, 10).is_err());
    assert!(plan(&geo, 10, 100).is_err()); // more rows than built
    assert!(plan(&geo, 3, 2).is_err()); // kv_len < rows
    assert!(plan(&geo, 1, 4097).is_err()); // past the cache
    assert!(plan_with_splits(&geo, 1, 4096, 600).is_err()); // > MAX_SPLITS
    let chunked = Geometry {
        max_query_splits: 1,
        ..e2b_full(4096, 1 << 20)
    };
    assert!(matches!(
        plan(&chunked, 1, 4096),
        Err(Error::NoRoute { .. })
    ));
}

#[test]
fn split_ranges_tile_any_span() {
    for (lo, hi) in [(0, 1), (5, 5), (3, 70), (100, 4196), (0, 131_072)] {
        for splits in [1, 2, 3, 7, 64, 512] {
            let mut next = lo;
            for s in 0..splits {
                let r = split_range(lo, hi, splits, s);
                assert!(r.start <= r.end);
                if !r.is_empty() {
                    assert_eq!(r.start, next, "lo {lo} hi {hi} splits {splits} s {s}");
                    next = r.end;
                }
            }
            assert_eq!(next, hi.max(lo));
        }
    }
}

#[test]
fn tiled_plans_split_short_prompts_and_go_direct_on_long_ones() {
    let geo = |rows: usize| Geometry {
        rows,
        ..e2b_full(8192, 1 << 31)
    };
    // E2B full layer, 512 rows: 128 tiles of 4 rows x 8 heads; split while the scratch
    // holds the partials (16384 / (512 x 8) = 4).
    let p = plan_tiled(&geo(512), 512, 512, None).unwrap();
    assert_eq!(p.route, AttentionRoute::Tiled);
    assert_eq!(p.partial_grid, Grid::new(p.splits, 512, 1));
    assert!((2..=4).contains(&p.splits) && !p.direct, "{p:?}");
    assert_eq!(p.combine_grid, Grid::new(8, 512, 1));
    // 4096 rows: 1024 tiles fill the GPU, and the scratch holds no split: direct.
    let p = plan_tiled(&geo(4096), 4096, 4096, None).unwrap();
    assert!(p.direct && p.splits == 1);
    assert_eq!(p.partial_grid, Grid::new(1, 4096, 1));
    // Forced splits within the limits, and refused past them.
    assert_eq!(plan_tiled(&geo(512), 512, 512, Some(4)).unwrap().splits, 4);
    assert!(plan_tiled(&geo(512), 512, 512, Some(5)).is_err());
    assert!(plan_tiled(&geo(512), 0, 512, None).is_err());
    assert!(plan_tiled(&geo(512), 513, 513, None).is_err());
    let d64 = Geometry {
        head_dim: 64,
        ..geo(512)
    };
    assert!(matches!(
        plan_tiled(&d64, 64, 64, None),
        Err(Error::NoRoute { .. })
    ));
}

#[test]
fn tiles_split_groups_evenly() {
    let mut geo = e2b_full(16, 1 << 31);
    assert_eq!(geo.tiles(), (8, 1)); // D 512: <= 8 queries per tile
    geo.heads = 32;
    assert_eq!(geo.tiles(), (8, 4));
    geo.head_dim = 256;
    assert_eq!(geo.tiles(), (16, 2));
    geo.heads = 12;
    geo.head_dim = 512;
    assert_eq!(geo.tiles(), (6, 2));
    geo.head_dim = 64;
    geo.heads = 32;
    assert_eq!(geo.tiles(), (32, 1));
}
