//! Per-layer KV cache: K and V buffers [kv_heads, slots, D] f32, an append kernel that writes
//! the rows of one forward at the positions held in a GPU buffer, and host bookkeeping of the
//! length (rollback is bookkeeping only: the next forward overwrites the rejected slots).
//!
//! Full layers: slots = max context, slot = position. Sliding layers (window W): a ring of
//! S = W + max_rows - 1 slots, slot = position % S, where max_rows is the most rows one
//! forward appends. Why that size keeps every key a query of the current forward needs: a
//! forward appends rows at positions L..L+m-1 (m <= max_rows) before attending, and its
//! earliest query (at L) needs keys from L - W + 1, so it needs the W + m - 1 <= S positions
//! L-W+1 ..= L+m-1, which map to distinct slots; none of them was overwritten, because every
//! position written so far is < E (the high-water mark, the end of the furthest forward) and
//! position x is only overwritten by x + S >= L - W + 1 + S = L + max_rows >= E when
//! L >= E - max_rows. Appending keeps L >= E - max_rows (E <= L + max_rows), and so does a
//! rollback of at most the rows of the last forward (speculative decoding rejects a suffix
//! of the last verify forward); [`KvCache::rollback`] refuses deeper rollbacks on a ring.
//!
//! K = V layers (HF `attention_k_eq_v`, the full layers of 26B/31B: k_proj output is also the
//! value) keep ONE buffer: V = v_norm(k_proj x); the attention kernel rebuilds each key as
//! rope(k_norm_weight * V) (see `attention.wgsl`), so there is no second copy.
//!
//! A cache larger than one storage binding is split along slots into chunks (gpu::plan_row_chunks;
//! `max_binding_bytes` lowers the threshold so tests reach that path with small tensors).

use super::kv_positions::{KvCursor, KvLayout};
use super::plan::Geometry;
use crate::error::{Error, Result};
use crate::gpu::{plan_row_chunks, DType, GpuContext, Grid, Kernel, KernelBuilder, Pass, Tensor};
use crate::ops::rope::{CacheRows, MAX_POSITION};
use std::ops::Range;

const SHADER: &str = "kv_append";

/// The most sequences one cache holds side by side.
pub const MAX_SEQUENCES: usize = 256;

/// Elements of the positions buffer a step of `rows` rows needs: the rows' positions, then
/// (with several sequences) each row's sequence.
pub fn positions_len(rows: usize, sequences: usize) -> usize {
    if sequences > 1 {
        2 * rows
    } else {
        rows
    }
}

/// One layer's cache shape.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KvCacheConfig {
    pub kv_heads: usize,
    pub head_dim: usize,
    pub layout: KvLayout,
    /// K = V layer: only V is stored (keys are rebuilt from it by the attention kernel).
    pub k_eq_v: bool,
    /// Split threshold in bytes per chunk tensor (None: the device's max storage binding).
    pub max_binding_bytes: Option<u64>,
    /// Sequences held side by side (a model's KV slots, one per [`Sequence`]); 1 for a cache
    /// used on its own. With more than one, the positions buffer of the append and the
    /// attention holds each row's sequence after the rows' positions.
    ///
    /// [`Sequence`]: crate::model::target::Sequence
    pub sequences: usize,
}

/// One chunk of slots, with its own buffers [kv_heads, slots.len(), D].
#[derive(Debug, Clone)]
pub struct KvChunk {
    pub slots: Range<usize>,
    /// None for K = V caches.
    pub k: Option<Tensor>,
    pub v: Tensor,
}

