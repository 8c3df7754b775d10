// q4_gemm_coop: the tensor-core Q4 GEMM (q4_gemm_coop.wgsli), one workgroup per 128 x 128
// tile over all of K, writing y directly (the planner's choice for grids that fill the GPU,
// ops/linear/gemm.rs).

enable f16;
enable wgpu_cooperative_matrix;

#include "q4_gemm_coop.wgsli"

fn tile_splits() -> u32 {
    return 1u;
}

// The subgroup's staging tile (just stored, row-major) to y rows m0 + r.., columns n0 + c...
// Called by every invocation in the same order (barriers inside).
fn emit(cbase: u32, lane: u32, m0: u32, n0: u32, r: u32, c: u32, slot: u32) {
    workgroupBarrier();
    for (var e = 0u; e < 8u; e++) {
        let i = lane + e * 32u;
        let m = m0 + r + i / 16u;
        let n = n0 + c + i % 16u;
        if (m < params.m && n < params.n) {
            y[m * params.y_stride + params.y_offset + n] = cs[cbase + i];
        }
    }
    workgroupBarrier();
}

fn finish(lid: u32, tile: u32, slot: u32, m0: u32, n0: u32) {}
