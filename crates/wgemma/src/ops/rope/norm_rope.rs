//! Per-head RMSNorm + RoPE of an attention layer's q, k and v in one dispatch
//! (`norm_rope.wgsl`): the q_norm, k_norm, v_norm and rope_qk dispatches of a decoder
//! layer become one. Values equal the unfused ops' (same reduction, same rotation).

use super::{check_activation, check_positions, Rope, RopeKernel};
use crate::error::{Error, Result};
use crate::gpu::{DType, GpuContext, Grid, KernelBuilder, Tensor};

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    nq: u32,
    nk: u32,
    nv: u32,
    d: u32,
    half: u32,
    rot_pairs: u32,
    eps: f32,
    v_from_k: u32,
    kv_heads: u32,
    slots: u32,
    ring: u32,
    sequences: u32,
}

/// Storage bindings of the `main_append` entry (the 7 of `main`, k_cache and v_cache).
const APPEND_STORAGE_BINDINGS: u32 = 9;

/// What the V heads of a [`Rope::norm_rope`] dispatch are.
#[derive(Debug, Clone, Copy)]
pub enum VHeads<'a> {
    /// No V heads (KV-shared layers).
    None,
    /// `v = N(v)` in place.
    InPlace(&'a Tensor),
    /// `v = N(k_raw)`: K = V layers, where V is the weightless norm of k_proj's output and
    /// the keys are rebuilt from V later (k_raw itself is left unchanged).
    FromK { k_raw: &'a Tensor, v: &'a Tensor },
}

/// The heads one [`Rope::norm_rope`] dispatch normalises: q with its norm weight, k with
/// its norm weight (absent on KV-shared and K = V layers) and the V heads.
#[derive(Debug, Clone, Copy)]
pub struct NormRopeHeads<'t> {
    pub q: (&'t Tensor, &'t Tensor),
    pub k: Option<(&'t Tensor, &'t Tensor)>,
    pub v: VHeads<'t>,
}

impl Rope {
    /// `q = rope(N(q) * q_norm)`, optionally `k = rope(N(k) * k_norm)`, and the V heads
    /// of `v` (see [`VHeads`]), all `[rows, heads, head_dim]`, in one dispatch.
    pub fn norm_rope(
        &self,
        ctx: &GpuContext,
        positions: &Tensor,
        q: (&Tensor, &Tensor),
        k: Option<(&Tensor, &Tensor)>,
        v: VHeads,
        eps: f32,
    ) -> Result<RopeKernel> {
        let heads = NormRopeHeads { q, k, v };
        self.norm_rope_with(ctx, positions, heads, eps, None)
    }

    /// [`Rope::norm_rope`] of `heads` that also appends the rows' k and v heads to the KV
    /// cache `append` at their positions when given (the `kv_append` kernel's work, so the
    /// layer needs no append dispatch). Fails closed ([`Error::NoRoute`]) when the device has
    /// fewer than 9 storage bindings per stage; the caller then appends separately.
    pub fn norm_rope_with(
        &self,
        ctx: &GpuContext,
        positions: &Tensor,
        heads: NormRopeHeads<'_>,
        eps: f32,
        append: Option<CacheRows<'_>>,
    ) -> Result<RopeKernel> {
        let NormRopeHeads { q, k, v } = heads;
        let d = self.config.head_dim;
        let (rows, nq) = check_activation(q.0, "q", d)?;
        check_positions(positions, rows)?;
        let mut named = vec![("q", q.0)];
        let nk = match k {
            Some((kt, _)) => {
                named.push(("k", kt));
                check_rows(kt, "k", d, rows)?
            }
            None => 0,
        };
        let (nv, v_src, v_dst) = match v {
            VHeads::None => (0, None, None),
            VHeads::InPlace(vt) => (check_rows(vt, "v", d, rows)?, None, Some(vt)),
            VHeads::FromK { k_raw, v } => {
                if k.is_some() {
                    return Err(Error::invalid(
                        "norm_rope",
                        "k heads with V from k",
                        "k not normalised (K = V layers rebuild keys from V)",
                        "both",
                    ));
                }
                let nv = check_rows(v, "v", d, rows)?;
                if check_rows(k_raw, "k_raw", d, rows)? != nv {
                    return Err(Error::invalid("norm_rope", "heads of k_raw", nv, "other"));
                }
                named.push(("k_raw", k_raw));
                (nv, Some(k_raw), Some(v))
            }
        };
        if let Some(vt) = v_dst {
            named.push(("v", vt));
        }
        for (i, (a_name, a)) in named.iter().enumerate() {
            for (b_name, b) in &named[i + 1..] {
                if a.buffer() == b.buffer() {
                    return Err(Error::invalid(
                        "norm_rope",
                        format!("{a_name} and {b_name}"),
                        "distinct buffers",
                        "one buffer",
                    ));
                }
            }
        }
        for (what, w) in [("q_norm", Some(q.1)), ("k_norm", k.map(|k| k.1))] {
            if let Some(w) = w {
                if w.dtype() != DType::F32 || w.numel() != d {
                    return Err(Error::invalid(
                        "norm_rope",
                        what,
                        format!("f32 [{d}]"),
                        format!("{:?} {:?}", w.dtype(), w.shape()),
                    ));
                }
            }
        }
        let slots = nq + nk + nv;
        let max = ctx.limits.max_compute_workgroups_per_dimension as usize;
        if slots > max || rows > max {
            return Err(Error::NoRoute {
                op: "norm_rope",
                shapes: format!("rows {rows}, heads {slots}"),
                failed: vec![format!("rows <= {max} and heads <= {max}")],
            });
        }
        // One stand-in per unused binding: a buffer bound read-write may not be bound again.
        let unused = |what| Tensor::zeros(ctx, what, &[1], DType::F32);
        let (no_k, no_v, no_wk) = (
            unused("norm_rope.no_k")?,
            unused("norm_rope.no_v")?,
            unused("norm_rope.no_k_norm")?,
        );
        let k_binding = k.map(|k| k.0).or(v_src).unwrap_or(&no_k);
        let append = match append {
            Some(cache) => Some(append_target(ctx, cache, positions, rows, nk, nv, d)?),
            None => None,
        };
        let builder = KernelBuilder::new(ctx, "norm_rope")
            .entry(if append.is_some() {
                "main_append"
            } else {
                "main"
            })
            .uniform(&Params {
                nq: nq as u32,
                nk: nk as u32,
                nv: nv as u32,
                d: d as u32,
                half: (d / 2) as u32,
                rot_pairs: self.rot_pairs,
                eps,
                v_from_k: v_src.is_some() as u32,
                kv_heads: append.as_ref().map_or(0, |a| a.kv_heads),
                slots: append.as_ref().map_or(0, |a| a.slots),
                ring: append.as_ref().map_or(0, |a| a.ring),
                sequences: append.as_ref().map_or(1, |a| a.sequences),
            })
            .tensor(positions)
            .tensor(&self.inv_freq)
            .tensor(q.0)
            .tensor(k_binding)
            .tensor(v_dst.unwrap_or(&no_v))
            .tensor(q.1)
            .tensor(k.map(|k| k.1).unwrap_or(&no_wk));
        let builder = match &append {
            Some(a) => builder.tensor(&a.k).tensor(&a.v),
            None => builder,
        };
        let kernel = builder.build(Grid::new(slots as u32, rows as u32, 1))?;
        Ok(RopeKernel { kernel, rows })
    }
}

