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
}

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
        let kernel = KernelBuilder::new(ctx, "norm_rope")
            .uniform(&Params {
                nq: nq as u32,
                nk: nk as u32,
                nv: nv as u32,
                d: d as u32,
                half: (d / 2) as u32,
                rot_pairs: self.rot_pairs,
                eps,
                v_from_k: v_src.is_some() as u32,
            })
            .tensor(positions)
            .tensor(&self.inv_freq)
            .tensor(q.0)
            .tensor(k_binding)
            .tensor(v_dst.unwrap_or(&no_v))
            .tensor(q.1)
            .tensor(k.map(|k| k.1).unwrap_or(&no_wk))
            .build(Grid::new(slots as u32, rows as u32, 1))?;
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
