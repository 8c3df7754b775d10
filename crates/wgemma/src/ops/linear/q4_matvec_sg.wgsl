// q4_matvec_sg: the subgroup twin of q4_matvec.wgsl (same contract and geometry; keep the
// two in step): each 32-lane unit is one subgroup, reduced with subgroupAdd. Built only
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

struct Params {
    m: u32,
    n: u32,
    k: u32,
    groups: u32,
    y_stride: u32,
    y_offset: u32,
    _pad0: u32,
    _pad1: u32,
}

override MV_M: u32 = 1u;
override GROUP: u32 = 32u;

const WG: u32 = 256u;
const LANES: u32 = 32u;
const ROWS_PER_WG: u32 = 32u;

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> packed: array<vec4<u32>>;
@group(0) @binding(3) var<storage, read> scales: array<u32>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;

fn scale_at(e: u32) -> f32 {
    let pair = unpack2x16float(scales[e >> 1u]);
    return select(pair.x, pair.y, (e & 1u) == 1u);
}

// The scales of the 4 words of the vec4 word at k0 of a row whose scales start at e0.
fn word_scales(e0: u32, k0: u32) -> vec4<f32> {
    if (GROUP % 32u == 0u) {
        return vec4<f32>(scale_at(e0 + k0 / GROUP));
    }
    return vec4<f32>(
        scale_at(e0 + k0 / GROUP),
        scale_at(e0 + (k0 + 8u) / GROUP),
        scale_at(e0 + (k0 + 16u) / GROUP),
        scale_at(e0 + (k0 + 24u) / GROUP),
    );
}

// (nibble - 8) of the low 4 nibbles of w, in k order.
fn lo4(w: u32) -> vec4<f32> {
    return vec4<f32>((vec4<u32>(w) >> vec4<u32>(0u, 4u, 8u, 12u)) & vec4<u32>(15u)) - vec4<f32>(8.0);
}

fn hi4(w: u32) -> vec4<f32> {
    return lo4(w >> 16u);
}

// Dot of 32 weights (one vec4<u32> with its 4 word scales) with 32 activations at xo.
fn dot32(w: vec4<u32>, s: vec4<f32>, xo: u32) -> f32 {
    return s.x * (dot(lo4(w.x), x[xo]) + dot(hi4(w.x), x[xo + 1u]))
        + s.y * (dot(lo4(w.y), x[xo + 2u]) + dot(hi4(w.y), x[xo + 3u]))
        + s.z * (dot(lo4(w.z), x[xo + 4u]) + dot(hi4(w.z), x[xo + 5u]))
        + s.w * (dot(lo4(w.w), x[xo + 6u]) + dot(hi4(w.w), x[xo + 7u]));
}

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let row0 = (wid.x + wid.y * nwg.x) * ROWS_PER_WG + (lid / LANES) * 4u;
    let lane = lid % LANES;
    var a0 = vec4<f32>(0.0);
    var a1 = vec4<f32>(0.0);
    var a2 = vec4<f32>(0.0);
    var a3 = vec4<f32>(0.0);
    if (row0 < params.n) {
        let v_row = params.k / 32u;
        let k4 = params.k / 4u;
        // Rows past the chunk repeat the last row; their sums are never written.
        let last = params.n - 1u;
        let r1 = min(row0 + 1u, last);
        let r2 = min(row0 + 2u, last);
        let r3 = min(row0 + 3u, last);
        for (var v = lane; v < v_row; v += LANES) {
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
    if (lane < 4u) {
        let n = row0 + lane;
        if (n < params.n) {
            var total = t0;
            if (lane == 1u) {
                total = t1;
            } else if (lane == 2u) {
                total = t2;
            } else if (lane == 3u) {
                total = t3;
            }
            for (var m = 0u; m < MV_M; m++) {
                y[m * params.y_stride + params.y_offset + n] = total[m];
            }
        }
    }
}
