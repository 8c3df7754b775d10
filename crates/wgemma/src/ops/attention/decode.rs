//! The `decode` route of attention: steps of at most [`DECODE_MAX_ROWS`] rows (decode M = 1,
//! verify M = k + 1), built for bandwidth (`attention_decode.wgsl` states the kernel's
//! contract).
//!
//! Design: split-K like the `split_k` route, but each workgroup (split, row, kv head x tile
//! of <= 8 query heads) reads its keys as whole rows: head_dim / 4 threads per key, one vec4
//! each (coalesced), 256 / (head_dim / 4) keys per batch; every thread holds its column of q
//! for the tile's heads in registers (straight-line vec4 values, no private arrays), reduces
//! the partial dots over the key's lanes (subgroupAdd when the device's subgroups are uniform
//! and divide head_dim / 4, else through workgroup memory), and accumulates P V with the same
//! column ownership. The own `combine` entry parallelises over splits and columns, so
//! hundreds of splits stay cheap to merge.
//!
//! Guards (build time, [`decode_guards`]): head_dim a power of two in 32..=512, heads a
//! multiple of kv_heads, kv_heads * head tiles and heads within the workgroups per dimension,
//! 256-thread workgroups and the workgroup memory both kernels need. Per step: rows <=
//! [`DECODE_MAX_ROWS`]. When a guard fails the layer keeps the `split_k` route.

use super::plan::{self, AttentionPlan, AttentionRoute, Geometry};
use super::split_k::AttentionScratch;
use super::KvCache;
use crate::error::{Error, Result};
use crate::gpu::{GpuContext, Grid, Kernel, KernelBuilder, Pass, Tensor};

/// Rows one decode-route step handles at most (verify with 8 drafts).
pub const DECODE_MAX_ROWS: usize = 9;
/// Query heads one workgroup serves (a larger GQA group is cut into even tiles).
pub const DECODE_TILE_QUERIES: usize = 8;
/// Splits are added until a step has about this many partial workgroups (~4 per SM on a
/// 132-SM H200: enough loads in flight to stream the cache) ...
pub const DECODE_TARGET_WORKGROUPS: usize = 512;
/// ... while each split keeps at least this many keys (a split's partial costs D + 2 floats
/// per query head, written and read back by the combine).
pub const DECODE_MIN_KEYS_PER_SPLIT: usize = 32;
/// Partials the decode combine merges at most (its weight array).
pub const DECODE_MAX_SPLITS: usize = 512;
/// Workgroup memory of the partial kernel: two pools of 512 vec4, m and alpha (2 vec4 each)
/// and the split's key range.
pub const DECODE_PARTIAL_WORKGROUP_BYTES: u32 = 2 * 512 * 16 + 4 * 16 + 8;
/// Workgroup memory of the combine kernel: pool_a, 256 reduction floats, 512 weights.
pub const DECODE_COMBINE_WORKGROUP_BYTES: u32 = 512 * 16 + 256 * 4 + 512 * 4;

const SHADER: &str = "attention_decode";
const SHADER_LATENCY: &str = "attention_decode_latency";
/// Workgroup memory of the latency-shaped kernels (`attention_decode_latency.wgsl`): the
/// q pool (1024 vec4), P of a tile (128 vec4), two per-subgroup arrays (64 vec4
/// each), 128 floats of q's squares and the split's key range.
pub const DECODE_LATENCY_WORKGROUP_BYTES: u32 = (1024 + 128 + 2 * 64) * 16 + 128 * 4 + 8;
const SHADER_SG: &str = "attention_decode_sg";
const WORKGROUP: u32 = 256;
/// vec4 columns one combine workgroup merges.
const COMBINE_COLUMNS: usize = 8;

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct DecodeParams {
    heads: u32,
    kv_heads: u32,
    group: u32,
    head_tiles: u32,
    window: u32,
    slots: u32,
    ring: u32,
    chunk_start: u32,
    chunk_slots: u32,
    chunk_index: u32,
    rot_pairs: u32,
    sequences: u32,
    q_rope_at: u32,
    q_rot_pairs: u32,
    q_eps: f32,
    _pad: u32,
}

/// (query heads per tile, tiles per kv head) of the decode route: the group cut into
/// ceil(group / 8) tiles of equal size (the last may be smaller).
pub fn decode_tiles(group: usize) -> (usize, usize) {
    let tiles = group.div_ceil(DECODE_TILE_QUERIES).max(1);
    (group.div_ceil(tiles).max(1), tiles)
}

