// q4_gemm_coop_split: the tensor-core Q4 GEMM (q4_gemm_coop.wgsli) with K split across
// SPLITS workgroups per 128 x 128 tile, for grids too small to fill the GPU (ops/linear/
// gemm.rs plans it): a small grid is bound by one workgroup's latency-bound pass over K, so
// SPLITS workgroups over K / SPLITS each finish about SPLITS times sooner.
//
// Each workgroup writes its whole 128 x 128 partial block (row-major, unchecked: the scratch
// holds every block of the dispatch) to partials[slot], slot = tile * SPLITS + split; then
// the tile's workgroups count themselves on an atomic counter and the last one sums the
// SPLITS blocks in split order (so the result does not depend on which one is last) and
// writes y with bounds checks. Ordering as in attention_decode_last_combine.wgsli:
// storageBarrier() (naga: device-scope acquire-release) before lid 0's atomicAdd, another
// after it, partials @coherent (NVIDIA's L1 could serve stale lines otherwise; DESIGN.md
// section 6). No workgroup waits for another. The last one resets the counter to 0 for the
// next dispatch (the host hands out zeroed counters once, ops/linear/gemm.rs).

enable f16;
enable wgpu_cooperative_matrix;

#include "q4_gemm_coop.wgsli"

override SPLITS: u32 = 2u;

@group(0) @binding(5) @coherent var<storage, read_write> partials: array<f32>;
@group(0) @binding(6) var<storage, read_write> counters: array<atomic<u32>>;

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
        partials[slot * BLOCK + (r + i / 16u) * BN + c + i % 16u] = cs[cbase + i];
    }
    workgroupBarrier();
}

// Counts this workgroup; the tile's last sums the partial blocks into y. The flag travels
// in cs[0] (free after the last emit's barrier; the 48 KiB of workgroup memory are spent):
// the branch on it holds no barrier, so it need not be uniform.
fn finish(lid: u32, tile: u32, slot: u32, m0: u32, n0: u32) {
    storageBarrier();
    if (lid == 0u) {
        let done = atomicAdd(&counters[tile], 1u) + 1u;
        cs[0] = select(0.0, 1.0, done == SPLITS);
        if (done == SPLITS) {
            atomicStore(&counters[tile], 0u);
        }
    }
    workgroupBarrier();
    storageBarrier();
    if (cs[0] == 0.0) {
        return;
    }
    let base = tile * SPLITS * BLOCK;
    for (var e = lid; e < BLOCK; e += WG) {
        let m = m0 + e / BN;
        let n = n0 + e % BN;
        if (m < params.m && n < params.n) {
            var sum = 0.0;
            for (var j = 0u; j < SPLITS; j++) {
                sum += partials[base + j * BLOCK + e];
            }
            y[m * params.y_stride + params.y_offset + n] = sum;
        }
    }
}
