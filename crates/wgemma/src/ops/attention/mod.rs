//! Attention over a per-layer KV cache (Gemma 4: scale 1.0, GQA, causal, sliding window),
//! with the cache itself ([`KvCache`]: append kernel, length, rollback).
//!
//! Design: split-K ("flash decoding"). The `partial` kernel runs one workgroup per (split of
//! the visible keys, row, tile of query heads of one kv head) and per cache chunk, and keeps
//! an f32 online softmax; the `combine` kernel merges the splits. The split count is planned
//! per step from the context length ([`plan`]), so one kv head at M = 1 still fills a large
//! GPU and 128K contexts stay within the dispatch limits; kernels and bind groups are built
//! once and [`Attention::record`] only chooses the grid.
//!
//! Routes, chosen per step by [`Attention::plan`]:
//! - `split_k` (decode M = 1, verify M = k + 1, long prefill chunks): partial + combine.
//! - `direct`: one split and one chunk (short contexts, prefill with many rows): the partial
//!   kernel normalises and writes the output itself; one dispatch.
//! - `decode` (steps of <= 9 rows when its guards pass, see [`decode`]): coalesced key-row
//!   reads, q in registers, its own combine; split_k stays the fallback.
//!
//! - `tiled` (`attention_tiled.wgsl`, prefill chunks of >= [`plan::TILED_MIN_ROWS`] rows):
//!   flash attention over tiles of rows x the query heads of a kv head, so every K and V row
//!   is loaded once per tile instead of once per row, and no rows x keys matrix exists; split
//!   along keys (with split_k's combine) where a short prompt leaves the GPU idle. Guards:
//!   one cache chunk, one sequence, keys stored (not K = V), head_dim 256 or 512;
//!   split_k serves the rest. Where the device has 16x16x16 f16/f32 cooperative matrices
//!   and 32-wide subgroups, the same tiles run on the tensor cores
//!   (`attention_tiled_coop.wgsl`: f16 Q, K, V and P, f32 scores and sums; guards in
//!   `tiled::coop_guards`); elsewhere in f32 vector math.
//!
//! - `generic` (`attention_generic.wgsl`): the split_k kernels for head dims that are not
//!   powers of two (a multiple of 4 in 4..=512, of 8 for K = V): HF runs Gemma 4 configs with
//!   head dims such as 24 or 48. Chosen at build time by head_dim; planned like split_k.
//!   Both entry files include one body, `attention_split_k.wgsli`; they differ only in how
//!   many accumulators a thread keeps.
//!
//! Guards (build time, fail closed with [`Error::NoRoute`]): head_dim a power of two in
//! 8..=512 (or the generic route's); heads a multiple of kv_heads; rows, heads and kv_heads * head tiles within the
//! device's workgroups per dimension. Step contract: the rows of a step are the first `m`
//! rows of q, their positions are in `positions[..m]` and already appended to the cache
//! (so a prefill chunk attends to itself), and `kv_len` is the cache length after the append.

mod kv_cache;
pub mod plan;
mod reference;

#[cfg(test)]
mod tests;

#[cfg(any(test, feature = "harness"))]
mod cases;
pub mod decode;
mod split_k;
mod tiled;

#[cfg(any(test, feature = "harness"))]
pub use cases::{
    bench_cases, decode_bench_cases, decode_random_cases, prefill_check_cases, random_cases,
    AttentionCase, DecodeKernelChoice,
};
pub use decode::{DecodeKernels, DECODE_MAX_ROWS};
pub use kv_cache::{
    positions_len, KvAppend, KvCache, KvCacheConfig, KvChunk, KvCursor, KvLayout, MAX_SEQUENCES,
};
pub use plan::{AttentionPlan, AttentionRoute, Geometry};
pub use reference::{attention_ref, keys_from_values, KvHistory};
pub use split_k::AttentionScratch;
use split_k::Params;
use tiled::TiledKernels;

use crate::error::{Error, Result};
use crate::gpu::{DType, GpuContext, Kernel, KernelBuilder, Pass, Tensor};
use crate::ops::rope::{rope_inv_freq, RopeConfig};

