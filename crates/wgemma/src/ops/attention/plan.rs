//! Per-step grid planning for attention: pure host arithmetic (unit-tested without a GPU).
//!
//! The partial kernel's grid is (splits, rows, kv_heads * head_tiles) per cache chunk: each
//! workgroup scans one contiguous split of one row's visible keys for one tile of query heads.
//! The number of splits depends on the current context length, so it is chosen per step; the
//! kernels and bind groups are built once. The shader cuts the row's key span itself from the
//! positions on the GPU and `num_workgroups.x` ([`split_range`] mirrors it), so a plan built
//! from a wrong `kv_len` only costs speed, never correctness (except for chunked full caches,
//! where chunks at or past `kv_len` are not dispatched).

use crate::error::{Error, Result};
use crate::gpu::Grid;
use std::ops::Range;

/// Keys per block of the partial kernel (one score per thread row of the block).
pub const KEY_BLOCK: usize = 32;
/// Query heads one workgroup serves at most (and at most 4096 / head_dim: 8 vec4
/// accumulators per thread of 128).
pub const MAX_TILE_QUERIES: usize = 32;
/// Partials the combine kernel merges at most (its workgroup weight array).
pub const MAX_SPLITS: usize = 512;
/// Splits are added until a dispatch has about this many workgroups (fills a large GPU:
/// ~8 per SM on an H200) ...
pub const TARGET_WORKGROUPS: usize = 1024;
/// ... but no split gets fewer keys than this (a combine input costs D + 2 floats).
pub const MIN_KEYS_PER_SPLIT: usize = 64;

/// What the planner needs to know about one attention layer (fixed at build time).
#[derive(Debug, Clone, PartialEq)]
pub struct Geometry {
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    /// Sliding window W (None: full attention).
    pub window: Option<usize>,
    /// Sliding ring (slot = position % slots) or full cache (slot = position).
    pub ring: bool,
    pub slots: usize,
    /// Slot ranges of the cache chunks (one storage binding each).
    pub chunks: Vec<Range<usize>>,
    /// Rows the kernels were built for (q's first dimension).
    pub rows: usize,
    /// Sequences the cache holds side by side.
    pub sequences: usize,
    /// Scratch capacity in (split, query) pairs.
    pub max_query_splits: usize,
    /// The device's maxComputeWorkgroupsPerDimension.
    pub max_per_dim: u32,
}

/// Query heads per tile for `head_dim`: min(32, 4096 / head_dim).
pub fn max_tile_queries(head_dim: usize) -> usize {
    MAX_TILE_QUERIES.min(4096 / head_dim.max(1)).max(1)
}

impl Geometry {
    pub fn group(&self) -> usize {
        self.heads / self.kv_heads.max(1)
    }

    /// (query heads per tile, tiles per kv head): the group split evenly into tiles.
    pub fn tiles(&self) -> (usize, usize) {
        let group = self.group().max(1);
        let tiles = group.div_ceil(max_tile_queries(self.head_dim));
        (group.div_ceil(tiles), tiles)
    }
}

/// Which kernels a plan dispatches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AttentionRoute {
    /// `attention.wgsl`: partial (or direct) + combine; any row count (prefill, fallback).
    SplitK,
    /// `attention_decode.wgsl`: steps of at most `decode::DECODE_MAX_ROWS` rows.
    Decode,
    /// `attention_tiled.wgsl` (+ `attention.wgsl`'s combine when split): prefill chunks of at
    /// least [`TILED_MIN_ROWS`] rows; K and V rows loaded once per tile of rows.
    Tiled,
}

/// Steps of at least this many rows take the tiled route where a layer has it.
pub const TILED_MIN_ROWS: usize = 16;

/// The tiled kernel's tile for `head_dim`: (queries per tile BQ, threads across an output
/// row LANES = head_dim / 16; each thread holds 4 queries x 4 vec4 columns). None for head
/// dims it does not serve.
pub fn tiled_tile(head_dim: usize) -> Option<(usize, usize)> {
    match head_dim {
        256 => Some((64, 16)),
        512 => Some((32, 32)),
        _ => None,
    }
}

/// Plans a step of the tiled route: grid (splits, m, kv_heads * head_tiles), where only the
/// first ceil(m / rows_per_tile) workgroups of y work. Splits cut each tile's key span (for
/// parallelism at short prompts) while the scratch holds their partials; one split writes
/// the output directly.
pub fn plan_tiled(
    geo: &Geometry,
    m: usize,
    kv_len: usize,
    forced: Option<u32>,
) -> Result<AttentionPlan> {
    let base = plan_inner(geo, m, kv_len, Some(1))?;
    let (tile_queries, _) = tiled_tile(geo.head_dim).ok_or_else(|| Error::NoRoute {
        op: "attention",
        shapes: format!("head_dim {}", geo.head_dim),
        failed: vec!["the tiled route serves head_dim 256 and 512".into()],
    })?;
    let (gt, head_tiles) = geo.tiles();
    let rows_per_tile = (tile_queries / gt).max(1);
    let tiles = m.div_ceil(rows_per_tile) * geo.kv_heads * head_tiles;
    let span = match geo.window {
        Some(w) => kv_len.min(w + rows_per_tile - 1),
        None => kv_len,
    };
    let most =
        (MAX_SPLITS.min(geo.max_per_dim as usize)).min(geo.max_query_splits / (m * geo.heads));
    let splits = match forced {
        Some(s) if s as usize > most.max(1) => {
            return Err(Error::invalid(
                "attention",
                "forced split count",
                format!("<= {} (limits and scratch)", most.max(1)),
                s,
            ))
        }
        Some(s) => s.max(1) as usize,
        None => (TILED_TARGET_WORKGROUPS.div_ceil(tiles))
            .min(span.div_ceil(MIN_KEYS_PER_SPLIT))
            .min(most)
            .max(1),
    };
    Ok(AttentionPlan {
        route: AttentionRoute::Tiled,
        splits: splits as u32,
        direct: splits == 1,
        partial_grid: Grid::new(splits as u32, m as u32, (geo.kv_heads * head_tiles) as u32),
        ..base
    })
}

