// q4_matvec_wide_sg: the subgroup twin of q4_matvec_wide.wgsl (same contract and geometry; the
// declarations come from q4_matvec_wide_common.wgsli, the accumulation loop is shared):
// each slot of LPR lanes lies in one subgroup and is reduced with subgroupAdd (LPR 32) or
// subgroupShuffleXor. Built only when every subgroup of the device has exactly 32 lanes
// (the host checks).
//
// y[m, y_offset + n] = sum_k x[m, k] * W[n, k] for one row chunk of a Q4 weight.
// Inputs: x f32 [MV_M, K] read as vec4; packed u32 [n, K/8] read as vec4<u32> (32 weights,
// K % 32 == 0), nibble i of word w is k = 8w + i, value (nibble - 8) * scale; scales f16
// pairs [n * K/GROUP] (GROUP % 8 == 0). Output y f32 [MV_M, y_stride].
//
// Geometry (q4_matvec_wide_common.wgsli): 256 invocations = 256 / LPR slots of LPR lanes, a slot
// owns 4 consecutive rows, KSPLIT slots share them over parts of K; per-lane sums are
// reduced with subgroup operations. A workgroup covers ROWS_PER_WG rows; the grid may be
// folded to 2-D (flat index wid.x + wid.y * nwg.x).

@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;

#include "q4_matvec_wide_common.wgsli"
#include "q4_matvec_wide_finish_sg.wgsli"

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let flat = wid.x + wid.y * nwg.x;
    let rows = unit_rows(flat, lid / LPR / KSPLIT);
    let part = (lid / LPR) % KSPLIT;
    let first = first_words(rows, part, lid % LPR);
    finish(flat, lid, rows, accumulate(rows, part, lid % LPR, first));
}
