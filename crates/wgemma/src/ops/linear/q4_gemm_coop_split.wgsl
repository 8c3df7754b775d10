// q4_gemm_coop_split: the tensor-core Q4 GEMM (q4_gemm_coop.wgsli) with K split across
// SPLITS workgroups per 128 x 128 tile, for grids too small to fill the GPU (ops/linear/
// gemm.rs plans it): the kernel is bound by each SM's throughput (~1.5 us per 32-k step of
// a tile), so a grid of fewer tiles than SMs leaves SMs idle, and SPLITS workgroups over
// K / SPLITS each spread the same steps over more of them.
//
// Each workgroup writes its whole 128 x 128 partial block (row-major, unchecked: the
// scratch holds every block of the dispatch) to partials[slot], slot = tile * SPLITS +
// split; q4_gemm_split_combine.wgsl, the next dispatch, sums them into y. The partials
// are the output binding (`y` of q4_gemm_io.wgsli, bound to the scratch by gemm.rs): a
// kernel that never wrote y would lose that binding from its layout.

enable f16;
enable wgpu_cooperative_matrix;

#include "q4_gemm_coop.wgsli"

override SPLITS: u32 = 2u;

// One tile's partial block: BM x BN f32.
const BLOCK: u32 = 16384u;

fn tile_splits() -> u32 {
    return SPLITS;
}

// The subgroup's staging tile (just stored, row-major) to the partial block's rows r..,
// columns c... Called by every invocation in the same order (barriers inside).
fn emit(cbase: u32, lane: u32, m0: u32, n0: u32, r: u32, c: u32, slot: u32) {
    workgroupBarrier();
    for (var e = 0u; e < 8u; e++) {
        let i = lane + e * 32u;
        y[slot * BLOCK + (r + i / 16u) * BN + c + i % 16u] = cs[cbase + i];
    }
    workgroupBarrier();
}

fn finish(lid: u32, tile: u32, slot: u32, m0: u32, n0: u32) {}
