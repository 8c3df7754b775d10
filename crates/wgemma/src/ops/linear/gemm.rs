//! The prefill GEMM routes' dispatch geometry: one workgroup per (m-tile, n-tile) pair, with
//! each shader's own tile sizes.

use super::LinearRoute;

/// The shader of a GEMM route and the (x rows, weight rows) one workgroup covers.
pub(super) fn shader_and_tile(route: LinearRoute) -> (&'static str, [usize; 2]) {
    match route {
        LinearRoute::Q4GemmCoop => ("q4_gemm_coop", [128, 128]),
        LinearRoute::Q4GemmF16 => ("q4_gemm_f16", [64, 128]),
        _ => ("q4_gemm", [64, 64]),
    }
}

/// Workgroups for `m` rows of x and `rows` weight rows.
pub(super) fn tiles(m: usize, rows: usize, [tile_m, tile_n]: [usize; 2]) -> u64 {
    rows.div_ceil(tile_n) as u64 * m.div_ceil(tile_m) as u64
}
