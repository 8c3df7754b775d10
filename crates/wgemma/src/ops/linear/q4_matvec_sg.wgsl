// q4_matvec_sg: the subgroup twin of q4_matvec.wgsl (same contract, inputs, layout and
// geometry; keep the two in step): each unit is taken by one whole subgroup, whose lanes
// stride over the unit's vec4 words, and is reduced with subgroupAdd, so no subgroup-to-lane
// mapping is assumed. Only built when the device has wgpu::Features::SUBGROUP.
//
// y[m, y_offset + n] = sum_k x[m, k] * W[n, k] for MV_M (1..=4) activation rows and one row
// chunk of a Q4 weight (routes q4_gemv, MV_M = 1, and q4_linear_m3, MV_M = 3).
// Inputs: x f32 [MV_M, K] read as vec4; packed u32 [n, K/8] read as vec4<u32> (K % 32 == 0);
// scales f16 pairs [n * K/GROUP] (GROUP % 8 == 0). Output y f32 [MV_M, y_stride].
//
// Geometry: 256 invocations; subgroups take units sid, sid + num_subgroups, ... of the
// workgroup's ROW_GROUPS * KSPLIT units (the host sizes UNITS for the device's largest
// subgroup; with smaller subgroups some idle). A workgroup covers ROW_GROUPS * RPT rows; the
// grid may be folded to 2-D, so the flat workgroup index is wid.x + wid.y * nwg.x.

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
override RPT: u32 = 4u;
override KSPLIT: u32 = 1u;
override ROW_GROUPS: u32 = 8u;

const WG: u32 = 256u;

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> packed: array<vec4<u32>>;
@group(0) @binding(3) var<storage, read> scales: array<u32>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;

// One partial per (unit, row of the unit); the activation rows are the vec4 lanes.
var<workgroup> part: array<vec4<f32>, 128>;
var<private> acc: array<vec4<f32>, 4>;

fn scale_at(e: u32) -> f32 {
    let pair = unpack2x16float(scales[e >> 1u]);
    return select(pair.x, pair.y, (e & 1u) == 1u);
}

// (nibble - 8) for 4 nibbles starting at bit `first`: 0x4b000000 | v is 2^23 + v exactly.
fn nibbles(word: u32, first: u32) -> vec4<f32> {
    let shifts = vec4<u32>(first, first + 4u, first + 8u, first + 12u);
    let bits = (vec4<u32>(word) >> shifts) & vec4<u32>(15u);
    return bitcast<vec4<f32>>(bits | vec4<u32>(0x4b000000u)) - vec4<f32>(8388616.0);
}

// M = 1 decodes in place, without shifts (the INT pipe is the tight one at full bandwidth):
// nibble j of a 16-bit half, masked where it sits, reads as (nibble - 8) * 16^j, and x is
// pre-scaled by 16^-j once per lane for all RPT rows. Powers of two keep it exact (unless
// |x| < 2^-114 flushes).
const X_SCALE = vec4<f32>(1.0, 0.0625, 0.00390625, 0.000244140625);

fn nibbles_in_place(half: u32) -> vec4<f32> {
    let bits = vec4<u32>(half) & vec4<u32>(0xfu, 0xf0u, 0xf00u, 0xf000u);
    return bitcast<vec4<f32>>(bits | vec4<u32>(0x4b000000u))
        - vec4<f32>(8388616.0, 8388736.0, 8390656.0, 8421376.0);
}

// Accumulates the unit's rows row0 .. row0 + RPT over vec4 words v0 + lane, step `lanes`.
fn unit_sums(row0: u32, slice: u32, lane: u32, lanes: u32) {
    for (var r = 0u; r < 4u; r++) {
        acc[r] = vec4<f32>(0.0);
    }
    if (row0 >= params.n) {
        return;
    }
    let v_row = params.k / 32u;
    let v_len = (v_row + KSPLIT - 1u) / KSPLIT;
    let v0 = slice * v_len;
    let v1 = min(v0 + v_len, v_row);
    for (var v = v0 + lane; v < v1; v += lanes) {
        let k0 = v * 32u;
        var w: array<vec4<u32>, 4>;
        var sc: array<vec4<f32>, 4>;
        for (var r = 0u; r < RPT; r++) {
            // Rows past the chunk repeat the last row; their sums are never written.
            let n = min(row0 + r, params.n - 1u);
            w[r] = packed[n * v_row + v];
            let e = n * params.groups;
            if (GROUP % 32u == 0u) {
                sc[r] = vec4<f32>(scale_at(e + k0 / GROUP));
            } else {
                sc[r] = vec4<f32>(
                    scale_at(e + k0 / GROUP),
                    scale_at(e + (k0 + 8u) / GROUP),
                    scale_at(e + (k0 + 16u) / GROUP),
                    scale_at(e + (k0 + 24u) / GROUP),
                );
            }
        }
        if (MV_M == 1u) {
            for (var i = 0u; i < 4u; i++) {
                let xi = (k0 + 8u * i) / 4u;
                let xa = x[xi] * X_SCALE;
                let xb = x[xi + 1u] * X_SCALE;
                for (var r = 0u; r < RPT; r++) {
                    let word = w[r][i];
                    let d = dot(nibbles_in_place(word), xa) + dot(nibbles_in_place(word >> 16u), xb);
                    acc[r].x += sc[r][i] * d;
                }
            }
            continue;
        }
        for (var i = 0u; i < 4u; i++) {
            var lo: array<vec4<f32>, 4>;
            var hi: array<vec4<f32>, 4>;
            for (var r = 0u; r < RPT; r++) {
                lo[r] = nibbles(w[r][i], 0u);
                hi[r] = nibbles(w[r][i], 16u);
            }
            for (var m = 0u; m < MV_M; m++) {
                let xi = (m * params.k + k0 + 8u * i) / 4u;
                let xa = x[xi];
                let xb = x[xi + 1u];
                for (var r = 0u; r < RPT; r++) {
                    acc[r][m] += sc[r][i] * (dot(lo[r], xa) + dot(hi[r], xb));
                }
            }
        }
    }
}

// Sums the KSPLIT slice partials of each row and writes y.
fn write_rows(wg_row0: u32, lid: u32) {
    if (lid >= ROW_GROUPS * RPT) {
        return;
    }
    let n = wg_row0 + lid;
    if (n >= params.n) {
        return;
    }
    let g = lid / RPT;
    let r = lid % RPT;
    var sum = vec4<f32>(0.0);
    for (var s = 0u; s < KSPLIT; s++) {
        sum += part[(g * KSPLIT + s) * RPT + r];
    }
    for (var m = 0u; m < MV_M; m++) {
        y[m * params.y_stride + params.y_offset + n] = sum[m];
    }
}

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
    @builtin(subgroup_id) sid: u32,
    @builtin(num_subgroups) nsg: u32,
    @builtin(subgroup_invocation_id) lane: u32,
    @builtin(subgroup_size) lanes: u32,
) {
    let wg_row0 = (wid.x + wid.y * nwg.x) * ROW_GROUPS * RPT;
    if (wg_row0 >= params.n) {
        return;
    }
    for (var unit = sid; unit < ROW_GROUPS * KSPLIT; unit += nsg) {
        unit_sums(wg_row0 + (unit / KSPLIT) * RPT, unit % KSPLIT, lane, lanes);
        for (var r = 0u; r < RPT; r++) {
            let total = subgroupAdd(acc[r]);
            if (lane == 0u) {
                part[unit * RPT + r] = total;
            }
        }
    }
    workgroupBarrier();
    write_rows(wg_row0, lid);
}
