//! Route choice for the linear op: each route has explicit guards on the shape and on the
//! device, evaluated when the kernel is built; the first eligible route in preference
//! order wins, and when none is eligible the error names every failed guard.

use crate::error::{Error, Result};
use crate::gpu::{Activations, GemmCeiling, GpuContext};

/// A kernel route of the linear op.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LinearRoute {
    /// Q4 x int8 matvec, M = 1..=9 (`q4q8_matvec*`): the activations quantised to int8 per
    /// block of 32 inside each workgroup, integer dot products (`dot4I8Packed`); every
    /// matvec when the context runs int8 activations ([`crate::gpu::Activations`]).
    Q4Q8Matvec,
    /// Q4, M = 1 decode GEMV (`q4_matvec[_sg]` with MV_M = 1).
    Q4Gemv,
    /// Q4, M = 3 speculative verify: each weight word read once for 3 rows (MV_M = 3).
    Q4LinearM3,
    /// Q4, M = 2 or 4..=9: the same matvec kernel (MV_M = M) for verify forwards of other
    /// draft counts (k = 1 and 3..=8, adaptive drafting): each weight word is read once for
    /// all M rows, where the GEMM tiles would waste most of their 64 rows.
    Q4LinearSmallM,
    /// Q4 prefill GEMM on the tensor cores (`q4_gemm_coop.wgsl`: 16x16x16 f16 x f16 + f32
    /// cooperative matrices), M >= [`PREFILL_GEMM_MIN_ROWS`].
    Q4GemmCoop,
    /// Q4 prefill GEMM on integer dot products (`q4_gemm_int8.wgsl`, after
    /// `q8_quantize_rows.wgsl`): the activations quantised per block of 32 as the int8
    /// matvecs do, so every batch size rounds a row the same way; M >= 10 (below, the int8
    /// matvec) when the context runs int8 activations and the GEMM ceiling allows it.
    Q4GemmInt8,
    /// Q4 prefill GEMM on the vector units with the weight tile as exact f16 nibbles and the
    /// scales applied per step (`q4_gemm_f16.wgsl`, shader-f16; f32 numbers), M >=
    /// [`PREFILL_GEMM_MIN_ROWS`], group % 32 == 0.
    Q4GemmF16,
    /// Q4 tiled prefill GEMM (`q4_gemm.wgsl`), M >= 2.
    Q4Gemm,
    /// Q4 fallback, one invocation per output (`q4_linear_generic.wgsl`).
    Q4Generic,
    /// Dense f32 weights (`dense_linear.wgsl`).
    DenseF32,
    /// Dense f16 weights (`dense_linear.wgsl`, W_F16 = 1).
    DenseF16,
    /// ggml-format weights at their stored precision (`ops/ggml_linear`, its own routes).
    Ggml,
}

/// Q4 routes in preference order.
pub const Q4_ROUTES: [LinearRoute; 9] = [
    LinearRoute::Q4Q8Matvec,
    LinearRoute::Q4Gemv,
    LinearRoute::Q4LinearM3,
    LinearRoute::Q4LinearSmallM,
    LinearRoute::Q4GemmCoop,
    LinearRoute::Q4GemmInt8,
    LinearRoute::Q4GemmF16,
    LinearRoute::Q4Gemm,
    LinearRoute::Q4Generic,
];

