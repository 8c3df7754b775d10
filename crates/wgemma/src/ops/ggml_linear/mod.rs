//! Linear layers over ggml-format weights at their stored precision: `y[m, n] = sum_k
//! x[m, k] * W[n, k]` with x f32 `[M, K]`, y f32 `[M, N]` and W in Q8_0, Q4_1, Q5_0, Q5_1,
//! Q4_K, Q5_K or Q6_K blocks exactly as a GGUF file stores them ([`GgmlWeight`]), so a
//! file runs at the quality its user chose instead of a second 4-bit rounding.
//!
//! Each format's block decode is written once, in `<format>_format.wgsli`
//! (`weight_quad(row byte, k)`: four consecutive weights as ggml's `dequantize_row_*`
//! computes them; for the matvec, `unit_weights(row byte, u)`: one lane's slice of a block
//! with its header decoded once), and included by every kernel of that format:
//! - [`GgmlRoute::Matvec`] (M = 1..=8: decode, speculative verify, small batches): 8 rows
//!   per workgroup, 32 lanes per row, each decoded weight applied to all M rows. A lane's
//!   unit is a column of a super-block for the K-quants (4 weights of each of its 8 slices
//!   of 32: one header and scale decode per 32 weights, the block's 8 lanes reading
//!   neighbouring words and neighbouring vec4 of x) and 8 weights of a block for Q8_0 (a
//!   row's 32 lanes read 8 neighbouring blocks); Q6_K and Q8_0 blocks (210 and 34 bytes)
//!   start on a word or half a word past one and are read as aligned words, funnelled.
//!   The 32 partial sums of a row are added with `subgroupAdd` where every subgroup has 32
//!   lanes (`ggml_matvec_<format>_sg`), else in workgroup memory.
//! - [`GgmlRoute::MatvecInt8`] (Q8_0, M = 1..=8, when the context runs int8 activations,
//!   [`crate::gpu::Activations`]): x quantised to int8 per block of 32 in workgroup memory
//!   as the Q4 int8 family does (the same stage and quantisers, `ops/linear/int8_stage.wgsli`),
//!   each quarter of a block (8 stored int8 weights; a row's 16 lanes read 4 neighbouring
//!   blocks) dotted with it by `dot4I8Packed`; 16 rows x 16 lanes per workgroup, the lanes
//!   added with subgroup shuffles where every subgroup has 32 lanes.
//! - [`GgmlRoute::Gemm`] (M > 8, prefill): 32 x 64 tiles with x and the dequantised W
//!   staged in workgroup memory.
//!
//! Guards fail closed ([`crate::Error::NoRoute`] naming each failed one). A weight larger
//! than one storage binding is split into row chunks; the op holds one kernel per chunk.

pub mod blocks;
#[cfg(any(test, feature = "harness"))]
mod cases;
mod gather;
pub mod reference;
#[cfg(test)]
mod tests;
mod weight;

pub use blocks::GgmlType;
#[cfg(any(test, feature = "harness"))]
pub use cases::{bench_cases, check_cases, random_blocks, random_cases, GgmlLinearCase};
pub use gather::ggml_gather;
pub use reference::{ggml_linear_ref, ggml_q8q8_linear_ref};
pub use weight::{is_native, GgmlChunk, GgmlWeight, GGML_CHUNK_ROW_MULTIPLE, NATIVE_TYPES};

use crate::error::{Error, Result};
use crate::gpu::{workgroups_for, Activations, GpuContext, Kernel, KernelBuilder, Tensor};
use crate::ops::linear::int8::{chunk_words, BLOCK_BYTES};
use crate::ops::linear::{check_io, DeviceCaps, Linear, LinearRoute};

const OP: &str = "ggml_linear";

/// Activation rows up to which the matvec route runs.
pub const MATVEC_MAX_ROWS: usize = 8;

/// Invocations per workgroup of both kernels.
const WORKGROUP: u32 = 256;

