//! Building one layer's attention: the route guards, the checks of its inputs, the
//! table the kernels read beside q and the cache, and every route's kernels.

use super::decode::{self, DecodeKernels};
use super::split_k::Params;
use super::tiled::{self, TiledKernels};
use super::{
    positions_len, Attention, AttentionInputs, AttentionScratch, FoldQ, Geometry, KeyFromValue,
    KvCacheConfig, GENERIC_SHADER, SHADER,
};
use crate::error::{Error, Result};
use crate::gpu::{DType, GpuContext, Kernel, KernelBuilder, Tensor};
use crate::ops::rope::{rope_inv_freq, RopeConfig};

/// The split-K shader for `head_dim`: `attention` for a power of two in 8..=512, else the
/// generic route (`attention_generic`: any multiple of 4 in 4..=512, of 8 for K = V caches),
/// else None.
pub(super) fn split_k_shader(head_dim: usize, k_eq_v: bool) -> Option<&'static str> {
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
    pub(super) fn build(
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
}