/// The build-time guards of the decode route that fail for `geo` on a device with `limits`
/// (empty when eligible).
pub fn decode_guards(geo: &Geometry, limits: &wgpu::Limits) -> Vec<String> {
    let mut failed = Vec::new();
    let d = geo.head_dim;
    if !(d.is_power_of_two() && (32..=512).contains(&d)) {
        failed.push(format!(
            "decode route: head_dim {d} is not a power of two in 32..=512"
        ));
    }
    if geo.kv_heads == 0 || geo.heads % geo.kv_heads != 0 {
        failed.push(format!(
            "decode route: heads {} is not a multiple of kv_heads {}",
            geo.heads, geo.kv_heads
        ));
    } else {
        let (_, tiles) = decode_tiles(geo.group());
        let max = geo.max_per_dim as usize;
        if geo.kv_heads * tiles > max || geo.heads > max {
            failed.push(format!(
                "decode route: kv_heads * head tiles {} and heads {} must be <= {max}",
                geo.kv_heads * tiles,
                geo.heads
            ));
        }
    }
    if limits.max_compute_invocations_per_workgroup < WORKGROUP
        || limits.max_compute_workgroup_size_x < WORKGROUP
    {
        failed.push(format!(
            "decode route: needs {WORKGROUP}-thread workgroups (device: {} invocations, x <= {})",
            limits.max_compute_invocations_per_workgroup, limits.max_compute_workgroup_size_x
        ));
    }
    let storage = DECODE_PARTIAL_WORKGROUP_BYTES.max(DECODE_COMBINE_WORKGROUP_BYTES);
    if limits.max_compute_workgroup_storage_size < storage {
        failed.push(format!(
            "decode route: needs {storage} bytes of workgroup memory (device: {})",
            limits.max_compute_workgroup_storage_size
        ));
    }
    failed
}

/// The subgroup size the decode kernel reduces with on `ctx` for `head_dim`, or None for the
/// portable workgroup-memory reduction: needs the SUBGROUP feature, one subgroup size on the
/// device, that size >= 4 (batches go four at a time) and dividing head_dim / 4 (a subgroup
/// then never spans two keys).
pub fn decode_subgroup_lanes(ctx: &GpuContext, head_dim: usize) -> Option<u32> {
    let (lo, hi) = (ctx.info.subgroup_min_size, ctx.info.subgroup_max_size);
    let d4 = (head_dim / 4) as u32;
    let fits = lo == hi && lo.is_power_of_two() && lo >= 4 && d4 % lo == 0;
    (ctx.has(wgpu::Features::SUBGROUP) && fits).then_some(lo)
}

/// Steps reading more keys than this run on the classic decode kernels: the latency-shaped
/// ones win at 512 keys (21.4 against 31.0 us per sliding E2B call on an H100) and lose at
/// 4K and 32K keys of a D = 512 layer, where one tile per split means hundreds of splits.
pub const LATENCY_MAX_KEYS: usize = 1024;

/// Keys one tile of the latency-shaped partial takes for `head_dim` (8 vec4 columns per
/// lane over 256 lanes: 8192 / head_dim).
pub fn latency_tile_keys(head_dim: usize) -> usize {
    8192 / head_dim.max(1)
}

/// The subgroup size the latency-shaped kernels (`attention_decode_latency.wgsl`) build
/// with on `ctx` for `head_dim`, or the reasons they cannot: head_dim 128, 256 or 512
/// (D4 = head_dim / 4 in 32..=128), the SUBGROUP feature with one subgroup size SG,
/// a power of two with 8 <= SG <= D4 holding whole keys (a multiple of D4 / 8 lanes), and
/// their workgroup memory; with `fold_q`, SG <= D4 / 2 (a subgroup sums the squares of one
/// head's rotate_half pairs). Where they fail the layer keeps the classic decode kernels.
pub fn latency_lanes(
    ctx: &GpuContext,
    head_dim: usize,
    fold_q: bool,
) -> std::result::Result<u32, Vec<String>> {
    let mut failed = Vec::new();
    let d4 = (head_dim / 4) as u32;
    if !matches!(head_dim, 128 | 256 | 512) {
        failed.push(format!(
            "latency decode: head_dim {head_dim} is not 128, 256 or 512"
        ));
    }
    let (lo, hi) = (ctx.info.subgroup_min_size, ctx.info.subgroup_max_size);
    if !ctx.has(wgpu::Features::SUBGROUP) {
        failed.push("latency decode: no subgroups (SUBGROUP)".into());
    } else if lo != hi || !lo.is_power_of_two() || lo < 8 || lo > d4 || lo % (d4 / 8).max(1) != 0 {
        failed.push(format!(
            "latency decode: one subgroup size, a power of two in 8..={d4} and a multiple \
             of {} (device: {lo}..={hi})",
            d4 / 8
        ));
    }
    if fold_q && lo > d4 / 2 {
        failed.push(format!(
            "latency decode: q_norm + RoPE folded need subgroups of at most {} lanes \
             (device: {lo})",
            d4 / 2
        ));
    }
    let have = ctx.limits.max_compute_workgroup_storage_size;
    if have < DECODE_LATENCY_WORKGROUP_BYTES {
        failed.push(format!(
            "latency decode: needs {DECODE_LATENCY_WORKGROUP_BYTES} bytes of workgroup \
             memory (device: {have})"
        ));
    }
    if failed.is_empty() {
        Ok(lo)
    } else {
        Err(failed)
    }
}