/// A kernel route of the op.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GgmlRoute {
    /// `ggml_matvec_<format>[_sg]`, M = 1..=8.
    Matvec,
    /// `ggml_matvec_<format>_int8[_sg]`, M = 1..=8, int8 activations (Q8_0).
    MatvecInt8,
    /// `ggml_gemm_<format>`, any M (chosen from M = 9).
    Gemm,
}

impl GgmlRoute {
    pub fn name(self) -> &'static str {
        match self {
            GgmlRoute::Matvec => "matvec",
            GgmlRoute::MatvecInt8 => "matvec_int8",
            GgmlRoute::Gemm => "gemm",
        }
    }

    /// Workgroup memory of the route's shader at `m` rows, in bytes (the int8 route's
    /// activation chunk comes on top: [`int8_chunk`]; the subgroup matvec needs none).
    fn workgroup_storage(self, m: usize) -> u32 {
        match self {
            // 8 rows of partial sums x 256 invocations (the portable finish).
            GgmlRoute::Matvec => 8 * 256 * 4,
            // M rows of partial sums x 256 invocations.
            GgmlRoute::MatvecInt8 => m.min(MATVEC_MAX_ROWS) as u32 * 256 * 4,
            // x [32, 32] and W [32, 64] f32 tiles.
            GgmlRoute::Gemm => (32 * 32 + 32 * 64) * 4,
        }
    }
}

impl std::fmt::Display for GgmlRoute {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The registered shader of `route` over `ty` (None: no kernel reads `ty`): with
/// `subgroup` (32-lane subgroups, [`subgroups32`]) both matvecs add a row's lanes with
/// subgroup operations and the int8 matvec quantises with shuffles.
fn shader(route: GgmlRoute, ty: GgmlType, subgroup: bool) -> Option<&'static str> {
    use GgmlRoute::{Gemm, Matvec, MatvecInt8};
    let pick = |portable, sg| if subgroup { sg } else { portable };
    Some(match (route, ty) {
        (MatvecInt8, GgmlType::Q8_0) => pick("ggml_matvec_q8_0_int8", "ggml_matvec_q8_0_int8_sg"),
        (Matvec, GgmlType::Q8_0) => pick("ggml_matvec_q8_0", "ggml_matvec_q8_0_sg"),
        (Matvec, GgmlType::Q4_1) => pick("ggml_matvec_q4_1", "ggml_matvec_q4_1_sg"),
        (Matvec, GgmlType::Q5_0) => pick("ggml_matvec_q5_0", "ggml_matvec_q5_0_sg"),
        (Matvec, GgmlType::Q5_1) => pick("ggml_matvec_q5_1", "ggml_matvec_q5_1_sg"),
        (Matvec, GgmlType::Q4_K) => pick("ggml_matvec_q4_k", "ggml_matvec_q4_k_sg"),
        (Matvec, GgmlType::Q5_K) => pick("ggml_matvec_q5_k", "ggml_matvec_q5_k_sg"),
        (Matvec, GgmlType::Q6_K) => pick("ggml_matvec_q6_k", "ggml_matvec_q6_k_sg"),
        (Gemm, GgmlType::Q8_0) => "ggml_gemm_q8_0",
        (Gemm, GgmlType::Q4_1) => "ggml_gemm_q4_1",
        (Gemm, GgmlType::Q5_0) => "ggml_gemm_q5_0",
        (Gemm, GgmlType::Q5_1) => "ggml_gemm_q5_1",
        (Gemm, GgmlType::Q4_K) => "ggml_gemm_q4_k",
        (Gemm, GgmlType::Q5_K) => "ggml_gemm_q5_k",
        (Gemm, GgmlType::Q6_K) => "ggml_gemm_q6_k",
        _ => return None,
    })
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    m: u32,
    n: u32,
    k: u32,
    row_bytes: u32,
    y_stride: u32,
    y_offset: u32,
    _pad0: u32,
    _pad1: u32,
}