/// Workgroups (of 256 threads) the tiled planner aims for: two per SM of a 132-SM GPU.
const TILED_TARGET_WORKGROUPS: usize = 264;

/// One step's dispatch plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttentionPlan {
    /// The kernels this plan is for.
    pub route: AttentionRoute,
    /// Rows (queries' positions) of this step.
    pub rows: usize,
    /// Splits per chunk.
    pub splits: u32,
    /// Cache chunks dispatched (a prefix of the chunks: those holding keys < kv_len).
    pub chunks: usize,
    /// One split and a single-chunk cache: the partial kernel writes the output, no combine.
    pub direct: bool,
    /// Grid of each chunk's partial dispatch: (splits, rows, kv_heads * head_tiles).
    pub partial_grid: Grid,
    /// Grid of the combine: (heads, rows).
    pub combine_grid: Grid,
    /// Decode route only: run on the latency-shaped kernels (`attention_decode_latency.wgsl`,
    /// planned one tile of keys per split) rather than the classic ones.
    pub latency: bool,
}

/// Plans one step of `m` rows whose last position is `kv_len - 1`.
pub fn plan(geo: &Geometry, m: usize, kv_len: usize) -> Result<AttentionPlan> {
    plan_inner(geo, m, kv_len, None)
}

/// As [`plan`] with a forced split count per chunk (tests of the split-K path).
pub fn plan_with_splits(
    geo: &Geometry,
    m: usize,
    kv_len: usize,
    splits: u32,
) -> Result<AttentionPlan> {
    plan_inner(geo, m, kv_len, Some(splits))
}

fn plan_inner(
    geo: &Geometry,
    m: usize,
    kv_len: usize,
    forced: Option<u32>,
) -> Result<AttentionPlan> {
    if m == 0 || m > geo.rows {
        return Err(Error::invalid(
            "attention",
            "rows of this step",
            format!("1..={}", geo.rows),
            m,
        ));
    }
    if kv_len < m || (!geo.ring && kv_len > geo.slots) {
        return Err(Error::invalid(
            "attention",
            "kv_len (cache length including this step's rows)",
            format!(
                "{m}..={}",
                if geo.ring {
                    "any".to_string()
                } else {
                    geo.slots.to_string()
                }
            ),
            kv_len,
        ));
    }
    let chunks = if geo.ring {
        1
    } else {
        geo.chunks.iter().filter(|c| c.start < kv_len).count()
    };
    let chunk_keys = geo.chunks.iter().map(|c| c.len()).max().unwrap_or(0);
    let keys = match geo.window {
        Some(w) => kv_len.min(w),
        None => kv_len,
    }
    .min(if geo.ring { usize::MAX } else { chunk_keys })
    .max(1);
    let (_, head_tiles) = geo.tiles();
    let tiles = m * geo.kv_heads * head_tiles;
    let mut splits = match forced {
        Some(s) => s.max(1) as usize,
        None => TARGET_WORKGROUPS
            .div_ceil(tiles * chunks)
            .min(keys.div_ceil(MIN_KEYS_PER_SPLIT))
            .max(1),
    };
    splits = splits
        .min(MAX_SPLITS / chunks)
        .min(geo.max_per_dim as usize);
    let per_split = chunks * m * geo.heads;
    if splits * per_split > geo.max_query_splits {
        splits = geo.max_query_splits / per_split;
    }
    let can_direct = geo.chunks.len() == 1;
    if splits == 0 {
        if can_direct {
            splits = 1; // direct: needs no scratch
        } else {
            return Err(Error::NoRoute {
                op: "attention",
                shapes: format!("rows {m}, heads {}, {chunks} cache chunks", geo.heads),
                failed: vec![format!(
                    "scratch holds {} (split, query) pairs; a chunked cache needs >= {per_split}",
                    geo.max_query_splits
                )],
            });
        }
    }
    let direct = can_direct && splits == 1;
    if forced.is_some_and(|s| s as usize != splits) {
        return Err(Error::invalid(
            "attention",
            "forced split count",
            format!("<= {splits} (limits and scratch)"),
            forced.unwrap(),
        ));
    }
    Ok(AttentionPlan {
        route: AttentionRoute::SplitK,
        rows: m,
        splits: splits as u32,
        chunks,
        direct,
        partial_grid: Grid::new(splits as u32, m as u32, (geo.kv_heads * head_tiles) as u32),
        combine_grid: Grid::new(geo.heads as u32, m as u32, 1),
        latency: false,
    })
}

/// The keys [k0, k1) that split `s` of `splits` scans out of a row's visible span [lo, hi):
/// the host mirror of the shader's arithmetic.
pub fn split_range(lo: usize, hi: usize, splits: usize, s: usize) -> Range<usize> {
    let hi = hi.max(lo);
    let per = (hi - lo).div_ceil(splits).div_ceil(KEY_BLOCK) * KEY_BLOCK;
    let k0 = (lo + s * per).min(hi);
    k0..(k0 + per).min(hi)
}
