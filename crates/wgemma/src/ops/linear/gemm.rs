//! The prefill GEMM routes' dispatch geometry: every GEMM shader covers a 64-row m-tile
//! times an n-tile of its own width, one workgroup per tile pair.

use super::LinearRoute;

/// Rows of x one GEMM workgroup covers.
const TILE_M: usize = 64;

/// The shader of a GEMM route and the weight rows (n) one workgroup covers.
pub(super) fn shader_and_tile_n(route: LinearRoute) -> (&'static str, usize) {
    match route {
        LinearRoute::Q4GemmCoop => ("q4_gemm_coop", 64),
        LinearRoute::Q4GemmF16 => ("q4_gemm_f16", 128),
        _ => ("q4_gemm", 64),
    }
}

/// Workgroups for `m` rows of x and `rows` weight rows.
pub(super) fn tiles(m: usize, rows: usize, tile_n: usize) -> u64 {
    rows.div_ceil(tile_n) as u64 * m.div_ceil(TILE_M) as u64
}
