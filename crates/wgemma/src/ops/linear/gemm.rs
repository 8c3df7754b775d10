//! The prefill GEMM routes' dispatch geometry: one workgroup per (m-tile, n-tile) pair, with
//! each shader's own tile sizes; on the tensor-core route, grids too small to fill the GPU
//! split K across workgroups (`q4_gemm_coop_split.wgsl`, then `q4_gemm_split_combine.wgsl`).
//!
//! The split is always allowed: the environment switch that turned it off for A/B runs
//! (`WGEMMA_GEMM_SPLIT=0`) left once the comparison was done (checked on the H200 on
//! 2026-12-02, run 22: `wgemma ops check --filter q4`, 45 cases OK; E2B pp512 45.8 -> 37.3
//! ms; BENCHMARKS.md, "Session 7"). [`plan`] still takes `can_split` so tests compare both.

use super::LinearRoute;
use crate::error::Result;
use crate::gpu::{DType, GpuContext, Kernel, KernelBuilder, Tensor};

/// The tensor-core kernel's tile (x rows, weight rows).
const COOP_TILE: [usize; 2] = [128, 128];

/// Workgroups a tensor-core GEMM wants in flight: about two per SM of a large GPU (132 on
/// an H200). The kernel runs ~1.5 us per 32-k step of a tile on one SM (pp512 profiles:
/// 8 to 128 workgroups at K = 1536 all take ~70 us, 384 take ~190), so a grid of fewer
/// tiles than SMs leaves SMs idle: splitting K spreads the same steps over more of them.
pub(super) const FILL_WORKGROUPS: usize = 256;

/// The fewest 32-k steps a split is given: below, the prologue (first loads, zeroing) and
/// the combine outweigh the steps saved.
pub(super) const MIN_SPLIT_STEPS: usize = 4;

/// Splitting stops at this many tiles.
const MAX_SPLIT_TILES: usize = FILL_WORKGROUPS;

/// Workgroups of the combine per tile (one invocation per element of a 128 x 128 tile).
const COMBINE_WORKGROUPS_PER_TILE: u64 = 64;

/// One GEMM kernel's plan: its shader, tile and K splits per tile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct GemmPlan {
    pub shader: &'static str,
    pub tile: [usize; 2],
    /// Workgroups per tile, each over a run of K (1: no split).
    pub splits: usize,
    /// Tiles of the grid.
    pub tiles: u64,
}

impl GemmPlan {
    pub fn workgroups(&self) -> u64 {
        self.tiles * self.splits as u64
    }
    /// f32 elements of the split kernel's partial blocks (one per workgroup).
    pub fn partial_len(&self) -> usize {
        self.workgroups() as usize * self.tile[0] * self.tile[1]
    }
}

/// The plan of `route` for `m` rows of x, `rows` weight rows and `k`, splitting K where
/// `can_split`.
pub(super) fn plan(
    route: LinearRoute,
    m: usize,
    rows: usize,
    k: usize,
    can_split: bool,
) -> GemmPlan {
    let (shader, tile) = match route {
        LinearRoute::Q4GemmCoop => ("q4_gemm_coop", COOP_TILE),
        LinearRoute::Q4GemmF16 => ("q4_gemm_f16", [64, 128]),
        LinearRoute::Q4GemmInt8 => ("q4_gemm_int8", [64, 128]),
        _ => ("q4_gemm", [64, 64]),
    };
    let tiles = tiles(m, rows, tile);
    let splits = if route == LinearRoute::Q4GemmCoop && can_split {
        coop_splits(tiles, k)
    } else {
        1
    };
    GemmPlan {
        shader: if splits > 1 {
            "q4_gemm_coop_split"
        } else {
            shader
        },
        tile,
        splits,
        tiles,
    }
}

/// K splits per tile of a tensor-core grid of `tiles`: enough to reach [`FILL_WORKGROUPS`]
/// workgroups, each with at least [`MIN_SPLIT_STEPS`] steps, and no split left empty.
pub(super) fn coop_splits(tiles: u64, k: usize) -> usize {
    let tiles = tiles as usize;
    if tiles == 0 || tiles >= MAX_SPLIT_TILES {
        return 1;
    }
    let steps = k.div_ceil(32);
    let wanted = FILL_WORKGROUPS.div_ceil(tiles);
    let splits = wanted.min(steps / MIN_SPLIT_STEPS).max(1);
    // The kernel gives each split ceil(steps / splits) steps: drop splits that would be
    // left with none.
    steps.div_ceil(steps.div_ceil(splits))
}

/// Workgroups for `m` rows of x and `rows` weight rows.
pub(super) fn tiles(m: usize, rows: usize, [tile_m, tile_n]: [usize; 2]) -> u64 {
    rows.div_ceil(tile_n) as u64 * m.div_ceil(tile_m) as u64
}

/// Builds `plan` from `builder` (the GEMM's bindings, given its output tensor): the split
/// kernel writes the context's shared partial scratch (through the output binding) and is
/// followed by the combine into `y` (`params`: the GEMM's uniform, whose first eight words
/// the combine reads). Every split GEMM shares the partials: each combine finishes with
/// them before the next GEMM writes them (wgpu orders dispatches that write one buffer).
pub(super) fn build<'c, P: bytemuck::Pod>(
    ctx: &'c GpuContext,
    plan: GemmPlan,
    builder: impl Fn(&Tensor) -> KernelBuilder<'c>,
    params: &P,
    y: &Tensor,
) -> Result<Vec<Kernel>> {
    if plan.splits == 1 {
        return Ok(vec![builder(y).build_1d(plan.workgroups())?]);
    }
    let partials = ctx.shared_scratch("gemm_split_partials", plan.partial_len(), DType::F32)?;
    let gemm = builder(&partials)
        .constant("SPLITS", plan.splits as u64)
        .build_1d(plan.workgroups())?;
    let combine = combine_kernel(ctx, plan, params, &partials, y)?;
    Ok(vec![gemm, combine])
}

/// The combine of a split `plan`: y from the partial blocks.
pub(super) fn combine_kernel<P: bytemuck::Pod>(
    ctx: &GpuContext,
    plan: GemmPlan,
    params: &P,
    partials: &Tensor,
    y: &Tensor,
) -> Result<Kernel> {
    KernelBuilder::new(ctx, "q4_gemm_split_combine")
        .constant("SPLITS", plan.splits as u64)
        .uniform(params)
        .tensor(partials)
        .tensor(y)
        .build_1d(plan.tiles * COMBINE_WORKGROUPS_PER_TILE)
}
