//! Linear layers, `y[m, n] = sum_k x[m, k] * W[n, k]` (HF `nn.Linear`, no bias), with
//! x f32 `[M, K]` and y f32 `[M, N]`, over Q4 group-wise weights ([`quant`] documents the
//! format) or dense f32/f16 weights (parity runs).
//!
//! Q4 routes, chosen when the kernels are built (M is fixed then), first eligible wins:
//! - [`LinearRoute::Q4Gemv`] (M = 1), [`LinearRoute::Q4LinearM3`] (M = 3) and
//!   [`LinearRoute::Q4LinearSmallM`] (M = 2 or 4..=9): vec4<u32> loads (32 weights),
//!   coalesced across lanes, 4 rows per lane so each x load is reused, each weight word
//!   read once and applied to all M rows; lanes per row and K split from an adapter table
//!   ([`tuning`]); reduced with subgroup operations when the device has 32-lane subgroups,
//!   else through workgroup memory ([`LinearOptions::portable`] forces the latter).
//!   Guards: M, K % 32, group % 8, device limits.
//! - [`LinearRoute::Q4GemmCoop`] (M >= 16, 16x16x16 f16/f32 cooperative matrices, subgroups
//!   of 32): tensor-core GEMM, 128 x 128 tiles, x and dequantised W as f16 in workgroup
//!   memory (double-buffered), f32 accumulation.
//! - [`LinearRoute::Q4GemmInt8`] (M >= 10 where int8 activations run, K and group % 32 ==
//!   0, below the tensor-core route): the activations quantised per block of 32 as the
//!   int8 matvecs do (`q8_quantize_rows.wgsl`, once per linear), then 64 x 128 tiles
//!   summed per block by integer dot products (`q4_gemm_int8.wgsl`).
//! - [`LinearRoute::Q4GemmF16`] (M >= 16, shader-f16, group % 32 == 0): 64 x 128 tiles with
//!   the weight tile as exact f16 nibbles and the scales applied per 32-k step (f32 numbers).
//! - [`LinearRoute::Q4Gemm`] (M >= 2, chosen from M = 10): 64 x 64 tiles, x and
//!   dequantised W staged in
//!   workgroup memory.
//! - [`LinearRoute::Q4Generic`]: any M, one invocation per output.
//!
//! A weight too large for one storage binding is split into row chunks at upload
//! ([`Q4Weight`]); the op then holds one kernel per chunk, each writing its rows of y.

#[cfg(any(test, feature = "harness"))]
mod cases;
mod epilogue;
mod gemm;
mod gemm_int8;
pub mod int8;
pub(crate) mod matvec_variants;
mod norm_prologue;
mod op;
pub mod quant;
pub mod reference;
mod routes;
#[cfg(test)]
mod tests;
mod tuning;

#[cfg(any(test, feature = "harness"))]
pub use cases::{
    bench_cases, int8_check_cases, prefill_cases, random_cases, DenseLinearCase, Q4LinearCase,
    WeightData,
};
pub use epilogue::Epilogue;
pub use norm_prologue::{
    q4_linear_norm, q4_linear_norm_with, q4_norm_prologue_available, NormPrologue, NormPrologueMode,
};
pub use op::{Linear, LinearOptions};
pub use quant::{
    dequantize_q4, pack_scale_halves, quantize_q4, Q4Chunk, Q4Host, Q4Weight, Q4Words,
    CHUNK_ROW_MULTIPLE,
};
#[cfg(any(test, feature = "harness"))]
pub use reference::tolerance;
pub use reference::{linear_ref, q4_linear_ref, q4_linear_ref_f16, q4q8_linear_ref};
pub use routes::{
    check_dense_route, choose_q4_route, q4_failed_guards, DeviceCaps, LinearRoute, Q4Shape,
    Reduction, PREFILL_GEMM_MIN_ROWS, Q4_ROUTES,
};
pub use tuning::{choose_tuning, AdapterProfile, MatvecTuning};

