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

mod build;
mod kv_cache;
mod kv_positions;
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
pub use kv_cache::{positions_len, KvAppend, KvCache, KvCacheConfig, KvChunk, MAX_SEQUENCES};
pub use kv_positions::{KvCursor, KvLayout};
pub use plan::{AttentionPlan, AttentionRoute, Geometry};
pub use reference::{attention_ref, keys_from_values, KvHistory};
pub use split_k::AttentionScratch;
use tiled::TiledKernels;

use crate::error::{Error, Result};
use crate::gpu::{GpuContext, Kernel, Pass, Tensor};
use crate::ops::rope::RopeConfig;

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