/// Plans one decode-route step of `m` rows whose last position is `kv_len - 1` for the
/// classic kernels; `forced` fixes the split count per chunk (tests).
pub fn plan_decode(
    geo: &Geometry,
    m: usize,
    kv_len: usize,
    forced: Option<u32>,
) -> Result<AttentionPlan> {
    plan_decode_for(geo, m, kv_len, forced, None)
}

/// [`plan_decode`] for the kernels a layer has: with `tile_keys` (the latency-shaped
/// kernels are built, [`latency_tile_keys`]) a step reading at most [`LATENCY_MAX_KEYS`]
/// keys runs on them, each split one tile of keys where the limits allow, so a workgroup's
/// chain is one round of loads; other steps get the classic kernels and policy (about
/// [`DECODE_TARGET_WORKGROUPS`] workgroups, at least [`DECODE_MIN_KEYS_PER_SPLIT`] keys
/// each).
pub fn plan_decode_for(
    geo: &Geometry,
    m: usize,
    kv_len: usize,
    forced: Option<u32>,
    tile_keys: Option<usize>,
) -> Result<AttentionPlan> {
    if m > DECODE_MAX_ROWS {
        return Err(Error::NoRoute {
            op: "attention",
            shapes: format!("rows {m}, heads {}", geo.heads),
            failed: vec![format!(
                "decode route: rows {m} of this step > {DECODE_MAX_ROWS}"
            )],
        });
    }
    // The split_k planner validates m and kv_len and counts the chunks holding keys.
    let base = plan::plan(geo, m, kv_len)?;
    let chunks = base.chunks;
    let chunk_keys = geo.chunks.iter().map(|c| c.len()).max().unwrap_or(0);
    let keys = match geo.window {
        Some(w) => kv_len.min(w),
        None => kv_len,
    }
    .min(if geo.ring { usize::MAX } else { chunk_keys })
    .max(1);
    let (_, tiles) = decode_tiles(geo.group());
    let workgroups = m * geo.kv_heads * tiles * chunks;
    // Past LATENCY_MAX_KEYS the classic kernels win (fewer, longer splits).
    let tile_keys = tile_keys.filter(|_| keys <= LATENCY_MAX_KEYS);
    let latency = tile_keys.is_some();
    let mut splits = match (forced, tile_keys) {
        (Some(s), _) => s.max(1) as usize,
        (None, Some(tile)) => keys.div_ceil(tile.max(1)).max(1),
        (None, None) => DECODE_TARGET_WORKGROUPS
            .div_ceil(workgroups)
            .min(keys.div_ceil(DECODE_MIN_KEYS_PER_SPLIT))
            .max(1),
    };
    splits = splits
        .min(DECODE_MAX_SPLITS / chunks)
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
                    "decode route: scratch holds {} (split, query) pairs and the combine \
                     {DECODE_MAX_SPLITS} splits; {chunks} chunks need >= {per_split} and \
                     {chunks} splits",
                    geo.max_query_splits
                )],
            });
        }
    }
    if let Some(s) = forced.filter(|&s| s as usize != splits) {
        return Err(Error::invalid(
            "attention",
            "forced split count (decode route)",
            format!("<= {splits} (limits and scratch)"),
            s,
        ));
    }
    Ok(AttentionPlan {
        route: AttentionRoute::Decode,
        rows: m,
        splits: splits as u32,
        chunks,
        direct: can_direct && splits == 1,
        partial_grid: Grid::new(splits as u32, m as u32, (geo.kv_heads * tiles) as u32),
        combine_grid: Grid::new(
            (geo.head_dim / 4 / COMBINE_COLUMNS) as u32,
            geo.heads as u32,
            m as u32,
        ),
        latency,
    })
}