const SHADER: &str = "attention";
const GENERIC_SHADER: &str = "attention_generic";

/// For K = V caches: how keys are rebuilt from the cached values.
#[derive(Debug, Clone, Copy)]
pub struct KeyFromValue<'a> {
    /// The layer's k_norm weight [head_dim] (plain w, not 1 + w).
    pub k_norm_weight: &'a [f32],
    /// The layer's rope (Gemma 4 full layers: proportional).
    pub rope: RopeConfig,
}

/// q_norm + RoPE applied by the decode route's partial kernel itself (KV-shared layers,
/// whose q feeds nothing but attention): the layer then needs no norm_rope dispatch, and
/// no barrier, between q_proj and attention. Values as norm_rope.wgsl writes them, up to
/// the order of the norm's sum.
#[derive(Debug, Clone, Copy)]
pub struct FoldQ<'a> {
    /// The layer's q_norm weight [head_dim] (plain w, not 1 + w).
    pub norm_weight: &'a [f32],
    /// The layer's rope.
    pub rope: RopeConfig,
    /// The RMSNorm epsilon.
    pub eps: f32,
}

/// The tensors one attention layer reads and writes.
#[derive(Debug, Clone, Copy)]
pub struct AttentionInputs<'a> {
    /// Queries [rows, heads, D] f32, RMS-normed and rotated (raw q_proj output with
    /// `fold_q`).
    pub q: &'a Tensor,
    /// Positions [>= rows] u32 (the ones the append used).
    pub positions: &'a Tensor,
    pub cache: &'a KvCache,
    /// Output [rows, heads, D] f32.
    pub out: &'a Tensor,
    /// Required exactly for K = V caches.
    pub key_from_v: Option<KeyFromValue<'a>>,
    /// Normalise and rotate q inside the decode route (see [`FoldQ`]). Such a layer has
    /// only the decode route: building fails closed ([`Error::NoRoute`]) where its guards
    /// fail or the cache is chunked, and steps of more than [`DECODE_MAX_ROWS`] rows have
    /// no plan.
    pub fold_q: Option<FoldQ<'a>>,
}

/// One layer's attention: kernels built once; [`Attention::record`] dispatches a step.
#[derive(Debug)]
pub struct Attention {
    geo: Geometry,
    /// One `partial` kernel per cache chunk.
    partial: Vec<Kernel>,
    /// `partial` with DIRECT (single-chunk caches only).
    direct: Option<Kernel>,
    combine: Kernel,
    /// The decode route's kernels (boxed: `Attention` sits in model op enums), or the guards
    /// that failed for this layer.
    decode: std::result::Result<Box<DecodeKernels>, Vec<String>>,
    /// The tiled route's kernels (boxed, as decode's), or the guards that failed for this
    /// layer.
    tiled: std::result::Result<Box<TiledKernels>, Vec<String>>,
    /// Built with [`AttentionInputs::fold_q`]: only decode plans are valid.
    folded_q: bool,
}

/// The split-K shader for `head_dim`: `attention` for a power of two in 8..=512, else the
/// generic route (`attention_generic`: any multiple of 4 in 4..=512, of 8 for K = V caches),
/// else None.
fn split_k_shader(head_dim: usize, k_eq_v: bool) -> Option<&'static str> {
    let d = head_dim;
    if d.is_power_of_two() && (8..=512).contains(&d) {
        Some(SHADER)
    } else if (4..=512).contains(&d) && d % if k_eq_v { 8 } else { 4 } == 0 {
        Some(GENERIC_SHADER)
    } else {
        None
    }
}