use crate::error::{Error, Result};
use crate::gpu::{workgroups_for, Activations, DType, GpuContext, Kernel, KernelBuilder, Tensor};
use matvec_variants::{matvec_variant, MatvecFamily};
pub(crate) use op::check_io;
use op::{check_io_cols, to_u32, DenseParams, Q4Params};

/// `y = x W^T` with a Q4 weight, auto-chosen route.
pub fn q4_linear(ctx: &GpuContext, x: &Tensor, w: &Q4Weight, y: &Tensor) -> Result<Linear> {
    q4_linear_with(ctx, x, w, y, &LinearOptions::default())
}

/// `y = x W^T` with a Q4 weight and explicit [`LinearOptions`].
pub fn q4_linear_with(
    ctx: &GpuContext,
    x: &Tensor,
    w: &Q4Weight,
    y: &Tensor,
    options: &LinearOptions,
) -> Result<Linear> {
    build_q4(ctx, x, w, y, options, Epilogue::None, None)
}

/// Whether [`q4_linear_fused`] can build `epilogue` for `x` on this device: a matvec
/// route (M <= 9) is chosen, and a GeGLU-pairs weight is one chunk with an even row
/// count of 16-row halves. Callers fall back to the linear + a separate GeGLU otherwise.
pub fn q4_fused_available(ctx: &GpuContext, x: &Tensor, w: &Q4Weight, epilogue: Epilogue) -> bool {
    q4_fused_available_for(ctx, x.numel() / w.k().max(1), w, epilogue)
}

fn q4_fused_available_for(ctx: &GpuContext, m: usize, w: &Q4Weight, epilogue: Epilogue) -> bool {
    let (subgroup, caps) = matvec_caps(ctx, &LinearOptions::default());
    let route = choose_q4_route(
        Q4Shape {
            m,
            k: w.k(),
            group: w.group(),
        },
        &caps,
        subgroup,
        None,
        String::new,
    );
    let matvec = matches!(route, Ok(r) if r.is_matvec());
    let pairs_ok = match epilogue {
        Epilogue::GegluPairs => w.chunks().len() == 1 && w.n() % 2 == 0,
        _ => true,
    };
    matvec && pairs_ok
}

/// `y = epilogue(x W^T)` in the matvec kernel itself (see [`Epilogue`]); fails closed
/// when [`q4_fused_available`] is false, naming why.
pub fn q4_linear_fused(
    ctx: &GpuContext,
    x: &Tensor,
    w: &Q4Weight,
    y: &Tensor,
    epilogue: Epilogue,
) -> Result<Linear> {
    q4_linear_fused_with(ctx, x, w, y, epilogue, &LinearOptions::default())
}

/// [`q4_linear_fused`] with explicit [`LinearOptions`] (the portable reduction in tests).
pub fn q4_linear_fused_with(
    ctx: &GpuContext,
    x: &Tensor,
    w: &Q4Weight,
    y: &Tensor,
    epilogue: Epilogue,
    options: &LinearOptions,
) -> Result<Linear> {
    if !q4_fused_available(ctx, x, w, epilogue) {
        return Err(Error::NoRoute {
            op: "q4_linear",
            shapes: format!(
                "x {:?}, W [{}, {}] in {} chunk(s), epilogue {epilogue:?}",
                x.shape(),
                w.n(),
                w.k(),
                w.chunks().len()
            ),
            failed: vec!["fused epilogues: need a matvec route (M <= 9) and, \
                 for GeGLU pairs, an unsplit weight with an even row count"
                .into()],
        });
    }
    build_q4(ctx, x, w, y, options, epilogue, None)
}

/// (subgroup reduction usable, device caps) for the matvec routes.
fn matvec_caps(ctx: &GpuContext, options: &LinearOptions) -> (bool, DeviceCaps) {
    let mut caps = DeviceCaps::of(ctx);
    if let Some(a) = options.activations {
        caps.int8_activations = a == Activations::Int8;
    }
    // The subgroup matvec maps one 32-lane unit to one subgroup.
    let subgroup = caps.subgroups
        && caps.min_subgroup_size == 32
        && caps.max_subgroup_size == 32
        && !options.portable;
    (subgroup, caps)
}

