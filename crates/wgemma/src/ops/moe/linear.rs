//! The gathered-expert linear: `y[s] = W[ids[s]] x[s / x_div]` for every routing slot
//! `s = m * top_k + j`, reading the expert id from the GPU buffer, so only the selected
//! experts' weights are read. Optionally with the GeGLU epilogue (the expert `gate_up_proj`
//! followed by `gelu_tanh(gate) * up` in one dispatch).
//!
//! Routes, chosen when the kernels are built, first eligible wins:
//! - [`MoeLinearRoute::Q4Grouped`] (`moe_q4_matvec.wgsl`): slots with the same expert are
//!   computed together by one workgroup (each weight word applied to up to 4 slots), vec4
//!   loads, a workgroup-memory reduction. Guards: Q4 weight, K % 32, slots <= 1024, device.
//! - [`MoeLinearRoute::Q4Generic`] (`moe_q4_generic.wgsl`): one invocation per output, any
//!   K % 8 and any number of slots.
//! - [`MoeLinearRoute::DenseF32`] / [`MoeLinearRoute::DenseF16`] (`moe_dense_linear.wgsl`).
//!
//! One kernel per expert chunk of the weight ([`ExpertWeight`]); each skips the slots whose
//! expert is outside its chunk, and the first also writes zeros for ids `>= E` (which
//! `moe_route` never produces), so every row of `y` is defined.

use super::weight::{ChunkData, ExpertFormat, ExpertWeight};
use crate::error::{Error, Result};
use crate::gpu::{workgroups_for, DType, GpuContext, Kernel, KernelBuilder, Pass, Tensor};

const OP: &str = "moe_expert_linear";
/// Slots one workgroup of the grouped route can gather (its workgroup slot list).
pub const GROUPED_MAX_SLOTS: usize = 1024;
/// Workgroup memory of the grouped route: partials, slot list and a few words.
const GROUPED_WORKGROUP_BYTES: u32 = 512 * 16 + 4 * GROUPED_MAX_SLOTS as u32 + 16;

/// A kernel route of the gathered-expert linear.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MoeLinearRoute {
    Q4Grouped,
    Q4Generic,
    DenseF32,
    DenseF16,
}

impl MoeLinearRoute {
    pub const ALL: [MoeLinearRoute; 4] = [
        MoeLinearRoute::Q4Grouped,
        MoeLinearRoute::Q4Generic,
        MoeLinearRoute::DenseF32,
        MoeLinearRoute::DenseF16,
    ];

    pub fn name(self) -> &'static str {
        match self {
            MoeLinearRoute::Q4Grouped => "q4_grouped",
            MoeLinearRoute::Q4Generic => "q4_generic",
            MoeLinearRoute::DenseF32 => "dense_f32",
            MoeLinearRoute::DenseF16 => "dense_f16",
        }
    }

    fn invocations(self) -> u32 {
        match self {
            MoeLinearRoute::Q4Grouped => 256,
            _ => 64,
        }
    }

    fn workgroup_bytes(self) -> u32 {
        match self {
            MoeLinearRoute::Q4Grouped => GROUPED_WORKGROUP_BYTES,
            MoeLinearRoute::Q4Generic => 0,
            MoeLinearRoute::DenseF32 | MoeLinearRoute::DenseF16 => 64 * 8 + 4,
        }
    }
}

impl std::fmt::Display for MoeLinearRoute {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// What the kernel does with the two dot products of an output.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum MoeEpilogue {
    /// `y[s, o] = W[e, o] . x`, `o < N`.
    #[default]
    None,
    /// `y[s, o] = gelu_tanh(W[e, o] . x) * (W[e, I + o] . x)`, `o < I = N / 2` (the rows of
    /// each expert are `[gate(I); up(I)]`, HF `gate_up_proj`).
    Geglu,
}

/// Options of [`moe_expert_linear_with`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MoeLinearOptions {
    /// Build this route or fail with its failed guards (tests, benchmarks).
    pub route: Option<MoeLinearRoute>,
    pub epilogue: MoeEpilogue,
}

/// A built gathered-expert linear: its route and one kernel per expert chunk.
#[derive(Debug)]
pub struct MoeLinear {
    route: MoeLinearRoute,
    kernels: Vec<Kernel>,
}