/// The guards of `route` for `m` rows of `w` on `ctx`: each failed one, in words.
pub fn failed_guards(ctx: &GpuContext, route: GgmlRoute, m: usize, w: &GgmlWeight) -> Vec<String> {
    let limits = &ctx.limits;
    let mut failed = Vec::new();
    let mut need = |ok: bool, why: String| {
        if !ok {
            failed.push(format!("{route}: {why}"));
        }
    };
    need(
        shader(route, w.ty(), false).is_some(),
        format!("a kernel for {:?}", w.ty()),
    );
    need(
        w.k() % 32 == 0 && w.k() % w.ty().block_elements() == 0,
        format!("K % 32 == 0 and whole blocks (K = {})", w.k()),
    );
    need(
        route == GgmlRoute::Gemm || (1..=MATVEC_MAX_ROWS).contains(&m),
        format!("M in 1..={MATVEC_MAX_ROWS} (M = {m})"),
    );
    need(
        limits.max_storage_buffers_per_shader_stage >= 3,
        format!(
            "3 storage buffers per stage (device: {})",
            limits.max_storage_buffers_per_shader_stage
        ),
    );
    let storage = if route == GgmlRoute::Matvec && subgroups32(ctx) {
        0
    } else {
        route.workgroup_storage(m)
    };
    need(
        limits.max_compute_workgroup_storage_size >= storage,
        format!(
            "{storage} bytes of workgroup memory (device: {})",
            limits.max_compute_workgroup_storage_size
        ),
    );
    need(
        route != GgmlRoute::MatvecInt8 || int8_chunk(ctx, m, w.k()).is_some(),
        format!(
            "one int8 chunk of {LANES} blocks x {m} rows ({} bytes) in the workgroup memory left",
            BLOCK_BYTES * LANES * m
        ),
    );
    need(
        limits.max_compute_invocations_per_workgroup >= WORKGROUP
            && limits.max_compute_workgroup_size_x >= WORKGROUP,
        format!("{WORKGROUP} invocations per workgroup"),
    );
    let row_bytes = w.row_bytes() as u64;
    let chunk_bytes = w.chunks().iter().map(|c| c.blocks.byte_size()).max();
    need(
        chunk_bytes.unwrap_or(0) <= limits.max_storage_buffer_binding_size
            && (w
                .chunks()
                .iter()
                .map(|c| c.rows.len() as u64)
                .max()
                .unwrap_or(0)
                * row_bytes)
                < 1 << 32,
        "row chunks within the binding limit and 2^32 bytes".into(),
    );
    failed
}

/// The route for `m` activation rows whatever the context: the matvec up to
/// [`MATVEC_MAX_ROWS`], else the GEMM (what an artifact's route census names).
pub fn choose_route(m: usize) -> GgmlRoute {
    if m <= MATVEC_MAX_ROWS {
        GgmlRoute::Matvec
    } else {
        GgmlRoute::Gemm
    }
}

/// The route `ctx` runs for `m` rows of a `ty` weight: [`choose_route`], with the matvec on
/// int8 activations where the context runs them ([`GpuContext::activations`]) and `ty`
/// has an integer-dot kernel, so that every matvec of a forward rounds x the same way.
pub fn choose_route_on(ctx: &GpuContext, m: usize, ty: GgmlType) -> GgmlRoute {
    let route = choose_route(m);
    let int8 = ctx.activations() == Activations::Int8;
    if route == GgmlRoute::Matvec && int8 && shader(GgmlRoute::MatvecInt8, ty, false).is_some() {
        GgmlRoute::MatvecInt8
    } else {
        route
    }
}

/// Lanes per weight row of the int8 matvec (`ggml_matvec_int8.wgsli`).
const LANES: usize = 16;

/// Blocks of 32 the int8 matvec stages per activation row and chunk for `m` rows of `k`
/// (all of K when it fits the workgroup memory its partial sums leave, else a multiple of
/// [`LANES`]); None when not one multiple fits.
fn int8_chunk(ctx: &GpuContext, m: usize, k: usize) -> Option<usize> {
    let left = ctx.limits.max_compute_workgroup_storage_size as usize
        - (GgmlRoute::MatvecInt8.workgroup_storage(m) as usize)
            .min(ctx.limits.max_compute_workgroup_storage_size as usize);
    chunk_words(m, k, LANES, left)
}