fn route_guards(geo: &Geometry, k_eq_v: bool) -> Vec<String> {
    let mut failed = Vec::new();
    let d = geo.head_dim;
    if split_k_shader(d, k_eq_v).is_none() {
        failed.push(format!(
            "head_dim {d} is neither a power of two in 8..=512 (attention) nor a multiple of \
             {} in 4..=512 (attention_generic)",
            if k_eq_v { "8 (K = V)" } else { "4" }
        ));
    }
    if geo.kv_heads == 0 || geo.heads % geo.kv_heads != 0 {
        failed.push(format!(
            "heads {} is not a multiple of kv_heads {}",
            geo.heads, geo.kv_heads
        ));
    }
    let max = geo.max_per_dim as usize;
    if failed.is_empty() {
        let (_, tiles) = geo.tiles();
        if geo.rows > max || geo.heads > max || geo.kv_heads * tiles > max {
            failed.push(format!(
                "rows {}, heads {} and kv_heads * head tiles {} must be <= {max}",
                geo.rows,
                geo.heads,
                geo.kv_heads * tiles
            ));
        }
    }
    failed
}

/// `(rows, heads)` of q, checked against the cache's head_dim, with out and positions
/// checked against it.
fn check_inputs(inputs: &AttentionInputs<'_>, cfg: &KvCacheConfig) -> Result<(usize, usize)> {
    let AttentionInputs {
        q, positions, out, ..
    } = *inputs;
    let d = cfg.head_dim;
    let (rows, heads) = match *q.shape() {
        [rows, heads, qd] if qd == d && rows > 0 && heads > 0 && q.dtype() == DType::F32 => {
            (rows, heads)
        }
        _ => {
            return Err(Error::invalid(
                "attention",
                "q",
                format!("f32 [rows, heads, {d}] (head_dim of the cache)"),
                format!("{:?} {:?}", q.dtype(), q.shape()),
            ))
        }
    };
    if out.shape() != q.shape() || out.dtype() != DType::F32 {
        return Err(Error::invalid(
            "attention",
            "out",
            format!("f32 {:?}", q.shape()),
            format!("{:?} {:?}", out.dtype(), out.shape()),
        ));
    }
    if out.buffer() == q.buffer() {
        return Err(Error::invalid(
            "attention",
            "out",
            "a tensor other than q",
            "q itself",
        ));
    }
    let wanted = positions_len(rows, cfg.sequences);
    if positions.dtype() != DType::U32 || positions.numel() < wanted {
        return Err(Error::invalid(
            "attention",
            "positions",
            format!("u32 with >= {wanted} elements"),
            format!("{:?} {:?}", positions.dtype(), positions.shape()),
        ));
    }
    Ok((rows, heads))
}

/// The table the kernels read beside q and the cache (binding `key_rope`): for a K = V
/// cache the key rebuild's k_norm weight and RoPE inverse frequencies (and the rotated
/// pairs); with `fold_q`, q's norm weight and inverse frequencies after them (where the
/// returned [`decode::FoldQTable`] says); a 4-float placeholder when neither applies.
/// `key_from_v` must be given exactly for K = V caches.
fn key_rope(
    ctx: &GpuContext,
    cfg: &KvCacheConfig,
    key_from_v: Option<KeyFromValue<'_>>,
    fold_q: Option<FoldQ<'_>>,
) -> Result<(Tensor, u32, Option<decode::FoldQTable>)> {
    let d = cfg.head_dim;
    let mut data = Vec::new();
    let mut rot_pairs = 0;
    match (cfg.k_eq_v, key_from_v) {
        (false, None) => {}
        (true, Some(kv)) => {
            check_table("key_from_v", d, kv.k_norm_weight, &kv.rope)?;
            data.extend_from_slice(kv.k_norm_weight);
            data.extend(rope_inv_freq(&kv.rope));
            rot_pairs = kv.rope.rotated_pairs() as u32;
        }
        (k_eq_v, _) => {
            return Err(Error::invalid(
                "attention",
                "key_from_v",
                if k_eq_v {
                    "Some (the cache is K = V)"
                } else {
                    "None (the cache stores K)"
                },
                if k_eq_v { "None" } else { "Some" },
            ))
        }
    }
    let fold = match fold_q {
        Some(f) => {
            check_table("fold_q", d, f.norm_weight, &f.rope)?;
            // The table is read as vec4s: q's part starts on a vec4.
            data.resize(data.len().next_multiple_of(4), 0.0);
            let at = (data.len() / 4) as u32;
            data.extend_from_slice(f.norm_weight);
            data.extend(rope_inv_freq(&f.rope));
            Some(decode::FoldQTable {
                at,
                rot_pairs: f.rope.rotated_pairs() as u32,
                eps: f.eps,
            })
        }
        None => None,
    };
    if data.is_empty() {
        data.resize(4, 0.0);
    }
    let t = Tensor::from_f32(ctx, "attention.key_rope", &[data.len()], &data)?;
    Ok((t, rot_pairs, fold))
}