impl LinearRoute {
    pub fn name(self) -> &'static str {
        match self {
            LinearRoute::Q4Q8Matvec => "q4q8_matvec",
            LinearRoute::Q4Gemv => "q4_gemv",
            LinearRoute::Q4LinearM3 => "q4_linear_m3",
            LinearRoute::Q4LinearSmallM => "q4_linear_small_m",
            LinearRoute::Q4GemmCoop => "q4_gemm_coop",
            LinearRoute::Q4GemmInt8 => "q4_gemm_int8",
            LinearRoute::Q4GemmF16 => "q4_gemm_f16",
            LinearRoute::Q4Gemm => "q4_gemm",
            LinearRoute::Q4Generic => "q4_generic",
            LinearRoute::DenseF32 => "dense_f32",
            LinearRoute::DenseF16 => "dense_f16",
            LinearRoute::Ggml => "ggml",
        }
    }

    /// The matvec routes (`q4_matvec*`, `q4q8_matvec*`, M <= 9 activation rows).
    pub fn is_matvec(self) -> bool {
        matches!(
            self,
            LinearRoute::Q4Q8Matvec
                | LinearRoute::Q4Gemv
                | LinearRoute::Q4LinearM3
                | LinearRoute::Q4LinearSmallM
        )
    }

    /// Invocations per workgroup of the route's shader.
    pub(crate) fn workgroup_invocations(self) -> u32 {
        match self {
            LinearRoute::Q4Q8Matvec
            | LinearRoute::Q4Gemv
            | LinearRoute::Q4LinearM3
            | LinearRoute::Q4LinearSmallM
            | LinearRoute::Q4GemmF16
            | LinearRoute::Q4GemmCoop
            | LinearRoute::Q4GemmInt8
            | LinearRoute::Q4Gemm => 256,
            LinearRoute::Q4Generic | LinearRoute::DenseF32 | LinearRoute::DenseF16 => 64,
            LinearRoute::Ggml => 256,
        }
    }

    /// Workgroup memory of the route's shader, in bytes (the portable matvec reduction
    /// needs more than the subgroup one).
    pub(crate) fn workgroup_storage(self, subgroup: bool) -> u32 {
        match self {
            // The subgroup twin parks at least 32 vec4 totals (GeGLU pairs, K split; more
            // for other tunings, checked when built); the portable one reduces through four
            // vec4 arrays of 256. The int8 route's activation chunk comes on top (checked
            // when built).
            LinearRoute::Q4Q8Matvec
            | LinearRoute::Q4Gemv
            | LinearRoute::Q4LinearM3
            | LinearRoute::Q4LinearSmallM => {
                if subgroup {
                    512
                } else {
                    16384
                }
            }
            LinearRoute::Q4Gemm => 16384,
            // Two f16 buffers of the x and weight tiles (128 x 40 halves each) and eight
            // 16 x 16 f32 staging tiles.
            LinearRoute::Q4GemmCoop => 49152,
            // Two blocks of 64 activation rows and 128 weight rows as bytes, with their
            // scales.
            LinearRoute::Q4GemmInt8 => 14336,
            // x 32 x 64 f32, W 32 x 128 f16.
            LinearRoute::Q4GemmF16 => 16384,
            LinearRoute::Q4Generic => 0,
            LinearRoute::DenseF32 | LinearRoute::DenseF16 => 1024,
            LinearRoute::Ggml => 12288,
        }
    }
}

impl std::fmt::Display for LinearRoute {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// How the matvec routes reduce across lanes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Reduction {
    /// `subgroupAdd` (only with `wgpu::Features::SUBGROUP`).
    Subgroup,
    /// Tree through workgroup memory (portable).
    Workgroup,
    /// The route has no cross-lane reduction (GEMM, generic) or a fixed one (dense).
    NotApplicable,
}

/// What the route guards read from the device (a struct, so tests can pose small devices).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceCaps {
    pub max_invocations_per_workgroup: u32,
    pub max_workgroup_size_x: u32,
    pub max_workgroup_storage: u32,
    pub subgroups: bool,
    pub min_subgroup_size: u32,
    pub max_subgroup_size: u32,
    /// shader-f16 is on and the GEMM ceiling allows the f16 GEMM.
    pub shader_f16: bool,
    /// 16x16x16 f16 x f16 + f32 cooperative matrices are on (see
    /// [`GpuContext::has_coop_16x16_f16`]).
    pub coop_16x16_f16: bool,
    /// The matvecs run int8 activations with integer dot products (see
    /// [`GpuContext::activations`]).
    pub int8_activations: bool,
    /// The GEMM ceiling allows the int8 GEMM ([`GemmCeiling::Int8`] or above).
    pub gemm_int8: bool,
}