/// What the decode kernels bind (the same tensors as the split_k kernels).
pub(crate) struct DecodeBindings<'a> {
    pub q: &'a Tensor,
    pub out: &'a Tensor,
    pub positions: &'a Tensor,
    pub cache: &'a KvCache,
    pub scratch: &'a AttentionScratch,
    pub key_rope: &'a Tensor,
    pub rot_pairs: u32,
    /// q_norm + RoPE folded into the partial kernel (`FOLD_Q`): where q's table starts in
    /// `key_rope`, q's rotated pairs and the norm's epsilon.
    pub fold_q: Option<FoldQTable>,
}

/// Where a folded q_norm + RoPE finds its table (see [`DecodeBindings::fold_q`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct FoldQTable {
    pub at: u32,
    pub rot_pairs: u32,
    pub eps: f32,
}

/// The decode route's kernels of one attention layer, built once.
#[derive(Debug)]
pub struct DecodeKernels {
    /// One `partial` kernel per cache chunk.
    partial: Vec<Kernel>,
    /// `partial` with DIRECT (single-chunk caches only).
    direct: Option<Kernel>,
    combine: Kernel,
    /// The latency-shaped kernels (`attention_decode_latency.wgsl`), used instead of
    /// `partial` / `direct` / `combine` where their guards pass ([`latency_lanes`]) unless
    /// switched off (`PlanOptions::latency_attention`).
    latency: Option<LatencyKernels>,
    lanes: Option<u32>,
    head_dim: usize,
}

/// The latency-shaped twins of the classic partial (one per chunk), direct and combine.
#[derive(Debug)]
struct LatencyKernels {
    partial: Vec<Kernel>,
    direct: Option<Kernel>,
    combine: Kernel,
}

/// The parameters, constants and bindings every decode kernel of one layer shares (the
/// classic and latency-shaped partials; both combines).
struct LayerBinder<'a> {
    geo: &'a Geometry,
    b: &'a DecodeBindings<'a>,
    d4: u64,
    qt: usize,
    tiles: usize,
}

impl<'a> LayerBinder<'a> {
    fn new(geo: &'a Geometry, b: &'a DecodeBindings<'a>) -> Self {
        let (qt, tiles) = decode_tiles(geo.group());
        LayerBinder {
            geo,
            b,
            d4: (geo.head_dim / 4) as u64,
            qt,
            tiles,
        }
    }

    fn params(&self, chunk_index: usize) -> DecodeParams {
        let (geo, b) = (self.geo, self.b);
        let slots = &geo.chunks[chunk_index.min(geo.chunks.len() - 1)];
        DecodeParams {
            heads: geo.heads as u32,
            kv_heads: geo.kv_heads as u32,
            group: geo.group() as u32,
            head_tiles: self.tiles as u32,
            window: geo.window.unwrap_or(0) as u32,
            slots: geo.slots as u32,
            ring: geo.ring as u32,
            chunk_start: slots.start as u32,
            chunk_slots: slots.len() as u32,
            chunk_index: chunk_index as u32,
            rot_pairs: b.rot_pairs,
            sequences: geo.sequences as u32,
            q_rope_at: b.fold_q.map_or(0, |f| f.at),
            q_rot_pairs: b.fold_q.map_or(0, |f| f.rot_pairs),
            q_eps: b.fold_q.map_or(0.0, |f| f.eps),
            _pad: 0,
        }
    }

    /// A partial kernel's constants and bindings for cache chunk `chunk_index`.
    fn partial<'c>(&self, builder: KernelBuilder<'c>, chunk_index: usize) -> KernelBuilder<'c> {
        let b = self.b;
        let chunk = &b.cache.chunks()[chunk_index];
        builder
            .constant("D4", self.d4)
            .constant("QT", self.qt as u64)
            .constant("KEY_FROM_V", b.cache.config().k_eq_v as u64)
            .constant("FOLD_Q", b.fold_q.is_some() as u64)
            .uniform(&self.params(chunk_index))
            .tensor(b.out)
            .tensor(&b.scratch.acc)
            .tensor(&b.scratch.ml)
            .tensor(b.positions)
            .tensor(b.q)
            .tensor(chunk.k.as_ref().unwrap_or(&chunk.v))
            .tensor(&chunk.v)
            .tensor(b.key_rope)
    }

    /// A combine kernel's entry, constants and bindings.
    fn combine<'c>(&self, builder: KernelBuilder<'c>) -> KernelBuilder<'c> {
        builder
            .entry("combine")
            .constant("D4", self.d4)
            .uniform(&self.params(0))
            .tensor(self.b.out)
            .tensor(&self.b.scratch.acc)
            .tensor(&self.b.scratch.ml)
    }
}