/// A norm weight of `head_dim` values and a rope of that head_dim.
fn check_table(what: &str, d: usize, norm_weight: &[f32], rope: &RopeConfig) -> Result<()> {
    if norm_weight.len() != d || rope.head_dim != d {
        return Err(Error::invalid(
            "attention",
            format!("{what} (norm weight length, rope head_dim)"),
            format!("{d}, {d}"),
            format!("{}, {}", norm_weight.len(), rope.head_dim),
        ));
    }
    Ok(())
}

struct LayerBuild<'a> {
    ctx: &'a GpuContext,
    inputs: &'a AttentionInputs<'a>,
    scratch: &'a AttentionScratch,
    geo: &'a Geometry,
    cfg: &'a KvCacheConfig,
    shader: &'static str,
    key_rope: &'a Tensor,
    rot_pairs: u32,
    fold_q: Option<decode::FoldQTable>,
}

impl LayerBuild<'_> {
    fn params(&self, chunk_index: usize) -> Params {
        let (geo, cfg) = (self.geo, self.cfg);
        let (gt, head_tiles) = geo.tiles();
        let slots = &geo.chunks[chunk_index.min(geo.chunks.len() - 1)];
        Params {
            heads: geo.heads as u32,
            kv_heads: cfg.kv_heads as u32,
            group: geo.group() as u32,
            d4: (cfg.head_dim / 4) as u32,
            gt: gt as u32,
            head_tiles: head_tiles as u32,
            window: geo.window.unwrap_or(0) as u32,
            slots: geo.slots as u32,
            ring: geo.ring as u32,
            chunk_start: slots.start as u32,
            chunk_slots: slots.len() as u32,
            chunk_index: chunk_index as u32,
            rot_pairs: self.rot_pairs,
            sequences: geo.sequences as u32,
            _pad: [0; 2],
        }
    }

    /// The `partial` kernel of cache chunk `chunk_index` (`direct`: it normalises and
    /// writes the output itself).
    fn partial(&self, chunk_index: usize, direct: bool) -> Result<Kernel> {
        let AttentionInputs {
            q,
            positions,
            cache,
            out,
            ..
        } = *self.inputs;
        let chunk = &cache.chunks()[chunk_index];
        KernelBuilder::new(self.ctx, self.shader)
            .entry("partial")
            .constant("DIRECT", direct as u64)
            .constant("KEY_FROM_V", self.cfg.k_eq_v as u64)
            .uniform(&self.params(chunk_index))
            .tensor(out)
            .tensor(&self.scratch.acc)
            .tensor(&self.scratch.ml)
            .tensor(positions)
            .tensor(q)
            .tensor(chunk.k.as_ref().unwrap_or(&chunk.v))
            .tensor(&chunk.v)
            .tensor(self.key_rope)
            .build(crate::gpu::Grid::new(1, 1, 1))
    }

    /// The tiled route's kernels, or the guards that failed for this layer.
    fn tiled(&self) -> Result<std::result::Result<Box<TiledKernels>, Vec<String>>> {
        let tiled_failed = tiled::tiled_guards(self.geo, self.cfg.k_eq_v);
        if !tiled_failed.is_empty() {
            return Ok(Err(tiled_failed));
        }
        let AttentionInputs {
            q,
            positions,
            cache,
            out,
            ..
        } = *self.inputs;
        let bindings = tiled::TiledBindings {
            params: &self.params(0),
            out,
            positions,
            q,
            cache,
            scratch: self.scratch,
        };
        let kernels = TiledKernels::build(self.ctx, self.cfg.head_dim, &bindings)?;
        Ok(Ok(Box::new(kernels)))
    }

    /// The decode route's kernels, or the guards that failed for this layer.
    fn decode(&self) -> Result<std::result::Result<Box<DecodeKernels>, Vec<String>>> {
        let decode_failed = decode::decode_guards(self.geo, &self.ctx.limits);
        if !decode_failed.is_empty() {
            return Ok(Err(decode_failed));
        }
        let AttentionInputs {
            q,
            positions,
            cache,
            out,
            ..
        } = *self.inputs;
        let bindings = decode::DecodeBindings {
            q,
            out,
            positions,
            cache,
            scratch: self.scratch,
            key_rope: self.key_rope,
            rot_pairs: self.rot_pairs,
            fold_q: self.fold_q,
        };
        Ok(Ok(Box::new(DecodeKernels::build(
            self.ctx, self.geo, &bindings,
        )?)))
    }

    fn combine(&self) -> Result<Kernel> {
        KernelBuilder::new(self.ctx, self.shader)
            .entry("combine")
            .uniform(&self.params(0))
            .tensor(self.inputs.out)
            .tensor(&self.scratch.acc)
            .tensor(&self.scratch.ml)
            .build(crate::gpu::Grid::new(1, 1, 1))
    }
}