impl DeviceCaps {
    pub fn of(ctx: &GpuContext) -> DeviceCaps {
        DeviceCaps {
            max_invocations_per_workgroup: ctx.limits.max_compute_invocations_per_workgroup,
            max_workgroup_size_x: ctx.limits.max_compute_workgroup_size_x,
            max_workgroup_storage: ctx.limits.max_compute_workgroup_storage_size,
            subgroups: ctx.has(wgpu::Features::SUBGROUP),
            min_subgroup_size: ctx.info.subgroup_min_size,
            max_subgroup_size: ctx.info.subgroup_max_size,
            shader_f16: ctx.has(wgpu::Features::SHADER_F16) && ctx.gemm >= GemmCeiling::F16,
            coop_16x16_f16: ctx.has_coop_16x16_f16(),
            int8_activations: ctx.activations() == Activations::Int8,
            gemm_int8: ctx.gemm >= GemmCeiling::Int8,
        }
    }
}

/// The shape facts the Q4 guards look at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Q4Shape {
    pub m: usize,
    pub k: usize,
    pub group: usize,
}

fn device_guards(route: LinearRoute, subgroup: bool, caps: &DeviceCaps, failed: &mut Vec<String>) {
    let name = route.name();
    let inv = route.workgroup_invocations();
    if caps.max_invocations_per_workgroup < inv || caps.max_workgroup_size_x < inv {
        failed.push(format!(
            "{name}: device allows {inv} invocations per workgroup (found max {} invocations, \
             max size x {})",
            caps.max_invocations_per_workgroup, caps.max_workgroup_size_x
        ));
    }
    let storage = route.workgroup_storage(subgroup);
    if caps.max_workgroup_storage < storage {
        failed.push(format!(
            "{name}: device workgroup storage >= {storage} bytes (found {})",
            caps.max_workgroup_storage
        ));
    }
}