impl MoeLinear {
    pub fn route(&self) -> MoeLinearRoute {
        self.route
    }
    pub fn kernels(&self) -> &[Kernel] {
        &self.kernels
    }
    pub fn into_kernels(self) -> Vec<Kernel> {
        self.kernels
    }
    /// Records every kernel into `pass`.
    pub fn record(&self, pass: &mut Pass<'_>) {
        self.kernels.iter().for_each(|k| pass.dispatch(k));
    }
}

/// The shape facts the route guards read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MoeLinearShape {
    pub format: ExpertFormat,
    pub k: usize,
    pub slots: usize,
}

/// What the guards read from the device (a struct, so tests can pose small devices).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MoeDeviceCaps {
    pub max_invocations_per_workgroup: u32,
    pub max_workgroup_size_x: u32,
    pub max_workgroup_storage: u32,
}

impl MoeDeviceCaps {
    pub fn of(ctx: &GpuContext) -> MoeDeviceCaps {
        MoeDeviceCaps {
            max_invocations_per_workgroup: ctx.limits.max_compute_invocations_per_workgroup,
            max_workgroup_size_x: ctx.limits.max_compute_workgroup_size_x,
            max_workgroup_storage: ctx.limits.max_compute_workgroup_storage_size,
        }
    }
}

/// The guards of `route` that fail (empty when eligible).
pub fn moe_linear_failed_guards(
    route: MoeLinearRoute,
    shape: MoeLinearShape,
    caps: &MoeDeviceCaps,
) -> Vec<String> {
    let name = route.name();
    let mut failed = Vec::new();
    let mut need = |ok: bool, what: String| {
        if !ok {
            failed.push(format!("{name}: {what}"));
        }
    };
    let format = shape.format;
    match route {
        MoeLinearRoute::Q4Grouped | MoeLinearRoute::Q4Generic => need(
            matches!(format, ExpertFormat::Q4 { .. }),
            format!("Q4 weight (found {format:?})"),
        ),
        MoeLinearRoute::DenseF32 => need(
            format == ExpertFormat::F32,
            format!("f32 weight (found {format:?})"),
        ),
        MoeLinearRoute::DenseF16 => need(
            format == ExpertFormat::F16,
            format!("f16 weight (found {format:?})"),
        ),
    }
    if route == MoeLinearRoute::Q4Grouped {
        need(
            shape.k % 32 == 0,
            format!("K % 32 == 0 for vec4<u32> loads (found K = {})", shape.k),
        );
        need(
            shape.slots <= GROUPED_MAX_SLOTS,
            format!(
                "slots M * top_k <= {GROUPED_MAX_SLOTS} (found {})",
                shape.slots
            ),
        );
    }
    let inv = route.invocations();
    need(
        caps.max_invocations_per_workgroup >= inv && caps.max_workgroup_size_x >= inv,
        format!(
            "device allows {inv} invocations per workgroup (found max {}, max size x {})",
            caps.max_invocations_per_workgroup, caps.max_workgroup_size_x
        ),
    );
    let bytes = route.workgroup_bytes();
    need(
        caps.max_workgroup_storage >= bytes,
        format!(
            "device workgroup storage >= {bytes} bytes (found {})",
            caps.max_workgroup_storage
        ),
    );
    failed
}

/// The first eligible route (or the forced one, if eligible); else [`Error::NoRoute`]
/// naming every failed guard.
pub fn choose_moe_linear_route(
    shape: MoeLinearShape,
    caps: &MoeDeviceCaps,
    forced: Option<MoeLinearRoute>,
    shapes: impl FnOnce() -> String,
) -> Result<MoeLinearRoute> {
    let candidates: &[MoeLinearRoute] = match &forced {
        Some(r) => std::slice::from_ref(r),
        None => &MoeLinearRoute::ALL,
    };
    let mut failed = Vec::new();
    for &route in candidates {
        let f = moe_linear_failed_guards(route, shape, caps);
        if f.is_empty() {
            return Ok(route);
        }
        failed.extend(f);
    }
    Err(Error::NoRoute {
        op: OP,
        shapes: shapes(),
        failed,
    })
}