/// Every subgroup has 32 lanes: the matvecs add a row's lanes with subgroup operations and
/// the int8 matvec quantises x with subgroup shuffles.
fn subgroups32(ctx: &GpuContext) -> bool {
    let caps = DeviceCaps::of(ctx);
    caps.subgroups && caps.min_subgroup_size == 32 && caps.max_subgroup_size == 32
}

/// `y = x W^T`, the route chosen by M.
pub fn ggml_linear(ctx: &GpuContext, x: &Tensor, w: &GgmlWeight, y: &Tensor) -> Result<Linear> {
    ggml_linear_with(ctx, x, w, y, None)
}

/// `y = x W^T` on `route` (None: [`choose_route_on`]), or the failed guards.
pub fn ggml_linear_with(
    ctx: &GpuContext,
    x: &Tensor,
    w: &GgmlWeight,
    y: &Tensor,
    route: Option<GgmlRoute>,
) -> Result<Linear> {
    let (n, k) = (w.n(), w.k());
    let m = check_io(OP, x, y, n, k)?;
    let route = route.unwrap_or_else(|| choose_route_on(ctx, m, w.ty()));
    let failed = failed_guards(ctx, route, m, w);
    let name = shader(route, w.ty(), route != GgmlRoute::Gemm && subgroups32(ctx));
    let (true, Some(name)) = (failed.is_empty(), name) else {
        return Err(Error::NoRoute {
            op: OP,
            shapes: format!(
                "x {:?}, W [{n}, {k}] {:?} in {} chunk(s), y {:?}",
                x.shape(),
                w.ty(),
                w.chunks().len(),
                y.shape()
            ),
            failed,
        });
    };
    let kernels = w
        .chunks()
        .iter()
        .map(|c| chunk_kernel(ctx, name, route, x, w, c, y, m))
        .collect::<Result<Vec<Kernel>>>()?;
    Ok(Linear::from_kernels(LinearRoute::Ggml, kernels))
}

#[allow(clippy::too_many_arguments)]
fn chunk_kernel(
    ctx: &GpuContext,
    shader: &'static str,
    route: GgmlRoute,
    x: &Tensor,
    w: &GgmlWeight,
    chunk: &GgmlChunk,
    y: &Tensor,
    m: usize,
) -> Result<Kernel> {
    let rows = chunk.rows.len();
    let params = Params {
        m: m as u32,
        n: rows as u32,
        k: w.k() as u32,
        row_bytes: w.row_bytes() as u32,
        y_stride: w.n() as u32,
        y_offset: chunk.rows.start as u32,
        _pad0: 0,
        _pad1: 0,
    };
    let builder = KernelBuilder::new(ctx, shader)
        .uniform(&params)
        .tensor(x)
        .tensor(&chunk.blocks)
        .tensor(y);
    match route {
        GgmlRoute::Matvec => builder
            .constant("MV_M", m as u64)
            .build_1d(workgroups_for(rows as u64, 8)),
        GgmlRoute::MatvecInt8 => {
            // The guard checked that a chunk fits.
            let chunk = int8_chunk(ctx, m, w.k()).unwrap_or(LANES) as u64;
            builder
                .constant("MV_M", m as u64)
                .constant("PARTIALS", 256 * m as u64)
                .constant("CHUNK_WORDS", chunk)
                .constant("XQ_BLOCKS", m as u64 * chunk)
                .constant("XQ_VEC4", 2 * m as u64 * chunk)
                .constant("XQ_INTERLEAVED", 0)
                .build_1d(workgroups_for(rows as u64, LANES as u32))
        }
        GgmlRoute::Gemm => builder.build_1d(rows.div_ceil(64) as u64 * m.div_ceil(32) as u64),
    }
}