/// The guards of `route` that fail for `shape` on `caps` (empty when eligible). `subgroup`
/// says which matvec reduction would be built.
pub fn q4_failed_guards(
    route: LinearRoute,
    shape: Q4Shape,
    caps: &DeviceCaps,
    subgroup: bool,
) -> Vec<String> {
    let name = route.name();
    let mut failed = Vec::new();
    let Q4Shape { m, k, group } = shape;
    let mut need = |ok: bool, what: String| {
        if !ok {
            failed.push(format!("{name}: {what}"));
        }
    };
    need(k % 8 == 0, format!("K % 8 == 0 (found K = {k})"));
    need(
        group > 0 && group % 8 == 0,
        format!("group % 8 == 0 (found {group})"),
    );
    match route {
        LinearRoute::Q4Q8Matvec | LinearRoute::Q4GemmInt8 => {
            need(
                caps.int8_activations,
                "int8 activations (the context runs f32 activations: no native packed \
                 integer dot product, or --activations f32)"
                    .to_string(),
            );
            need(
                k % 32 == 0,
                format!("K % 32 == 0 for int8 blocks of 32 (found K = {k})"),
            );
            need(
                group % 32 == 0,
                format!("group % 32 == 0, one weight scale per block (found {group})"),
            );
            if route == LinearRoute::Q4GemmInt8 {
                need(
                    caps.gemm_int8,
                    "the GEMM ceiling allows the int8 GEMM (found a lower one)".to_string(),
                );
                need(m >= 2, format!("M >= 2 (found {m})"));
            } else {
                need((1..=9).contains(&m), format!("M in 1..=9 (found {m})"));
                let bytes =
                    route.workgroup_storage(subgroup) as usize + super::int8::min_stage_bytes(m);
                need(
                    caps.max_workgroup_storage as usize >= bytes,
                    format!(
                        "{bytes} bytes of workgroup memory for {m} rows (found {})",
                        caps.max_workgroup_storage
                    ),
                );
            }
        }
        LinearRoute::Q4Gemv | LinearRoute::Q4LinearM3 | LinearRoute::Q4LinearSmallM => {
            let (ok, want) = match route {
                LinearRoute::Q4Gemv => (m == 1, "M == 1"),
                LinearRoute::Q4LinearM3 => (m == 3, "M == 3"),
                _ => (m == 2 || (4..=9).contains(&m), "M == 2 or 4..=9"),
            };
            need(ok, format!("{want} (found {m})"));
            need(
                k % 32 == 0,
                format!("K % 32 == 0 for vec4<u32> loads (found K = {k})"),
            );
        }
        LinearRoute::Q4GemmCoop | LinearRoute::Q4GemmF16 => {
            need(
                m >= PREFILL_GEMM_MIN_ROWS,
                format!("M >= {PREFILL_GEMM_MIN_ROWS} (found {m})"),
            );
            if route == LinearRoute::Q4GemmCoop {
                need(
                    caps.coop_16x16_f16,
                    "16x16x16 f16/f32 cooperative matrices (not offered or not requested)"
                        .to_string(),
                );
                // The kernel maps invocations 32s..32s+31 to subgroup s.
                need(
                    caps.min_subgroup_size == 32 && caps.max_subgroup_size == 32,
                    format!(
                        "subgroup size exactly 32 (found {}..={})",
                        caps.min_subgroup_size, caps.max_subgroup_size
                    ),
                );
            } else {
                need(
                    caps.shader_f16,
                    "shader-f16 (not offered or above the GEMM ceiling)".to_string(),
                );
                // A 32-k step lies in one group: its scales apply to the step's sums.
                need(group % 32 == 0, format!("group % 32 == 0 (found {group})"));
            }
        }
        LinearRoute::Q4Gemm => need(m >= 2, format!("M >= 2 (found {m})")),
        LinearRoute::Q4Generic => {}
        LinearRoute::DenseF32 | LinearRoute::DenseF16 | LinearRoute::Ggml => {
            need(false, "not a Q4 route".to_string())
        }
    }
    device_guards(route, subgroup, caps, &mut failed);
    failed
}

/// The first eligible Q4 route (or the forced one, if eligible); else [`Error::NoRoute`]
/// naming every failed guard.
pub fn choose_q4_route(
    shape: Q4Shape,
    caps: &DeviceCaps,
    subgroup: bool,
    forced: Option<LinearRoute>,
    shapes: impl FnOnce() -> String,
) -> Result<LinearRoute> {
    let candidates: &[LinearRoute] = match &forced {
        Some(r) => std::slice::from_ref(r),
        None => &Q4_ROUTES,
    };
    let mut failed = Vec::new();
    for &route in candidates {
        let f = q4_failed_guards(route, shape, caps, subgroup);
        if f.is_empty() {
            return Ok(route);
        }
        failed.extend(f);
    }
    Err(Error::NoRoute {
        op: "q4_linear",
        shapes: shapes(),
        failed,
    })
}

/// Device guards of a dense route; [`Error::NoRoute`] when one fails.
pub fn check_dense_route(
    route: LinearRoute,
    caps: &DeviceCaps,
    shapes: impl FnOnce() -> String,
) -> Result<()> {
    let mut failed = Vec::new();
    device_guards(route, false, caps, &mut failed);
    if failed.is_empty() {
        Ok(())
    } else {
        Err(Error::NoRoute {
            op: "dense_linear",
            shapes: shapes(),
            failed,
        })
    }
}

/// Fewest activation rows the f16 and tensor-core GEMMs take: below, a 64-row tile is
/// mostly padding and the weight read dominates (the matvec and f32 GEMM routes).
pub const PREFILL_GEMM_MIN_ROWS: usize = 16;
