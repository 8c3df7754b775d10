//! RoPE (rotary position embedding) in the rotate_half layout of HF `apply_rotary_pos_emb`,
//! for Gemma 4: sliding layers "default" rope (theta 1e4, all 128 pairs of head_dim 256) and
//! full layers "proportional" rope (theta 1e6, partial_rotary_factor 0.25 of head_dim 512:
//! pairs 0..64 rotate with exponents over all 512 dims, the other 192 pairs pass through).
//!
//! `inv_freq` is computed once on the host exactly as HF does and uploaded once; positions
//! are read per row from a GPU u32 buffer, and cos/sin are computed in the shader in f32 from
//! `f32(pos) * inv_freq[i]` (the same f32 angle as HF) with an exact range reduction, so the
//! result matches HF's f32 math to about one f32 ulp: measured max |gpu - hf| = 1.2e-7 for
//! |x| <= 1 at positions up to 2^18 - 1 on lavapipe; the cases allow 1e-6 (for any device's
//! exp/fma rounding), i.e. |gpu - hf| <= 1e-6 * max|x| below [`MAX_POSITION`].

mod norm_rope;
mod reference;

pub use norm_rope::{CacheRows, NormRopeHeads, VHeads};
pub use reference::{rope_cos_sin_ref, rope_inv_freq, rope_ref};

#[cfg(any(test, feature = "harness"))]
mod cases;
#[cfg(any(test, feature = "harness"))]
pub use cases::{bench_cases, random_cases, RopeCase, RopeMode};

use crate::error::{Error, Result};
use crate::gpu::{DType, GpuContext, Grid, Kernel, KernelBuilder, Pass, Tensor};

const SHADER: &str = "rope";

/// Positions must stay below 2^18: the shader's range reduction is exact up to there (Gemma 4
/// contexts are at most 256K = 2^18 tokens).
pub const MAX_POSITION: u32 = 1 << 18;

/// How `inv_freq` is derived (HF `rope_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RopeType {
    /// `compute_default_rope_parameters`: every pair rotates.
    Default,
    /// `_compute_proportional_rope_parameters`: the first `partial_rotary_factor` of the
    /// pairs rotate (exponents over the whole head_dim), the rest pass through.
    Proportional,
}

/// One layer type's RoPE parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RopeConfig {
    pub head_dim: usize,
    pub theta: f64,
    pub rope_type: RopeType,
    /// Only used by [`RopeType::Proportional`] (HF ignores it for "default").
    pub partial_rotary_factor: f64,
}

impl RopeConfig {
    /// Gemma 4 sliding layers: default rope, theta 1e4.
    pub fn gemma4_sliding(head_dim: usize) -> RopeConfig {
        RopeConfig {
            head_dim,
            theta: 10_000.0,
            rope_type: RopeType::Default,
            partial_rotary_factor: 1.0,
        }
    }

    /// Gemma 4 full layers: proportional rope, theta 1e6, partial_rotary_factor 0.25.
    pub fn gemma4_full(head_dim: usize) -> RopeConfig {
        RopeConfig {
            head_dim,
            theta: 1_000_000.0,
            rope_type: RopeType::Proportional,
            partial_rotary_factor: 0.25,
        }
    }

    /// Pairs that rotate (the rest have inv_freq 0): HF's `rope_angles`.
    pub fn rotated_pairs(&self) -> usize {
        match self.rope_type {
            RopeType::Default => self.head_dim / 2,
            // Python: int(partial_rotary_factor * head_dim // 2)
            RopeType::Proportional => (((self.partial_rotary_factor * self.head_dim as f64) / 2.0)
                .floor()
                .max(0.0) as usize)
                .min(self.head_dim / 2),
        }
    }

