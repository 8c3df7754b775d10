// Embedding gather: out[t, :] = dequant(table[ids[t], :]) * scale, f32 out [M, d].
// The table may be split by rows into chunks (each its own buffer, at most one storage
// binding); one dispatch per chunk covers ALL M tokens and writes only the tokens whose id
// lies in [row_start, row_end). Rule for ids >= vocab: the row is written as zeros, by the
// dispatch with zero_oob = 1 (the first chunk's); nothing out of bounds is read. So every
// output row is written by exactly one dispatch.
// Table formats (binding 2, always read as u32 words):
//   gather_f32: f32 [rows, d] (bitcast).
//   gather_f16: IEEE half [rows, d], two per u32 (low half first), d even.
//   gather_q4:  words [rows, d/8]; element k = 8w + i is nibble i (bits 4i..4i+3) of word w,
//               value (nibble - 8) * s; s = f16 scales [rows, d/group] two per u32
//               (binding 4), flat half index local_row * (d/group) + k/group; group % 8 == 0,
//               chunks start at even rows when d/group is odd.
// Bindings: 0 params, 1 ids (u32 [M]; i32 ids read as u32, so negatives are >= vocab),
// 2 table, 3 out (read_write), 4 scales (q4 only).
// Geometry: 256 threads per workgroup, wg_per_token workgroups per token; a thread handles
// one table word (1, 2 or 8 elements). The grid may be folded to 2-D: the flat workgroup
// index is wid.x + wid.y * nwg.x, bound-checked against M * wg_per_token.

struct Params {
    d: u32,
    m: u32,
    row_start: u32,
    row_end: u32,
    vocab: u32,
    zero_oob: u32,
    units: u32,
    wg_per_token: u32,
    scales_per_row: u32,
    group: u32,
    scale: f32,
    _pad: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> ids: array<u32>;
@group(0) @binding(2) var<storage, read> table: array<u32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;
@group(0) @binding(4) var<storage, read> scales: array<u32>;

const WG: u32 = 256u;

// What this thread does: 0 = nothing, 1 = gather, 2 = write zeros.
struct Job {
    action: u32,
    token: u32,
    unit: u32,
    local_row: u32,
}

fn job(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) -> Job {
    var j = Job(0u, 0u, 0u, 0u);
    let w = wid.x + wid.y * nwg.x;
    j.token = w / params.wg_per_token;
    if (j.token >= params.m) {
        return j;
    }
    j.unit = (w - j.token * params.wg_per_token) * WG + lid;
    if (j.unit >= params.units) {
        return j;
    }
    let id = ids[j.token];
    if (id >= params.row_start && id < params.row_end) {
        j.action = 1u;
        j.local_row = id - params.row_start;
    } else if (id >= params.vocab && params.zero_oob != 0u) {
        j.action = 2u;
    }
    return j;
}

@compute @workgroup_size(WG)
fn gather_f32(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let j = job(wid, nwg, lid);
    let o = j.token * params.d + j.unit;
    if (j.action == 1u) {
        out[o] = bitcast<f32>(table[j.local_row * params.d + j.unit]) * params.scale;
    } else if (j.action == 2u) {
        out[o] = 0.0;
    }
}

@compute @workgroup_size(WG)
fn gather_f16(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let j = job(wid, nwg, lid);
    let o = j.token * params.d + 2u * j.unit;
    if (j.action == 1u) {
        let v = unpack2x16float(table[j.local_row * params.units + j.unit]);
        out[o] = v.x * params.scale;
        out[o + 1u] = v.y * params.scale;
    } else if (j.action == 2u) {
        out[o] = 0.0;
        out[o + 1u] = 0.0;
    }
}

@compute @workgroup_size(WG)
fn gather_q4(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let j = job(wid, nwg, lid);
    let k0 = 8u * j.unit;
    let o = j.token * params.d + k0;
    if (j.action == 1u) {
        let word = table[j.local_row * params.units + j.unit];
        let si = j.local_row * params.scales_per_row + k0 / params.group;
        let s = unpack2x16float(scales[si / 2u])[si % 2u];
        for (var i = 0u; i < 8u; i++) {
            let nib = (word >> (4u * i)) & 15u;
            out[o + i] = (f32(nib) - 8.0) * s * params.scale;
        }
    } else if (j.action == 2u) {
        for (var i = 0u; i < 8u; i++) {
            out[o + i] = 0.0;
        }
    }
}