/// Lanes per unit of the grouped route: about two vec4 words per lane (K = 2816: 32 lanes,
/// K = 704: 8), a power of two in 4..=32.
pub fn grouped_lanes(k: usize) -> u32 {
    let half_words = (k / 32 / 2).max(1);
    let pow2 = 1usize << (usize::BITS - 1 - half_words.leading_zeros());
    pow2.clamp(4, 32) as u32
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Q4Params {
    slots: u32,
    n: u32,
    k: u32,
    groups: u32,
    e0: u32,
    e1: u32,
    experts: u32,
    x_div: u32,
    outputs: u32,
    tiles: u32,
    zero_invalid: u32,
    _pad: u32,
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct DenseParams {
    slots: u32,
    n: u32,
    k: u32,
    e0: u32,
    e1: u32,
    experts: u32,
    x_div: u32,
    outputs: u32,
    zero_invalid: u32,
    _pad: [u32; 3],
}

pub(crate) fn check_dtype(op: &'static str, t: &Tensor, name: &str, dtype: DType) -> Result<()> {
    if t.dtype() != dtype {
        return Err(Error::invalid(
            op,
            format!("dtype of {name}"),
            format!("{dtype:?}"),
            format!("{:?}", t.dtype()),
        ));
    }
    Ok(())
}

/// Refuses an output that shares a buffer with an input (one dispatch cannot read and write
/// one buffer).
pub(crate) fn check_distinct(
    op: &'static str,
    out: &Tensor,
    out_name: &str,
    inputs: &[(&Tensor, &str)],
) -> Result<()> {
    for (t, name) in inputs {
        if out.buffer() == t.buffer() {
            return Err(Error::invalid(
                op,
                format!("buffer of {out_name}"),
                format!("distinct from {name}"),
                format!("the buffer of {name}"),
            ));
        }
    }
    Ok(())
}

/// `ids` u32 `[M, top_k]` → `(M, top_k)`.
pub(crate) fn ids_shape(op: &'static str, ids: &Tensor) -> Result<(usize, usize)> {
    check_dtype(op, ids, "ids", DType::U32)?;
    match *ids.shape() {
        [m, k] if m >= 1 && k >= 1 => Ok((m, k)),
        _ => Err(Error::invalid(
            op,
            "shape of ids",
            "[M, top_k], both >= 1",
            format!("{:?}", ids.shape()),
        )),
    }
}

/// `y = W[ids] x` (auto-chosen route, no epilogue). `x` f32 `[M, K]` (one row per token,
/// shared by its slots) or `[M * top_k, K]` (one row per slot); `ids` u32 `[M, top_k]`;
/// `y` f32 `[M * top_k, N]`.
pub fn moe_expert_linear(
    ctx: &GpuContext,
    x: &Tensor,
    ids: &Tensor,
    w: &ExpertWeight,
    y: &Tensor,
) -> Result<MoeLinear> {
    moe_expert_linear_with(ctx, x, ids, w, y, &MoeLinearOptions::default())
}

/// [`moe_expert_linear`] with explicit [`MoeLinearOptions`]; with
/// [`MoeEpilogue::Geglu`] `y` is `[M * top_k, N / 2]`.
pub fn moe_expert_linear_with(
    ctx: &GpuContext,
    x: &Tensor,
    ids: &Tensor,
    w: &ExpertWeight,
    y: &Tensor,
    options: &MoeLinearOptions,
) -> Result<MoeLinear> {
    let geglu = options.epilogue == MoeEpilogue::Geglu;
    let SlotShape {
        slots,
        x_div,
        outputs,
    } = check_operands(x, ids, w, y, geglu)?;
    let (experts, n, k) = (w.experts(), w.n(), w.k());
    let shape = MoeLinearShape {
        format: w.format(),
        k,
        slots,
    };
    let route = choose_moe_linear_route(shape, &MoeDeviceCaps::of(ctx), options.route, || {
        format!(
            "x {:?}, ids {:?}, W [{experts}, {n}, {k}] {:?}, y {:?}",
            x.shape(),
            ids.shape(),
            w.format(),
            y.shape()
        )
    })?;
    let mut kernels = Vec::with_capacity(w.chunks().len());
    for (c, chunk) in w.chunks().iter().enumerate() {
        let zero_invalid = (c == 0) as u32;
        let (e0, e1) = (chunk.experts.start as u32, chunk.experts.end as u32);
        let kernel = match (&chunk.data, w.format()) {
            (ChunkData::Q4 { packed, scales }, ExpertFormat::Q4 { group }) => {
                let grouped = route == MoeLinearRoute::Q4Grouped;
                let lanes = grouped_lanes(k);
                let per_wg = (256 / lanes) as usize * if geglu { 1 } else { 2 };
                let tiles = outputs.div_ceil(per_wg);
                let params = Q4Params {
                    slots: slots as u32,
                    n: n as u32,
                    k: k as u32,
                    groups: (k / group) as u32,
                    e0,
                    e1,
                    experts: experts as u32,
                    x_div: x_div as u32,
                    outputs: outputs as u32,
                    tiles: tiles as u32,
                    zero_invalid,
                    _pad: 0,
                };
                let b = KernelBuilder::new(
                    ctx,
                    if grouped {
                        "moe_q4_matvec"
                    } else {
                        "moe_q4_generic"
                    },
                )
                .constant("GROUP", group as u64)
                .constant("GEGLU", geglu as u64);
                let b = if grouped {
                    b.constant("LANES", lanes as u64)
                } else {
                    b
                };
                let b = b
                    .uniform(&params)
                    .tensor(ids)
                    .tensor(x)
                    .tensor(packed)
                    .tensor(scales)
                    .tensor(y);
                if grouped {
                    b.build_1d((slots * tiles) as u64)?
                } else {
                    b.build_1d(workgroups_for((slots * outputs) as u64, 64))?
                }
            }
            (ChunkData::Dense(t), ExpertFormat::F32 | ExpertFormat::F16) => {
                KernelBuilder::new(ctx, "moe_dense_linear")
                    .constant("W_F16", (route == MoeLinearRoute::DenseF16) as u64)
                    .constant("GEGLU", geglu as u64)
                    .uniform(&DenseParams {
                        slots: slots as u32,
                        n: n as u32,
                        k: k as u32,
                        e0,
                        e1,
                        experts: experts as u32,
                        x_div: x_div as u32,
                        outputs: outputs as u32,
                        zero_invalid,
                        _pad: [0; 3],
                    })
                    .tensor(ids)
                    .tensor(x)
                    .tensor(t)
                    .tensor(y)
                    .build_1d((slots * outputs) as u64)?
            }
            (_, format) => {
                return Err(Error::invalid(
                    OP,
                    format!("buffers of expert chunk {c}"),
                    format!("the layout of a {format:?} weight"),
                    "another layout",
                ))
            }
        };
        kernels.push(kernel);
    }
    Ok(MoeLinear { route, kernels })
}

/// The sizes every chunk's kernel takes from the checked operands.
struct SlotShape {
    /// `M * top_k`: one output row per (token, chosen expert).
    slots: usize,
    /// Slots per row of x: `top_k` when x is per token, 1 when per slot.
    x_div: usize,
    /// Outputs per slot: N, or N / 2 with the GeGLU epilogue.
    outputs: usize,
}

/// Checks x `[M, K]` or `[M * top_k, K]`, ids, and y `[M * top_k, N or N / 2]` against
/// the weight before anything is planned: dtypes, shapes, an even N for GeGLU, distinct
/// buffers, and sizes the kernels' u32 indices hold.
fn check_operands(
    x: &Tensor,
    ids: &Tensor,
    w: &ExpertWeight,
    y: &Tensor,
    geglu: bool,
) -> Result<SlotShape> {
    let (m, top_k) = ids_shape(OP, ids)?;
    let (experts, n, k) = (w.experts(), w.n(), w.k());
    check_dtype(OP, x, "x", DType::F32)?;
    check_dtype(OP, y, "y", DType::F32)?;
    let slots = m * top_k;
    if x.shape().last() != Some(&k) || (x.numel() != m * k && x.numel() != slots * k) {
        return Err(Error::invalid(
            OP,
            "shape of x",
            format!("[{m}, {k}] or [{slots}, {k}]"),
            format!("{:?}", x.shape()),
        ));
    }
    let x_div = if x.numel() == slots * k { 1 } else { top_k };
    if geglu && n % 2 != 0 {
        return Err(Error::invalid(
            OP,
            "rows per expert N with the GeGLU epilogue ([gate(I); up(I)])",
            "even",
            n,
        ));
    }
    let outputs = if geglu { n / 2 } else { n };
    if y.shape().last() != Some(&outputs) || y.numel() != slots * outputs {
        return Err(Error::invalid(
            OP,
            "shape of y",
            format!("[{slots}, {outputs}]"),
            format!("{:?}", y.shape()),
        ));
    }
    check_distinct(OP, y, "y", &[(x, "x"), (ids, "ids")])?;
    for (what, v) in [
        ("elements of y", slots * outputs),
        ("elements of x", x.numel()),
        ("experts", experts),
    ] {
        u32::try_from(v).map_err(|_| Error::invalid(OP, what, "< 2^32", v))?;
    }
    Ok(SlotShape {
        slots,
        x_div,
        outputs,
    })
}