impl Attention {
    pub fn new(
        ctx: &GpuContext,
        inputs: AttentionInputs<'_>,
        scratch: &AttentionScratch,
    ) -> Result<Attention> {
        Self::build(ctx, inputs, scratch, None)
    }

    /// [`Attention::new`] with the visible range set by `window` instead of the cache's
    /// own window: the query whose `positions[r]` is E sees keys `E - window < k <= E`
    /// (`None`: `0..=E`). The MTP assistant's Q-only layers need this to reproduce HF's
    /// view of the target's K/V: `positions` then holds the END of the visible range (not
    /// the query's RoPE position) and `window` is the assistant's `sliding_window + 1` on
    /// sliding layers. The keys of that range must still be in the cache (for a ring: within
    /// its last `slots` positions written); the kernel does not check it.
    pub fn with_window(
        ctx: &GpuContext,
        inputs: AttentionInputs<'_>,
        scratch: &AttentionScratch,
        window: Option<usize>,
    ) -> Result<Attention> {
        if window == Some(0) {
            return Err(Error::invalid(
                "attention",
                "window override",
                ">= 1 key or None (full)",
                0,
            ));
        }
        Self::build(ctx, inputs, scratch, Some(window))
    }

    fn build(
        ctx: &GpuContext,
        inputs: AttentionInputs<'_>,
        scratch: &AttentionScratch,
        window: Option<Option<usize>>,
    ) -> Result<Attention> {
        let AttentionInputs {
            q,
            cache,
            key_from_v,
            ..
        } = inputs;
        let cfg = *cache.config();
        let d = cfg.head_dim;
        let (rows, heads) = check_inputs(&inputs, &cfg)?;
        let mut geo = cache.geometry(heads, rows, ctx.limits.max_compute_workgroups_per_dimension);
        if let Some(window) = window {
            geo.window = window;
        }
        geo.max_query_splits = scratch.max_query_splits.min(scratch.acc_floats / d);
        let failed = route_guards(&geo, cfg.k_eq_v);
        if !failed.is_empty() {
            return Err(Error::NoRoute {
                op: "attention",
                shapes: format!("q {:?}, kv_heads {}, head_dim {d}", q.shape(), cfg.kv_heads),
                failed,
            });
        }
        let (key_rope, rot_pairs, fold_q) = key_rope(ctx, &cfg, key_from_v, inputs.fold_q)?;
        let layer = LayerBuild {
            ctx,
            inputs: &inputs,
            scratch,
            geo: &geo,
            cfg: &cfg,
            shader: split_k_shader(d, cfg.k_eq_v).expect("the route guards passed"),
            key_rope: &key_rope,
            rot_pairs,
            fold_q,
        };
        let partial = (0..geo.chunks.len())
            .map(|c| layer.partial(c, false))
            .collect::<Result<Vec<_>>>()?;
        let direct = if geo.chunks.len() == 1 {
            Some(layer.partial(0, true)?)
        } else {
            None
        };
        let combine = layer.combine()?;
        let tiled = layer.tiled()?;
        let decode = layer.decode()?;
        if fold_q.is_some() {
            let mut failed = decode.as_ref().err().cloned().unwrap_or_default();
            if geo.chunks.len() != 1 {
                failed.push(format!(
                    "q_norm + RoPE in attention: a cache in one chunk (this one has {})",
                    geo.chunks.len()
                ));
            }
            if !failed.is_empty() {
                return Err(Error::NoRoute {
                    op: "attention (q_norm + RoPE folded)",
                    shapes: format!("q {:?}, kv_heads {}, head_dim {d}", q.shape(), cfg.kv_heads),
                    failed,
                });
            }
        }
        Ok(Attention {
            geo,
            partial,
            direct,
            combine,
            decode,
            tiled,
            folded_q: fold_q.is_some(),
        })
    }