/// A layer's KV cache and its length.
#[derive(Debug)]
pub struct KvCache {
    config: KvCacheConfig,
    slots: usize,
    chunks: Vec<KvChunk>,
    /// The length of sequence 0, for callers that use the cache on its own (ops tests, the
    /// harness); a model keeps a cursor per sequence.
    cursor: KvCursor,
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct AppendParams {
    kv_heads: u32,
    d4: u32,
    slots: u32,
    ring: u32,
    chunk_start: u32,
    chunk_slots: u32,
    sequences: u32,
    _pad: u32,
}

impl KvCache {
    pub fn new(ctx: &GpuContext, label: &str, config: KvCacheConfig) -> Result<KvCache> {
        let bad = |what: &str, expected: &str, found: String| {
            Err(Error::invalid("kv_cache", what, expected, found))
        };
        if config.kv_heads == 0 {
            return bad("kv_heads", ">= 1", "0".into());
        }
        if config.sequences == 0 || config.sequences > MAX_SEQUENCES {
            return bad(
                "sequences",
                &format!("1..={MAX_SEQUENCES}"),
                config.sequences.to_string(),
            );
        }
        if config.head_dim == 0 || config.head_dim % 4 != 0 {
            return bad("head_dim", "a multiple of 4", config.head_dim.to_string());
        }
        match config.layout {
            KvLayout::Full { max_len } if max_len == 0 || max_len > MAX_POSITION as usize => {
                return bad(
                    "max_len",
                    &format!("1..={MAX_POSITION}"),
                    max_len.to_string(),
                );
            }
            KvLayout::Sliding { window, max_rows } if window == 0 || max_rows == 0 => {
                return bad(
                    "window and max_rows",
                    ">= 1",
                    format!("{window}, {max_rows}"),
                );
            }
            _ => {}
        }
        let slots = config.layout.slots();
        // A chunk holds its slot range for every sequence.
        let row_bytes = (config.sequences * config.kv_heads * config.head_dim * 4) as u64;
        let device_max = ctx
            .limits
            .max_storage_buffer_binding_size
            .min(ctx.limits.max_buffer_size);
        let max_binding = config
            .max_binding_bytes
            .unwrap_or(device_max)
            .min(device_max);
        let ranges = plan_row_chunks(slots, row_bytes, max_binding, 1)?;
        if ranges.len() > 1 && matches!(config.layout, KvLayout::Sliding { .. }) {
            return bad(
                "bytes of a sliding ring (rings are not split)",
                &format!("<= {max_binding}"),
                (slots as u64 * row_bytes).to_string(),
            );
        }
        let chunks = ranges
            .into_iter()
            .map(|r| {
                let shape = [config.sequences * config.kv_heads, r.len(), config.head_dim];
                let k = if config.k_eq_v {
                    None
                } else {
                    Some(Tensor::zeros(
                        ctx,
                        &format!("{label}.k"),
                        &shape,
                        DType::F32,
                    )?)
                };
                let v = Tensor::zeros(ctx, &format!("{label}.v"), &shape, DType::F32)?;
                Ok(KvChunk { slots: r, k, v })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(KvCache {
            config,
            slots,
            chunks,
            cursor: KvCursor::for_layout(config.layout),
        })
    }

    pub fn config(&self) -> &KvCacheConfig {
        &self.config
    }

    pub fn slots(&self) -> usize {
        self.slots
    }

    pub fn chunks(&self) -> &[KvChunk] {
        &self.chunks
    }

    /// Positions held (the next forward starts at this position) by this cache's own cursor.
    pub fn len(&self) -> usize {
        self.cursor.len()
    }

    pub fn is_empty(&self) -> bool {
        self.cursor.is_empty()
    }

    /// The end (exclusive) of the positions this cache can hold.
    pub fn max_positions(&self) -> usize {
        self.cursor.max_positions()
    }

    /// A fresh cursor for one sequence of this cache (a model keeps one per [`Sequence`]
    /// instead of the cache's own).
    ///
    /// [`Sequence`]: crate::model::target::Sequence
    pub fn new_cursor(&self) -> KvCursor {
        KvCursor::for_layout(self.config.layout)
    }

    /// Claims the positions len..len+m for the next forward on the cache's own cursor (write
    /// them to the positions buffer, then record the append and the attention).
    pub fn advance(&mut self, m: usize) -> Result<Range<usize>> {
        self.cursor.advance(m)
    }

    /// Forgets positions >= `len` on the cache's own cursor (see [`KvCursor::rollback`]).
    pub fn rollback(&mut self, len: usize) -> Result<()> {
        self.cursor.rollback(len)
    }

    /// The checks of [`KvCache::rollback`] without the change.
    pub fn check_rollback(&self, len: usize) -> Result<()> {
        self.cursor.check_rollback(len)
    }

    /// Empties the cache's own cursor for a new sequence.
    pub fn reset(&mut self) {
        self.cursor.reset();
    }

    /// Host path (restore a session, tests): writes rows for positions `first..first + n`
    /// from `k`, `v` [n, kv_heads, D] (`k` None for K = V caches) through the queue and sets
    /// the length to first + n. A full cache needs `first <= len` (no holes); a ring may
    /// jump ahead (positions between are unknown) and only its last `slots` rows are written.
    pub fn load_rows(
        &mut self,
        ctx: &GpuContext,
        first: usize,
        k: Option<&[f32]>,
        v: &[f32],
    ) -> Result<Range<usize>> {
        let row = self.config.kv_heads * self.config.head_dim;
        let n = v.len() / row;
        if v.len() % row != 0 || k.is_some() == self.config.k_eq_v {
            return Err(Error::invalid(
                "kv_cache",
                "rows to load",
                format!(
                    "v (and k unless K = V) of n x {} floats",
                    self.config.kv_heads * self.config.head_dim
                ),
                format!("v {} floats, k {:?}", v.len(), k.map(|k| k.len())),
            ));
        }
        if k.is_some_and(|k| k.len() != v.len()) {
            return Err(Error::invalid(
                "kv_cache",
                "k floats",
                v.len(),
                k.unwrap().len(),
            ));
        }
        let ring = matches!(self.config.layout, KvLayout::Sliding { .. });
        if (!ring && first > self.len()) || first + n > self.max_positions() {
            return Err(Error::invalid(
                "kv_cache",
                "positions to load",
                format!(
                    "a range starting <= {} ending <= {}",
                    self.len(),
                    self.max_positions()
                ),
                format!("{first}..{}", first + n),
            ));
        }
        let (d, heads) = (self.config.head_dim, self.config.kv_heads);
        let begin = if ring {
            first.max((first + n).saturating_sub(self.slots))
        } else {
            first
        };
        // Runs of consecutive positions whose slots are consecutive within one chunk: one
        // queue write per run and kv head.
        let mut p = begin;
        while p < first + n {
            let slot = if ring { p % self.slots } else { p };
            let chunk = self
                .chunks
                .iter()
                .find(|c| c.slots.contains(&slot))
                .expect("chunks cover every slot");
            let run = (first + n - p).min(chunk.slots.end - slot);
            let local = slot - chunk.slots.start;
            for h in 0..heads {
                let offset = ((h * chunk.slots.len() + local) * d * 4) as u64;
                let write = |t: &Tensor, data: &[f32]| {
                    let rows: Vec<f32> = (p..p + run)
                        .flat_map(|q| &data[((q - first) * heads + h) * d..][..d])
                        .copied()
                        .collect();
                    ctx.queue
                        .write_buffer(t.buffer(), offset, bytemuck::cast_slice(&rows))
                };
                write(&chunk.v, v);
                if let (Some(kt), Some(kd)) = (&chunk.k, k) {
                    write(kt, kd);
                }
            }
            p += run;
        }
        self.cursor.set_len(first + n);
        Ok(first..first + n)
    }

    /// Builds the append: rows of `k` (None for K = V caches) and `v` [rows, kv_heads, D] go
    /// to the slots of `positions[row]`. One dispatch per chunk.
    pub fn append_kernel(
        &self,
        ctx: &GpuContext,
        k: Option<&Tensor>,
        v: &Tensor,
        positions: &Tensor,
    ) -> Result<KvAppend> {
        let (heads, d) = (self.config.kv_heads, self.config.head_dim);
        if k.is_some() == self.config.k_eq_v {
            return Err(Error::invalid(
                "kv_cache",
                "k rows",
                if self.config.k_eq_v {
                    "none (K = V cache)"
                } else {
                    "a k tensor"
                },
                if k.is_some() { "a k tensor" } else { "none" },
            ));
        }
        let rows = v.shape().first().copied().unwrap_or(0);
        for (t, what) in k.iter().map(|t| (*t, "k")).chain([(v, "v")]) {
            if t.dtype() != DType::F32 || t.shape() != [rows, heads, d] || rows == 0 {
                return Err(Error::invalid(
                    "kv_cache",
                    format!("{what} rows"),
                    format!("f32 [rows >= 1, {heads}, {d}]"),
                    format!("{:?} {:?}", t.dtype(), t.shape()),
                ));
            }
        }
        let wanted = positions_len(rows, self.config.sequences);
        if positions.dtype() != DType::U32 || positions.numel() < wanted {
            return Err(Error::invalid(
                "kv_cache",
                "positions",
                format!("u32 with >= {wanted} elements"),
                format!("{:?} {:?}", positions.dtype(), positions.shape()),
            ));
        }
        let max = ctx.limits.max_compute_workgroups_per_dimension as usize;
        if rows > max || heads > max {
            return Err(Error::NoRoute {
                op: "kv_cache append",
                shapes: format!("rows {rows}, kv_heads {heads}"),
                failed: vec![format!("rows and kv_heads <= {max}")],
            });
        }
        let ring = matches!(self.config.layout, KvLayout::Sliding { .. });
        let kernels = self
            .chunks
            .iter()
            .map(|chunk| {
                let builder = KernelBuilder::new(ctx, SHADER)
                    .entry(if k.is_some() { "append_kv" } else { "append_v" })
                    .uniform(&AppendParams {
                        kv_heads: heads as u32,
                        d4: (d / 4) as u32,
                        slots: self.slots as u32,
                        ring: ring as u32,
                        chunk_start: chunk.slots.start as u32,
                        chunk_slots: chunk.slots.len() as u32,
                        sequences: self.config.sequences as u32,
                        _pad: 0,
                    })
                    .tensor(positions);
                let builder = match (k, &chunk.k) {
                    (Some(k), Some(kc)) => builder.tensor(kc).tensor(k).tensor(&chunk.v).tensor(v),
                    _ => builder.tensor(&chunk.v).tensor(v),
                };
                builder.build(Grid::new(heads as u32, rows as u32, 1))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(KvAppend { kernels, rows })
    }

    /// The cache as one K and one V buffer, for an append folded into another kernel
    /// (`Rope::norm_rope_append`); None when it is split into chunks.
    pub fn single_chunk_rows(&self) -> Option<CacheRows<'_>> {
        match self.chunks.as_slice() {
            [chunk] => Some(CacheRows {
                k: chunk.k.as_ref(),
                v: &chunk.v,
                kv_heads: self.config.kv_heads,
                head_dim: self.config.head_dim,
                slots: self.slots,
                ring: matches!(self.config.layout, KvLayout::Sliding { .. }),
                sequences: self.config.sequences,
            }),
            _ => None,
        }
    }

    /// What the attention planner needs to know about this cache.
    pub(crate) fn geometry(&self, heads: usize, rows: usize, max_per_dim: u32) -> Geometry {
        Geometry {
            heads,
            kv_heads: self.config.kv_heads,
            head_dim: self.config.head_dim,
            window: self.config.layout.window(),
            ring: matches!(self.config.layout, KvLayout::Sliding { .. }),
            slots: self.slots,
            chunks: self.chunks.iter().map(|c| c.slots.clone()).collect(),
            rows,
            sequences: self.config.sequences,
            max_query_splits: 0,
            max_per_dim,
        }
    }
}

/// The append of one forward's rows: one kernel per cache chunk.
#[derive(Debug)]
pub struct KvAppend {
    kernels: Vec<Kernel>,
    rows: usize,
}

impl KvAppend {
    fn grid(&self, m: usize) -> Result<Grid> {
        if m == 0 || m > self.rows {
            return Err(Error::invalid(
                "kv_cache append",
                "rows of this step",
                format!("1..={}", self.rows),
                m,
            ));
        }
        Ok(Grid::new(self.kernels[0].grid().x, m as u32, 1))
    }

    /// Records the append of the first `m` rows (positions from the GPU buffer; call
    /// [`KvCache::advance`] for the same `m` first).
    pub fn record(&self, pass: &mut Pass<'_>, m: usize) -> Result<()> {
        let grid = self.grid(m)?;
        self.kernels
            .iter()
            .for_each(|k| pass.dispatch_grid(k, grid));
        Ok(())
    }

    /// The dispatches of [`KvAppend::record`] as kernels (for the harness).
    pub fn kernels_for(&self, m: usize) -> Result<Vec<Kernel>> {
        let grid = self.grid(m)?;
        Ok(self.kernels.iter().map(|k| k.with_grid(grid)).collect())
    }
}