    fn validate(&self) -> Result<()> {
        if self.head_dim < 2 || self.head_dim % 2 != 0 {
            return Err(Error::invalid(
                "rope",
                "head_dim",
                "an even number >= 2",
                self.head_dim,
            ));
        }
        if !(self.theta.is_finite() && self.theta > 1.0) {
            return Err(Error::invalid(
                "rope",
                "theta",
                "finite and > 1",
                self.theta,
            ));
        }
        if !(0.0..=1.0).contains(&self.partial_rotary_factor) {
            return Err(Error::invalid(
                "rope",
                "partial_rotary_factor",
                "in [0, 1]",
                self.partial_rotary_factor,
            ));
        }
        Ok(())
    }
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    heads_a: u32,
    heads_b: u32,
    half: u32,
    rot_pairs: u32,
}

/// A layer type's RoPE: its config and `inv_freq` on the GPU (uploaded once).
#[derive(Debug, Clone)]
pub struct Rope {
    config: RopeConfig,
    inv_freq: Tensor,
    rot_pairs: u32,
}

/// A built RoPE dispatch over up to `rows` rows; [`RopeKernel::record`] dispatches the rows
/// of one step.
#[derive(Debug)]
pub struct RopeKernel {
    kernel: Kernel,
    rows: usize,
}

impl RopeKernel {
    /// Rows the kernel was built for (the activation tensors' first dimension).
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// The grid for the first `m` rows of a step.
    pub fn grid_for_rows(&self, m: usize) -> Result<Grid> {
        if m == 0 || m > self.rows {
            return Err(Error::invalid(
                "rope",
                "rows of this step",
                format!("1..={}", self.rows),
                m,
            ));
        }
        Ok(Grid::new(self.kernel.grid().x, m as u32, 1))
    }

    /// Records the rotation of the first `m` rows (their positions are read from the GPU).
    pub fn record(&self, pass: &mut Pass<'_>, m: usize) -> Result<()> {
        pass.dispatch_grid(&self.kernel, self.grid_for_rows(m)?);
        Ok(())
    }

    /// The kernel with the grid of all `rows` rows.
    pub fn kernel(&self) -> &Kernel {
        &self.kernel
    }

    /// The kernel for the first `m` rows (for the harness).
    pub fn kernel_for_rows(&self, m: usize) -> Result<Kernel> {
        Ok(self.kernel.with_grid(self.grid_for_rows(m)?))
    }
}

fn check_activation(t: &Tensor, what: &'static str, head_dim: usize) -> Result<(usize, usize)> {
    if t.dtype() != DType::F32 {
        return Err(Error::invalid(
            "rope",
            format!("dtype of {what}"),
            "f32",
            format!("{:?}", t.dtype()),
        ));
    }
    match *t.shape() {
        [rows, heads, d] if d == head_dim && rows > 0 && heads > 0 => Ok((rows, heads)),
        _ => Err(Error::invalid(
            "rope",
            format!("shape of {what}"),
            format!("[rows >= 1, heads >= 1, {head_dim}]"),
            format!("{:?}", t.shape()),
        )),
    }
}

fn check_positions(positions: &Tensor, rows: usize) -> Result<()> {
    if positions.dtype() != DType::U32 || positions.numel() < rows {
        return Err(Error::invalid(
            "rope",
            "positions",
            format!("u32 with >= {rows} elements"),
            format!("{:?} {:?}", positions.dtype(), positions.shape()),
        ));
    }
    Ok(())
}

impl Rope {
    /// Computes `inv_freq` as HF does and uploads it.
    pub fn new(ctx: &GpuContext, config: RopeConfig) -> Result<Rope> {
        config.validate()?;
        let inv_freq = rope_inv_freq(&config);
        let tensor = Tensor::from_f32(ctx, "rope.inv_freq", &[inv_freq.len()], &inv_freq)?;
        Ok(Rope {
            config,
            inv_freq: tensor,
            rot_pairs: config.rotated_pairs() as u32,
        })
    }

    pub fn config(&self) -> &RopeConfig {
        &self.config
    }

