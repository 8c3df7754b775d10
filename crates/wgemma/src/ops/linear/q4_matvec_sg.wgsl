// q4_matvec_sg: the subgroup twin of q4_matvec.wgsl (same contract and geometry; the
// declarations come from q4_matvec_common.wgsli, the accumulation loop is shared):
// each 32-lane unit is one subgroup, reduced with subgroupAdd. Built only
// when every subgroup of the device has exactly 32 lanes (the host checks).
//
// y[m, y_offset + n] = sum_k x[m, k] * W[n, k] for one row chunk of a Q4 weight.
// Inputs: x f32 [MV_M, K] read as vec4; packed u32 [n, K/8] read as vec4<u32> (32 weights,
// K % 32 == 0), nibble i of word w is k = 8w + i, value (nibble - 8) * scale; scales f16
// pairs [n * K/GROUP] (GROUP % 8 == 0). Output y f32 [MV_M, y_stride].
//
// Geometry: 256 invocations = 8 units of 32 lanes; a unit owns 4 consecutive rows and its
// lanes stride over the rows' vec4 words, so 32 lanes read 512 contiguous bytes of a row
// (coalesced) and every x load serves the 4 rows and every decoded weight serves all MV_M
// activation rows. Per-lane sums are reduced with subgroupAdd. A workgroup covers
// 32 rows; the grid may be folded to 2-D (flat index wid.x + wid.y * nwg.x).
// Plain variables, no private arrays: dynamically indexed arrays spill to local memory.

@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;

#include "q4_matvec_common.wgsli"
#include "q4_matvec_finish_sg.wgsli"

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let flat = wid.x + wid.y * nwg.x;
    let rows = unit_rows(flat, lid / LANES / KSPLIT);
    let part = (lid / LANES) % KSPLIT;
    let first = first_words(rows, part, lid % LANES);
    finish(flat, lid, rows, accumulate(rows, part, lid % LANES, first));
}