fn build_q4(
    ctx: &GpuContext,
    x: &Tensor,
    w: &Q4Weight,
    y: &Tensor,
    options: &LinearOptions,
    epilogue: Epilogue,
    prologue: Option<&NormPrologue>,
) -> Result<Linear> {
    // A prologue without a residual output still binds one (read_write): a scratch word.
    let resid_out_dummy = match prologue {
        Some(p) if p.resid_out.is_none() => Some(Tensor::zeros(
            ctx,
            "q4_linear.no_resid_out",
            &[1],
            DType::F32,
        )?),
        _ => None,
    };
    let (n, k, group) = (w.n(), w.k(), w.group());
    let y_cols = match epilogue {
        Epilogue::GegluPairs => n / 2,
        _ => n,
    };
    let m = check_io_cols(Q4_OP, x, y, n, y_cols, k)?;
    check_gelu_mul_operand(epilogue, m, n)?;
    let (subgroup, caps) = matvec_caps(ctx, options);
    let shape = Q4Shape { m, k, group };
    let route = choose_q4_route(shape, &caps, subgroup, options.route, || {
        format!(
            "x {:?}, W [{n}, {k}] group {group}, y {:?}",
            x.shape(),
            y.shape()
        )
    })?;
    let reduction = match (route.is_matvec(), subgroup) {
        (true, true) => Reduction::Subgroup,
        (true, false) => Reduction::Workgroup,
        (false, _) => Reduction::NotApplicable,
    };
    let mut kernels = Vec::with_capacity(w.chunks().len() + 1);
    // The int8 GEMM quantises x once for every row chunk.
    let int8_x = if route == LinearRoute::Q4GemmInt8 {
        let (quantize, scratch, layout) = gemm_int8::quantize_rows(ctx, x, m, k)?;
        kernels.push(quantize);
        Some((scratch, layout))
    } else {
        None
    };
    let call = Q4Call {
        ctx,
        x,
        y,
        options,
        epilogue,
        prologue,
        resid_out_dummy,
        shape,
        n,
        y_cols,
        route,
        subgroup,
        caps,
        int8_x,
    };
    for chunk in w.chunks() {
        kernels.extend(call.chunk_kernels(chunk)?);
    }
    Ok(Linear {
        route,
        reduction,
        kernels,
    })
}

const Q4_OP: &str = "q4_linear";

/// Refuses a GeLU-multiply operand too small for `m` rows of `n` outputs at its stride.
fn check_gelu_mul_operand(epilogue: Epilogue, m: usize, n: usize) -> Result<()> {
    if let Epilogue::GeluMul {
        other,
        stride,
        offset,
    } = epilogue
    {
        let need = (m - 1) * stride + offset + n;
        if other.dtype() != DType::F32 || other.numel() < need || stride < n {
            return Err(Error::invalid(
                Q4_OP,
                "GeLU-multiply operand",
                format!("f32 with >= {need} elements, row stride >= {n}"),
                format!("{:?} {:?}, stride {stride}", other.dtype(), other.shape()),
            ));
        }
    }
    Ok(())
}

/// One Q4 linear being built: its tensors, options, shape and route, shared by the
/// kernels of every row chunk of the weight.
struct Q4Call<'a> {
    ctx: &'a GpuContext,
    x: &'a Tensor,
    y: &'a Tensor,
    options: &'a LinearOptions,
    epilogue: Epilogue<'a>,
    prologue: Option<&'a NormPrologue<'a>>,
    resid_out_dummy: Option<Tensor>,
    shape: Q4Shape,
    /// Rows of the whole weight.
    n: usize,
    /// Columns of y (half of n with the GeGLU-pairs epilogue).
    y_cols: usize,
    route: LinearRoute,
    subgroup: bool,
    caps: DeviceCaps,
    /// The int8 GEMM's quantised activations (its x binding) and their layout.
    int8_x: Option<(Tensor, gemm_int8::Int8Rows)>,
}