    pub fn geometry(&self) -> &Geometry {
        &self.geo
    }

    /// The plan of a step of `m` rows with `kv_len` positions in the cache (after the append):
    /// the decode route for steps of at most [`DECODE_MAX_ROWS`] rows when this layer has
    /// it, the tiled route for steps of at least [`plan::TILED_MIN_ROWS`] when it has that,
    /// else split_k.
    pub fn plan(&self, m: usize, kv_len: usize) -> Result<AttentionPlan> {
        if self.folded_q {
            // Raw q: only the decode route normalises it (plan_decode refuses m > 9).
            return self.plan_decode(m, kv_len, None);
        }
        match (&self.decode, &self.tiled) {
            (Ok(_), _) if m <= DECODE_MAX_ROWS => self.plan_decode(m, kv_len, None),
            (_, Ok(_)) if m >= plan::TILED_MIN_ROWS => plan::plan_tiled(&self.geo, m, kv_len, None),
            _ => plan::plan(&self.geo, m, kv_len),
        }
    }

    /// The guards that kept this layer from the tiled route (empty: it has it).
    pub fn tiled_route_failed(&self) -> &[String] {
        self.tiled.as_ref().map_or_else(|f| f.as_slice(), |_| &[])
    }

    /// Whether this layer's tiled route runs on the tensor cores (`attention_tiled_coop.wgsl`:
    /// f16 Q, K, V and P, f32 scores and sums) rather than in f32 vector math.
    pub fn tiled_on_tensor_cores(&self) -> bool {
        self.tiled.as_ref().is_ok_and(|t| t.tensor_cores)
    }

    /// A plan on a chosen route, with a forced split count per chunk when `splits` is set
    /// (tests, benchmarks); fails closed when the route is not available here.
    pub fn plan_route(
        &self,
        route: AttentionRoute,
        m: usize,
        kv_len: usize,
        splits: Option<u32>,
    ) -> Result<AttentionPlan> {
        if self.folded_q && route != AttentionRoute::Decode {
            return Err(self.no_route(&[format!(
                "{route:?} route: q_norm + RoPE are folded into the decode route only"
            )]));
        }
        match (route, &self.decode) {
            (AttentionRoute::SplitK, _) => match splits {
                Some(s) => plan::plan_with_splits(&self.geo, m, kv_len, s),
                None => plan::plan(&self.geo, m, kv_len),
            },
            (AttentionRoute::Decode, Ok(_)) => self.plan_decode(m, kv_len, splits),
            (AttentionRoute::Tiled, _) => match &self.tiled {
                Ok(_) => plan::plan_tiled(&self.geo, m, kv_len, splits),
                Err(failed) => Err(self.no_route(failed)),
            },
            (AttentionRoute::Decode, Err(failed)) => Err(self.no_route(failed)),
        }
    }

