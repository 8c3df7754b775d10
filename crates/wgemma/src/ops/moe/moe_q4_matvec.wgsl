// moe_q4_matvec: the gathered-expert Q4 linear, route q4_grouped. For every slot s of the
// routing (s = m * top_k + j, expert e = ids[s]) and output o:
//   GEGLU == 0: y[s, o] = sum_k x[s / x_div, k] * W[e * N + o, k]                (o < N)
//   GEGLU == 1: y[s, o] = gelu_tanh(g) * u, g = x . W[e * N + o], u = x . W[e * N + I + o]
//               (o < I = N / 2: gate rows first in each expert, then up rows; HF order)
// reading only the selected experts' weights. x_div = top_k when x is [M, K] (one row per
// token, shared by its slots), 1 when x is [M * top_k, K] (one row per slot).
// Slots of one expert are grouped: the workgroup of the first slot with expert e (in slot
// order) computes every slot with e, in batches of 4 that share each weight word; the
// workgroups of the other slots with e exit. Results do not depend on the grouping.
//
// Inputs: params; ids u32 [slots] (= [M, top_k]); x f32 [rows, K] read as vec4 (K % 32 ==
// 0); one expert chunk of the Q4 weight: packed u32 [(e1 - e0) * N, K/8] read as vec4<u32>,
// scales f16 pairs [(e1 - e0) * N * K/GROUP] (GROUP % 8 == 0), experts e0 .. e1 only
// (slots of other experts are left to the other chunks' kernels). Ids >= E: the kernel with
// zero_invalid = 1 writes zeros for those slots. Output y f32 [slots, outputs].
// Format: nibble i of word w is k = 8w + i (bits 4i..4i+3), weight = (nibble - 8) * scale.
//
// Geometry: 256 invocations = 256 / LANES units of LANES lanes; a unit owns two weight rows
// (two outputs, or the gate and up row of one GEGLU output), its lanes stride over the
// rows' vec4 words (coalesced). Workgroup t of slots * tiles (flat index wid.x + wid.y *
// nwg.x, the grid may be folded to 2-D) takes slot t / tiles and output tile t % tiles.
// Partials are reduced once through workgroup memory (no subgroup ops).

struct Params {
    slots: u32,
    n: u32,
    k: u32,
    groups: u32,
    e0: u32,
    e1: u32,
    experts: u32,
    x_div: u32,
    outputs: u32,
    tiles: u32,
    zero_invalid: u32,
    _pad: u32,
}

override GROUP: u32 = 32u;
override LANES: u32 = 32u;
override GEGLU: u32 = 0u;

const WG: u32 = 256u;
const MAX_SLOTS: u32 = 1024u;

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> ids: array<u32>;
@group(0) @binding(2) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> packed: array<vec4<u32>>;
@group(0) @binding(4) var<storage, read> scales: array<u32>;
@group(0) @binding(5) var<storage, read_write> y: array<f32>;

// Partials of the unit's two rows: [row][invocation], the 4 batch slots in the vec4.
var<workgroup> part: array<vec4<f32>, 512>;
var<workgroup> slot_list: array<u32, MAX_SLOTS>;
var<workgroup> match_count: atomic<u32>;
var<workgroup> not_leader: atomic<u32>;
var<workgroup> wg_expert: u32;
var<workgroup> wg_count: u32;

#include "../linear/q4_format.wgsli"

#include "../geglu/gelu_tanh.wgsli"

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let flat = wid.x + wid.y * nwg.x;
    let slot = flat / params.tiles;
    let tile = flat % params.tiles;
    if (slot >= params.slots) {
        return;
    }
    if (lid == 0u) {
        wg_expert = ids[slot];
        atomicStore(&match_count, 0u);
        atomicStore(&not_leader, 0u);
    }
    let e = workgroupUniformLoad(&wg_expert);
    let in_chunk = e >= params.e0 && e < params.e1;
    let zero = e >= params.experts && params.zero_invalid != 0u;
    if (!in_chunk && !zero) {
        return;
    }

    // Gather the slots with expert e; a slot before ours with e means we are not first.
    for (var s = lid; s < params.slots; s += WG) {
        if (ids[s] == e) {
            if (s < slot) {
                atomicStore(&not_leader, 1u);
            } else {
                slot_list[atomicAdd(&match_count, 1u)] = s;
            }
        }
    }
    workgroupBarrier();
    if (lid == 0u) {
        wg_count = select(atomicLoad(&match_count), 0u, atomicLoad(&not_leader) != 0u);
    }
    let count = workgroupUniformLoad(&wg_count);

    let units = WG / LANES;
    let unit = lid / LANES;
    let lane = lid % LANES;
    let per_unit = select(2u, 1u, GEGLU != 0u);
    let o0 = (tile * units + unit) * per_unit;
    // The unit's two weight rows (clamped: rows past N are read but never written).
    let rb = select(o0 + 1u, o0 + params.outputs, GEGLU != 0u);
    let chunk_row = (e - params.e0) * params.n;
    let row_a = chunk_row + min(o0, params.n - 1u);
    let row_b = chunk_row + min(rb, params.n - 1u);
    let v_row = params.k / 32u;

    for (var b0 = 0u; b0 < count; b0 += 4u) {
        let nb = min(count - b0, 4u);
        var acc_a = vec4<f32>(0.0);
        var acc_b = vec4<f32>(0.0);
        if (in_chunk && o0 < params.outputs) {
            var xrow: array<u32, 4>;
            for (var b = 0u; b < nb; b++) {
                xrow[b] = (slot_list[b0 + b] / params.x_div) * params.k;
            }
            for (var v = lane; v < v_row; v += LANES) {
                let k0 = v * 32u;
                let wa = packed[row_a * v_row + v];
                let wb = packed[row_b * v_row + v];
                let sa = word_scales(row_a * params.groups, k0);
                let sb = word_scales(row_b * params.groups, k0);
                for (var i = 0u; i < 4u; i++) {
                    let la = nibbles(wa[i], 0u);
                    let ha = nibbles(wa[i], 16u);
                    let lb = nibbles(wb[i], 0u);
                    let hb = nibbles(wb[i], 16u);
                    for (var b = 0u; b < nb; b++) {
                        let xi = (xrow[b] + k0 + 8u * i) / 4u;
                        let xa = x[xi];
                        let xb = x[xi + 1u];
                        acc_a[b] += sa[i] * (dot(la, xa) + dot(ha, xb));
                        acc_b[b] += sb[i] * (dot(lb, xa) + dot(hb, xb));
                    }
                }
            }
        }
        part[lid] = acc_a;
        part[WG + lid] = acc_b;
        workgroupBarrier();
        if (lid < units) {
            var sum_a = vec4<f32>(0.0);
            var sum_b = vec4<f32>(0.0);
            for (var l = 0u; l < LANES; l++) {
                sum_a += part[lid * LANES + l];
                sum_b += part[WG + lid * LANES + l];
            }
            let o = (tile * units + lid) * per_unit;
            for (var b = 0u; b < nb; b++) {
                let yrow = slot_list[b0 + b] * params.outputs;
                if (GEGLU != 0u) {
                    if (o < params.outputs) {
                        y[yrow + o] = gelu_tanh(sum_a[b]) * sum_b[b];
                    }
                } else {
                    if (o < params.outputs) {
                        y[yrow + o] = sum_a[b];
                    }
                    if (o + 1u < params.outputs) {
                        y[yrow + o + 1u] = sum_b[b];
                    }
                }
            }
        }
        workgroupBarrier();
    }
}