impl Q4Call<'_> {
    /// The kernels of one row chunk, in dispatch order (a split GEMM: the GEMM, then its
    /// combine).
    fn chunk_kernels(&self, chunk: &Q4Chunk) -> Result<Vec<Kernel>> {
        let (m, rows, k) = (self.shape.m, chunk.rows.len(), self.shape.k);
        let tuning = self.chunk_tuning(rows)?;
        let params = self.chunk_params(chunk)?;
        match self.route {
            r if r.is_matvec() => Ok(vec![self.matvec_kernel(chunk, &params, tuning)?]),
            LinearRoute::Q4Gemm
            | LinearRoute::Q4GemmF16
            | LinearRoute::Q4GemmCoop
            | LinearRoute::Q4GemmInt8 => {
                let plan = gemm::plan(self.route, m, rows, k, true);
                // The int8 GEMM reads where the activations' scales start (its own word).
                let params = match &self.int8_x {
                    Some((_, layout)) => Q4Params {
                        aux0: to_u32(Q4_OP, "int8 activation words", layout.d_base)?,
                        ..params
                    },
                    None => params,
                };
                let out = |t: &Tensor| self.kernel_builder(plan.shader, &params, chunk, t);
                gemm::build(self.ctx, plan, out, &params, self.y)
            }
            _ => Ok(vec![self
                .kernel_builder("q4_linear_generic", &params, chunk, self.y)
                .build_1d(workgroups_for((m * rows) as u64, 64))?]),
        }
    }

    /// The matvec geometry of a chunk of `rows` rows (the options' or the adapter
    /// table's); on a matvec route, refused when it is invalid for M or its parking
    /// array does not fit the workgroup memory left.
    fn chunk_tuning(&self, rows: usize) -> Result<MatvecTuning> {
        let (m, k) = (self.shape.m, self.shape.k);
        let pairs = matches!(self.epilogue, Epilogue::GegluPairs);
        let is_matvec = self.route.is_matvec();
        let mut tuning = self
            .options
            .tuning
            .unwrap_or_else(|| choose_tuning(AdapterProfile::BASE, rows, k, self.epilogue));
        if self.route == LinearRoute::Q4Q8Matvec && self.options.tuning.is_none() {
            tuning = int8::tuning(tuning, rows, k);
            // A K split widens the slot stride past what one staged chunk may hold.
            while tuning.ksplit > 1 && self.int8_chunk(tuning).is_none() {
                tuning.ksplit /= 2;
            }
        }
        // The route's guard counted the smallest parking array (32 vec4s).
        let park_bytes = if self.subgroup {
            (tuning.park_vec4s(m, pairs) * 16).saturating_sub(512)
        } else {
            0
        };
        let storage_left = self
            .caps
            .max_workgroup_storage
            .saturating_sub(self.route.workgroup_storage(self.subgroup));
        let invalid = tuning.invalid(m, pairs).or_else(|| {
            (is_matvec && park_bytes > storage_left).then(|| {
                format!("{park_bytes} more bytes of workgroup memory (device has {storage_left})")
            })
        });
        let invalid = invalid.or_else(|| {
            (self.route == LinearRoute::Q4Q8Matvec && self.int8_chunk(tuning).is_none()).then(
                || {
                    format!(
                        "one int8 chunk of {} blocks x {m} rows in the workgroup memory left",
                        tuning.lanes * tuning.ksplit
                    )
                },
            )
        });
        if let (true, Some(why)) = (is_matvec, invalid) {
            return Err(Error::NoRoute {
                op: Q4_OP,
                shapes: format!(
                    "x {:?}, W [{}, {k}], matvec tuning {tuning:?}",
                    self.x.shape(),
                    self.n
                ),
                failed: vec![format!("{}: {why}", self.route)],
            });
        }
        Ok(tuning)
    }

    /// Blocks per staged int8 chunk for `tuning` (see [`int8::chunk_words`]): the
    /// workgroup memory left after the reduction's arrays and parked totals (and the norm
    /// prologue's sums).
    fn int8_chunk(&self, tuning: MatvecTuning) -> Option<usize> {
        let (m, k) = (self.shape.m, self.shape.k);
        let pairs = matches!(self.epilogue, Epilogue::GegluPairs);
        let park = if self.subgroup {
            tuning.park_vec4s(m, pairs) as usize * 16
        } else {
            self.route.workgroup_storage(false) as usize
        };
        let prologue = if self.prologue.is_some() {
            1024 + 72
        } else {
            0
        };
        let left = (self.caps.max_workgroup_storage as usize).saturating_sub(park + prologue);
        int8::chunk_words(m, k, (tuning.lanes * tuning.ksplit) as usize, left)
    }

    /// The uniform of a chunk's kernel.
    fn chunk_params(&self, chunk: &Q4Chunk) -> Result<Q4Params> {
        let Q4Shape { m, k, group } = self.shape;
        let (aux0, aux1) = match self.epilogue {
            Epilogue::None => (0, 0),
            Epilogue::GegluPairs => (self.n / 2, 0),
            Epilogue::GeluMul { stride, offset, .. } => (stride, offset),
        };
        let prologue = self.prologue;
        Ok(Q4Params {
            m: m as u32,
            n: to_u32(Q4_OP, "rows of a chunk", chunk.rows.len())?,
            k: k as u32,
            groups: (k / group) as u32,
            y_stride: self.y_cols as u32,
            y_offset: chunk.rows.start as u32,
            aux0: to_u32(Q4_OP, "epilogue stride", aux0)?,
            aux1: to_u32(Q4_OP, "epilogue offset", aux1 + chunk.rows.start)?,
            eps: prologue.map_or(0.0, |p| p.eps),
            out_scale: prologue.map_or(1.0, |p| p.out_scale),
            // Only the first chunk's workgroup 0 writes the updated residual.
            write_resid: u32::from(
                chunk.rows.start == 0 && prologue.is_some_and(|p| p.resid_out.is_some()),
            ),
            _pad: 0,
        })
    }

    /// The bindings every route's kernel starts with. `out`: y, or the split GEMM's
    /// partial scratch (gemm.rs).
    fn kernel_builder(
        &self,
        shader: &'static str,
        params: &Q4Params,
        chunk: &Q4Chunk,
        out: &Tensor,
    ) -> KernelBuilder<'_> {
        KernelBuilder::new(self.ctx, shader)
            .constant("GROUP", self.shape.group as u64)
            .uniform(params)
            .tensor(match (&self.int8_x, self.prologue) {
                (Some((t, _)), _) => t,
                (None, Some(p)) => p.resid,
                (None, None) => self.x,
            })
            .tensor(&chunk.packed)
            .tensor(&chunk.scales)
            .tensor(out)
    }

    /// A matvec route's kernel: the decode or wide variant, its geometry as constants,
    /// the epilogue's operand and the prologue's tensors.
    fn matvec_kernel(
        &self,
        chunk: &Q4Chunk,
        params: &Q4Params,
        tuning: MatvecTuning,
    ) -> Result<Kernel> {
        let (m, k, rows) = (self.shape.m, self.shape.k, chunk.rows.len());
        let pairs = matches!(self.epilogue, Epilogue::GegluPairs);
        let family = if self.route == LinearRoute::Q4Q8Matvec {
            MatvecFamily::Int8
        } else if tuning.fits_decode_family(m) {
            MatvecFamily::Decode
        } else {
            MatvecFamily::Wide
        };
        let shader = matvec_variant(family, self.prologue.is_some(), self.subgroup).name;
        let other = match self.epilogue {
            Epilogue::GeluMul { other, .. } => other,
            _ => self.x,
        };
        let mut b = self
            .kernel_builder(shader, params, chunk, self.y)
            .constant("MV_M", m as u64)
            .constant("EPILOGUE", self.epilogue.code())
            .constant("KSPLIT", u64::from(tuning.ksplit));
        if family != MatvecFamily::Decode {
            b = b
                .constant("LPR", u64::from(tuning.lanes))
                .constant("ROWS", u64::from(tuning.rows))
                .constant("ROWS_PER_WG", u64::from(tuning.rows_per_workgroup()))
                .constant("K_WORDS", if tuning.unroll { (k / 32) as u64 } else { 0 })
                .constant("PARK", u64::from(tuning.park_vec4s(m, pairs)));
        }
        if family == MatvecFamily::Int8 {
            let chunk = self.int8_chunk(tuning).unwrap_or(0) as u64;
            b = b
                .constant("CHUNK_WORDS", chunk)
                .constant("XQ_BLOCKS", m as u64 * chunk)
                .constant("XQ_VEC4", 2 * m as u64 * chunk);
        }
        b = b.tensor(other);
        if let Some(p) = self.prologue {
            if family != MatvecFamily::Int8 {
                b = b.constant("X_VEC4", (m * k / 4) as u64);
            }
            b = b
                .constant("PROLOGUE", p.mode.code())
                .constant("K_DIM", k as u64)
                .tensor(p.branch.map_or(p.resid, |(t, _)| t))
                .tensor(p.branch.map_or(p.resid, |(_, w)| w))
                .tensor(p.w_in.unwrap_or(p.resid))
                .tensor(match (p.resid_out, &self.resid_out_dummy) {
                    (Some(t), _) | (None, Some(t)) => t,
                    (None, None) => unreachable!("a dummy exists without resid_out"),
                });
        }
        b.build_1d(match self.epilogue {
            // Half of a workgroup's rows are gate rows, the other half their up rows.
            Epilogue::GegluPairs => {
                workgroups_for((rows / 2) as u64, tuning.rows_per_workgroup() / 2)
            }
            _ => workgroups_for(rows as u64, tuning.rows_per_workgroup()),
        })
    }
}