    /// `inv_freq` [head_dim / 2] on the GPU (zeros past the rotated pairs).
    pub fn inv_freq(&self) -> &Tensor {
        &self.inv_freq
    }

    pub fn rotated_pairs(&self) -> u32 {
        self.rot_pairs
    }

    fn build(
        &self,
        ctx: &GpuContext,
        entry: &'static str,
        heads: (usize, usize),
        rows: usize,
        positions: &Tensor,
        tensors: &[&Tensor],
    ) -> Result<RopeKernel> {
        check_positions(positions, rows)?;
        let grid_x = heads.0 + heads.1;
        let max = ctx.limits.max_compute_workgroups_per_dimension as usize;
        if grid_x > max || rows > max {
            return Err(Error::NoRoute {
                op: "rope",
                shapes: format!("rows {rows}, heads {grid_x}"),
                failed: vec![format!(
                    "rows <= {max} and heads <= {max} (one workgroup per row and head)"
                )],
            });
        }
        let mut builder = KernelBuilder::new(ctx, SHADER)
            .entry(entry)
            .uniform(&Params {
                heads_a: heads.0 as u32,
                heads_b: heads.1 as u32,
                half: (self.config.head_dim / 2) as u32,
                rot_pairs: self.rot_pairs,
            })
            .tensor(positions)
            .tensor(&self.inv_freq);
        for t in tensors {
            builder = builder.tensor(t);
        }
        Ok(RopeKernel {
            kernel: builder.build(Grid::new(grid_x as u32, rows as u32, 1))?,
            rows,
        })
    }

    /// Rotates `x` [rows, heads, head_dim] in place (only the rotated pairs are touched).
    pub fn in_place(&self, ctx: &GpuContext, x: &Tensor, positions: &Tensor) -> Result<RopeKernel> {
        let (rows, heads) = check_activation(x, "x", self.config.head_dim)?;
        self.build(ctx, "rope_inplace", (heads, 0), rows, positions, &[x])
    }

    /// `out = rope(x)`, both [rows, heads, head_dim] (pass-through pairs are copied).
    pub fn out_of_place(
        &self,
        ctx: &GpuContext,
        x: &Tensor,
        positions: &Tensor,
        out: &Tensor,
    ) -> Result<RopeKernel> {
        let (rows, heads) = check_activation(x, "x", self.config.head_dim)?;
        if out.shape() != x.shape() || out.dtype() != DType::F32 {
            return Err(Error::invalid(
                "rope",
                "out",
                format!("f32 {:?}", x.shape()),
                format!("{:?} {:?}", out.dtype(), out.shape()),
            ));
        }
        if out.buffer() == x.buffer() {
            return Err(Error::invalid(
                "rope",
                "out (use in_place to rotate a tensor in place)",
                "a tensor other than x",
                "x itself",
            ));
        }
        self.build(ctx, "rope_out", (heads, 0), rows, positions, &[x, out])
    }

    /// Rotates q [rows, heads, head_dim] and k [rows, kv_heads, head_dim] in place in ONE
    /// dispatch (the per-layer path: q and k share the positions).
    pub fn qk_in_place(
        &self,
        ctx: &GpuContext,
        q: &Tensor,
        k: &Tensor,
        positions: &Tensor,
    ) -> Result<RopeKernel> {
        let (rows, heads) = check_activation(q, "q", self.config.head_dim)?;
        let (k_rows, kv_heads) = check_activation(k, "k", self.config.head_dim)?;
        if k_rows != rows {
            return Err(Error::invalid("rope", "rows of k", rows, k_rows));
        }
        if q.buffer() == k.buffer() {
            return Err(Error::invalid(
                "rope",
                "k",
                "a tensor other than q",
                "q itself",
            ));
        }
        self.build(
            ctx,
            "rope_qk_inplace",
            (heads, kv_heads),
            rows,
            positions,
            &[q, k],
        )
    }
}

#[cfg(test)]
mod tests;
