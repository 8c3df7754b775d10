// q4_matvec_sg: the subgroup twin of q4_matvec.wgsl (same contract and geometry; the
// declarations come from q4_matvec_common.wgsli, the accumulation loop must be kept in step):
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

#include "q4_matvec_common.wgsli"

// Each unit's lanes 0-3 park their row totals here: EPILOGUE 1 pairs gate and up rows,
// KSPLIT > 1 sums the K parts of a quad.
var<workgroup> pair_totals: array<vec4<f32>, ROWS_PER_WG>;

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let flat = wid.x + wid.y * nwg.x;
    let unit = lid / LANES;
    let quad = unit / KSPLIT;
    let part = unit % KSPLIT;
    let rows = unit_rows(flat, quad);
    let row0 = rows.x;
    let lane = lid % LANES;
    var a0 = vec4<f32>(0.0);
    var a1 = vec4<f32>(0.0);
    var a2 = vec4<f32>(0.0);
    var a3 = vec4<f32>(0.0);
    if (rows.z == 1u) {
        let v_row = params.k / 32u;
        let k4 = params.k / 4u;
        // Rows past the chunk (or half) repeat its last row; their sums are never written.
        let last = rows.y;
        let r1 = min(row0 + 1u, last);
        let r2 = min(row0 + 2u, last);
        let r3 = min(row0 + 3u, last);
        for (var v = part * LANES + lane; v < v_row; v += LANES * KSPLIT) {
            let k0 = v * 32u;
            let w0 = packed[row0 * v_row + v];
            let w1 = packed[r1 * v_row + v];
            let w2 = packed[r2 * v_row + v];
            let w3 = packed[r3 * v_row + v];
            let s0 = word_scales(row0 * params.groups, k0);
            let s1 = word_scales(r1 * params.groups, k0);
            let s2 = word_scales(r2 * params.groups, k0);
            let s3 = word_scales(r3 * params.groups, k0);
            for (var m = 0u; m < MV_M; m++) {
                let xo = m * k4 + k0 / 4u;
                a0[m] += dot32(w0, s0, xo);
                a1[m] += dot32(w1, s1, xo);
                a2[m] += dot32(w2, s2, xo);
                a3[m] += dot32(w3, s3, xo);
            }
        }
    }
    let t0 = subgroupAdd(a0);
    let t1 = subgroupAdd(a1);
    let t2 = subgroupAdd(a2);
    let t3 = subgroupAdd(a3);
    let n = row0 + lane;
    let keep = lane < 4u && rows.z == 1u && n <= rows.y;
    var total = t0;
    if (lane == 1u) {
        total = t1;
    } else if (lane == 2u) {
        total = t2;
    } else if (lane == 3u) {
        total = t3;
    }
    if (EPILOGUE == 1u || KSPLIT > 1u) {
        if (keep) {
            pair_totals[unit * 4u + lane] = total;
        }
        workgroupBarrier();
    }
    if (EPILOGUE == 1u) {
        let col = pair_column(flat, lid);
        if (col.y == 1u) {
            write_pair(col.x, pair_totals[lid], pair_totals[ROWS_PER_WG / 2u + lid]);
        }
    } else if (KSPLIT > 1u) {
        // The quad's first unit adds the parts in order.
        if (keep && part == 0u) {
            var sum = pair_totals[unit * 4u + lane];
            for (var j = 1u; j < KSPLIT; j++) {
                sum += pair_totals[(unit + j) * 4u + lane];
            }
            write_row(n, sum);
        }
    } else if (keep) {
        write_row(n, total);
    }
}