impl DecodeKernels {
    /// Builds the kernels; the caller has checked [`decode_guards`].
    pub(crate) fn build(
        ctx: &GpuContext,
        geo: &Geometry,
        b: &DecodeBindings<'_>,
    ) -> Result<DecodeKernels> {
        let layer = LayerBinder::new(geo, b);
        let lanes = decode_subgroup_lanes(ctx, geo.head_dim);
        let one = Grid::new(1, 1, 1);
        // The classic partial (subgroup or portable reduction).
        let classic = |chunk_index: usize| {
            let builder = match lanes {
                Some(l) => KernelBuilder::new(ctx, SHADER_SG).constant("VSG", l as u64),
                None => KernelBuilder::new(ctx, SHADER),
            };
            layer.partial(builder.entry("partial"), chunk_index)
        };
        let per_chunk = |make: &dyn Fn(usize, bool) -> Result<Kernel>| -> Result<_> {
            let partial = (0..geo.chunks.len())
                .map(|c| make(c, false))
                .collect::<Result<Vec<_>>>()?;
            let direct = match geo.chunks.len() {
                1 => Some(make(0, true)?),
                _ => None,
            };
            Ok((partial, direct))
        };
        let (partial, direct) =
            per_chunk(&|c, direct| classic(c).constant("DIRECT", direct as u64).build(one))?;
        let combine = layer.combine(KernelBuilder::new(ctx, SHADER)).build(one)?;
        let latency = match latency_lanes(ctx, geo.head_dim, b.fold_q.is_some()) {
            Ok(sg) => {
                let (partial, direct) = per_chunk(&|c, direct| {
                    let builder = KernelBuilder::new(ctx, SHADER_LATENCY)
                        .entry("partial")
                        .constant("SG", sg as u64)
                        .constant("DIRECT", direct as u64);
                    layer.partial(builder, c).build(one)
                })?;
                let combine = KernelBuilder::new(ctx, SHADER_LATENCY).constant("SG", sg as u64);
                Some(LatencyKernels {
                    partial,
                    direct,
                    combine: layer.combine(combine).build(one)?,
                })
            }
            Err(_) => None,
        };
        Ok(DecodeKernels {
            partial,
            direct,
            combine,
            latency,
            lanes,
            head_dim: geo.head_dim,
        })
    }

    /// Whether the latency-shaped kernels run this layer's steps.
    pub fn is_latency_shaped(&self) -> bool {
        self.latency.is_some()
    }

    /// Keeps the classic kernels where the latency-shaped ones were built.
    pub(crate) fn disable_latency(&mut self) {
        self.latency = None;
    }

    /// Keys per split the planner should aim at for the kernels that run (None: the
    /// classic policy).
    pub fn tile_keys(&self) -> Option<usize> {
        self.latency
            .as_ref()
            .map(|_| latency_tile_keys(self.head_dim))
    }

    /// The subgroup size the partial kernel reduces with (None: workgroup memory).
    pub fn subgroup_lanes(&self) -> Option<u32> {
        self.lanes
    }

    /// The dispatches of a decode-route `plan`, in order.
    pub(crate) fn kernels_for_plan(&self, plan: &AttentionPlan) -> Vec<Kernel> {
        let (partial, direct, combine) = self.set(plan);
        match (direct, plan.direct) {
            (Some(direct), true) => vec![direct.with_grid(plan.partial_grid)],
            _ => partial[..plan.chunks]
                .iter()
                .map(|k| k.with_grid(plan.partial_grid))
                .chain([combine.with_grid(plan.combine_grid)])
                .collect(),
        }
    }

    /// The partial (per chunk), direct and combine kernels that run `plan`: latency-shaped
    /// where built and planned, else classic.
    fn set(&self, plan: &AttentionPlan) -> (&[Kernel], Option<&Kernel>, &Kernel) {
        match &self.latency {
            Some(l) if plan.latency => (&l.partial, l.direct.as_ref(), &l.combine),
            _ => (&self.partial, self.direct.as_ref(), &self.combine),
        }
    }

    pub(crate) fn record_plan(&self, pass: &mut Pass<'_>, plan: &AttentionPlan) {
        let (partial, direct, combine) = self.set(plan);
        match (direct, plan.direct) {
            (Some(direct), true) => pass.dispatch_grid(direct, plan.partial_grid),
            _ => {
                for k in &partial[..plan.chunks] {
                    pass.dispatch_grid(k, plan.partial_grid);
                }
                pass.dispatch_grid(combine, plan.combine_grid);
            }
        }
    }
}