/// `y = x W^T` with a dense weight `w` of dtype f32 or f16 and shape `[N, K]`.
pub fn dense_linear(ctx: &GpuContext, x: &Tensor, w: &Tensor, y: &Tensor) -> Result<Linear> {
    const OP: &str = "dense_linear";
    let route = match w.dtype() {
        DType::F32 => LinearRoute::DenseF32,
        DType::F16 => LinearRoute::DenseF16,
        other => {
            return Err(Error::invalid(
                OP,
                "dtype of w",
                "f32 or f16",
                format!("{other:?}"),
            ))
        }
    };
    let &[n, k] = w.shape() else {
        return Err(Error::invalid(
            OP,
            "shape of w",
            "[N, K]",
            format!("{:?}", w.shape()),
        ));
    };
    if n == 0 || k == 0 {
        return Err(Error::invalid(
            OP,
            "shape of w",
            "N, K >= 1",
            format!("{:?}", w.shape()),
        ));
    }
    to_u32(OP, "elements of w", n * k)?;
    let m = check_io(OP, x, y, n, k)?;
    check_dense_route(route, &DeviceCaps::of(ctx), || {
        format!("x {:?}, w {:?} {:?}", x.shape(), w.shape(), w.dtype())
    })?;
    let kernel = KernelBuilder::new(ctx, "dense_linear")
        .constant("W_F16", (route == LinearRoute::DenseF16) as u64)
        .uniform(&DenseParams {
            m: m as u32,
            n: n as u32,
            k: k as u32,
            _pad: 0,
        })
        .tensor(x)
        .tensor(w)
        .tensor(y)
        .build_1d(n as u64 * m.div_ceil(4) as u64)?;
    Ok(Linear {
        route,
        reduction: Reduction::NotApplicable,
        kernels: vec![kernel],
    })
}