    /// A decode-route plan shaped for the decode kernels this layer runs.
    fn plan_decode(&self, m: usize, kv_len: usize, splits: Option<u32>) -> Result<AttentionPlan> {
        let tile_keys = self.decode.as_ref().ok().and_then(|d| d.tile_keys());
        decode::plan_decode_for(&self.geo, m, kv_len, splits, tile_keys)
    }

    fn no_route(&self, failed: &[String]) -> Error {
        Error::NoRoute {
            op: "attention",
            shapes: format!(
                "rows {}, heads {}, kv_heads {}, head_dim {}",
                self.geo.rows, self.geo.heads, self.geo.kv_heads, self.geo.head_dim
            ),
            failed: failed.to_vec(),
        }
    }

    /// Keeps the decode route's classic kernels even where the latency-shaped ones were
    /// built (`PlanOptions::latency_attention` off: the before of that change).
    pub fn disable_latency_decode(&mut self) {
        if let Ok(decode) = &mut self.decode {
            decode.disable_latency();
        }
    }

    /// The decode route's kernels, or the guards that kept this layer from having them.
    pub fn decode_route(&self) -> std::result::Result<&DecodeKernels, &[String]> {
        self.decode.as_deref().map_err(|f| f.as_slice())
    }

    /// The dispatches of `plan`, in order, as kernels with their grids (none for a decode
    /// plan on a layer without the decode route).
    pub fn kernels_for_plan(&self, plan: &AttentionPlan) -> Vec<Kernel> {
        if plan.route == AttentionRoute::Decode {
            return self
                .decode
                .as_ref()
                .map_or_else(|_| Vec::new(), |d| d.kernels_for_plan(plan));
        }
        if plan.route == AttentionRoute::Tiled {
            return self
                .tiled
                .as_ref()
                .map_or_else(|_| Vec::new(), |t| t.kernels_for_plan(plan, &self.combine));
        }
        match (&self.direct, plan.direct) {
            (Some(direct), true) => vec![direct.with_grid(plan.partial_grid)],
            _ => self.partial[..plan.chunks]
                .iter()
                .map(|k| k.with_grid(plan.partial_grid))
                .chain([self.combine.with_grid(plan.combine_grid)])
                .collect(),
        }
    }

    /// [`Attention::plan`] + [`Attention::kernels_for_plan`] (for the harness).
    pub fn kernels_for(&self, m: usize, kv_len: usize) -> Result<Vec<Kernel>> {
        Ok(self.kernels_for_plan(&self.plan(m, kv_len)?))
    }

    /// Records one step: plans the grid for `m` rows and `kv_len` (the cache length after
    /// this step's append) and dispatches into `pass`. Allocates nothing.
    pub fn record(&self, pass: &mut Pass<'_>, m: usize, kv_len: usize) -> Result<AttentionPlan> {
        let plan = self.plan(m, kv_len)?;
        self.record_plan(pass, &plan);
        Ok(plan)
    }

    /// Records the dispatches of a plan made by [`Attention::plan`] (or
    /// [`Attention::plan_route`]).
    pub fn record_plan(&self, pass: &mut Pass<'_>, plan: &AttentionPlan) {
        if plan.route == AttentionRoute::Decode {
            if let Ok(d) = &self.decode {
                d.record_plan(pass, plan);
            }
            return;
        }
        if plan.route == AttentionRoute::Tiled {
            if let Ok(t) = &self.tiled {
                t.record_plan(pass, plan, &self.combine);
            }
            return;
        }
        match (&self.direct, plan.direct) {
            (Some(direct), true) => pass.dispatch_grid(direct, plan.partial_grid),
            _ => {
                for k in &self.partial[..plan.chunks] {
                    pass.dispatch_grid(k, plan.partial_grid);
                }
                pass.dispatch_grid(&self.combine, plan.combine_grid);
            }
        }
    }
}