fn check_rows(t: &Tensor, what: &'static str, d: usize, rows: usize) -> Result<usize> {
    let (r, heads) = check_activation(t, what, d)?;
    if r != rows {
        return Err(Error::invalid(
            "norm_rope",
            format!("rows of {what}"),
            rows,
            r,
        ));
    }
    Ok(heads)
}

/// A KV cache held in one buffer per K and V, as `main_append` writes it (the attention
/// module's `KvCache::single_chunk_rows` describes its caches this way).
#[derive(Debug, Clone, Copy)]
pub struct CacheRows<'a> {
    /// None for K = V caches (V only).
    pub k: Option<&'a Tensor>,
    pub v: &'a Tensor,
    pub kv_heads: usize,
    pub head_dim: usize,
    /// Slots per sequence: position p goes to slot p (full cache) or p % slots (ring).
    pub slots: usize,
    pub ring: bool,
    /// Sequences side by side: [sequences * kv_heads, slots, head_dim].
    pub sequences: usize,
}

/// What `main_append` binds and its params.
struct AppendTarget {
    k: Tensor,
    v: Tensor,
    kv_heads: u32,
    slots: u32,
    ring: u32,
    sequences: u32,
}

fn append_target(
    ctx: &GpuContext,
    cache: CacheRows<'_>,
    positions: &Tensor,
    rows: usize,
    nk: usize,
    nv: usize,
    d: usize,
) -> Result<AppendTarget> {
    let have = ctx.limits.max_storage_buffers_per_shader_stage;
    if have < APPEND_STORAGE_BINDINGS {
        return Err(Error::NoRoute {
            op: "norm_rope",
            shapes: format!("rows {rows}, kv heads {}, head_dim {d}", cache.kv_heads),
            failed: vec![format!(
                "append in norm_rope: {APPEND_STORAGE_BINDINGS} storage bindings per stage \
                 (device: {have})"
            )],
        });
    }
    // K = V caches store V only: no k heads; otherwise as many k heads as v heads.
    let want_k = if cache.k.is_some() { cache.kv_heads } else { 0 };
    if cache.head_dim != d || nv != cache.kv_heads || nk != want_k {
        return Err(Error::invalid(
            "norm_rope",
            "k / v heads and head_dim of the appended rows",
            format!(
                "{want_k} / {} heads of {} (the cache's)",
                cache.kv_heads, cache.head_dim
            ),
            format!("{nk} / {nv} heads of {d}"),
        ));
    }
    let row_floats = cache.sequences * cache.kv_heads * cache.slots * d;
    for (t, what) in [(Some(cache.v), "v cache"), (cache.k, "k cache")] {
        if let Some(t) = t {
            if t.dtype() != DType::F32 || t.numel() != row_floats {
                return Err(Error::invalid(
                    "norm_rope",
                    what,
                    format!("f32 of {row_floats} floats"),
                    format!("{:?} {:?}", t.dtype(), t.shape()),
                ));
            }
        }
    }
    let wanted = if cache.sequences > 1 { 2 * rows } else { rows };
    if positions.numel() < wanted {
        return Err(Error::invalid(
            "norm_rope",
            "positions of an appending norm_rope",
            format!(">= {wanted} (positions, then each row's sequence)"),
            positions.numel(),
        ));
    }
    let k = match cache.k {
        Some(k) => k.clone(),
        None => Tensor::zeros(ctx, "norm_rope.no_k_cache", &[1], DType::F32)?,
    };
    Ok(AppendTarget {
        k,
        v: cache.v.clone(),
        kv_heads: cache.kv_heads as u32,
        slots: cache.slots as u32,
        ring: cache.ring as u32,
        sequences: cache.sequences as u32,
    })
}
