// q4_matvec: Q4 matrix-vector product for MV_M (1..=4) activation rows, routes q4_gemv
// (MV_M = 1) and q4_linear_m3 (MV_M = 3); the portable twin of q4_matvec_sg.wgsl (shared
// declarations in q4_matvec_common.wgsli; keep the two accumulation loops in step).
//
// y[m, y_offset + n] = sum_k x[m, k] * W[n, k] for one row chunk of a Q4 weight.
// Inputs: x f32 [MV_M, K] read as vec4; packed u32 [n, K/8] read as vec4<u32> (32 weights,
// K % 32 == 0), nibble i of word w is k = 8w + i, value (nibble - 8) * scale; scales f16
// pairs [n * K/GROUP] (GROUP % 8 == 0). Output y f32 [MV_M, y_stride].
//
// Geometry: 256 invocations = 8 units of 32 lanes; a unit owns 4 consecutive rows and its
// lanes stride over the rows' vec4 words, so 32 lanes read 512 contiguous bytes of a row
// (coalesced) and every x load serves the 4 rows and every decoded weight serves all MV_M
// activation rows. Per-lane sums are reduced through workgroup memory. A workgroup covers
// 32 rows; the grid may be folded to 2-D (flat index wid.x + wid.y * nwg.x).
// Plain variables, no private arrays: dynamically indexed arrays spill to local memory.

#include "q4_matvec_common.wgsli"

// Four rows' partial sums per lane (component m = activation row m).
var<workgroup> red0: array<vec4<f32>, WG>;
var<workgroup> red1: array<vec4<f32>, WG>;
var<workgroup> red2: array<vec4<f32>, WG>;
var<workgroup> red3: array<vec4<f32>, WG>;

fn tree_sum(lid: u32, lane: u32) {
    for (var stride = LANES / 2u; stride > 0u; stride /= 2u) {
        if (lane < stride) {
            red0[lid] += red0[lid + stride];
            red1[lid] += red1[lid + stride];
            red2[lid] += red2[lid + stride];
            red3[lid] += red3[lid + stride];
        }
        workgroupBarrier();
    }
}

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
    red0[lid] = a0;
    red1[lid] = a1;
    red2[lid] = a2;
    red3[lid] = a3;
    workgroupBarrier();
    tree_sum(lid, lane);
    let n = row0 + lane;
    // The quad's first unit adds the K parts of its units (in order).
    let keep = lane < 4u && part == 0u && rows.z == 1u && n <= rows.y;
    var total = vec4<f32>(0.0);
    if (keep) {
        for (var j = 0u; j < KSPLIT; j++) {
            let base = lid - lane + j * LANES;
            if (lane == 0u) {
                total += red0[base];
            } else if (lane == 1u) {
                total += red1[base];
            } else if (lane == 2u) {
                total += red2[base];
            } else {
                total += red3[base];
            }
        }
    }
    if (EPILOGUE == 1u) {
        // Park the totals in red0 (every read of it above is done after the barrier): no
        // extra workgroup memory, which the 16 KiB WebGPU minimum leaves no room for.
        workgroupBarrier();
        if (keep) {
            red0[unit * 4u + lane] = total;
        }
        workgroupBarrier();
        let col = pair_column(flat, lid);
        if (col.y == 1u) {
            write_pair(col.x, red0[lid], red0[ROWS_PER_WG / 2u + lid]);
        }
    } else if (keep) {
        write_row(n, total);
    }
}
