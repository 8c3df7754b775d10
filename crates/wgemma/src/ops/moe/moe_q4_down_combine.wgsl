// moe_q4_down_combine: the expert down projection fused with the combine (route
// q4_fused of moe_expert_linear_combine), for few tokens (decode, verify):
//   out[m, o] (+)= sum_{j < top_k} weights[m, j] * (W[ids[m, j]] row o . x[(m*top_k + j) / x_div])
// for o < N, reading only the selected experts' Q4 rows. One expert chunk per kernel: slots
// whose expert is outside e0 .. e1 (and ids >= E) contribute nothing; the first chunk's
// kernel writes out (accumulate = 0), later ones add to it (accumulate = 1), in order.
//
// Inputs: params; ids u32 [M, top_k]; weights f32 [M, top_k] (moe_route's); x f32
// [rows, K] read as vec4 (K % 32 == 0; x_div = 1: one row per slot); packed u32
// [(e1 - e0) * N, K/8] read as vec4<u32>; scales f16 pairs [(e1 - e0) * N * K/GROUP]
// (GROUP % 8 == 0). Output out f32 [M, N].
// Format: nibble i of word w is k = 8w + i (bits 4i..4i+3), weight = (nibble - 8) * scale.
//
// Geometry: 256 invocations = 256 / LANES units of LANES lanes; units are (row pair,
// slot class) with SLOT_PAR slot classes (a power of two): the unit of class c takes
// slots c, c + SLOT_PAR, ... of its token for two consecutive output rows, its lanes
// striding over the rows' vec4 words (coalesced); a workgroup covers 2 * 256 / LANES /
// SLOT_PAR rows. Workgroup t of M * tiles (flat index wid.x + wid.y * nwg.x, the grid may
// be folded to 2-D) takes token t / tiles, row tile t % tiles. One reduction through
// workgroup memory sums lanes and slot classes (no subgroup ops).

struct Params {
    m: u32,
    top_k: u32,
    n: u32,
    k: u32,
    groups: u32,
    e0: u32,
    e1: u32,
    x_div: u32,
    tiles: u32,
    accumulate: u32,
    _pad0: u32,
    _pad1: u32,
}

override GROUP: u32 = 32u;
override LANES: u32 = 8u;
override SLOT_PAR: u32 = 8u;

const WG: u32 = 256u;

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> ids: array<u32>;
@group(0) @binding(2) var<storage, read> weights: array<f32>;
@group(0) @binding(3) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(4) var<storage, read> packed: array<vec4<u32>>;
@group(0) @binding(5) var<storage, read> scales: array<u32>;
@group(0) @binding(6) var<storage, read_write> out: array<f32>;

var<workgroup> part: array<vec2<f32>, WG>;

#include "../linear/q4_format.wgsli"

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let flat = wid.x + wid.y * nwg.x;
    let token = flat / params.tiles;
    let tile = flat % params.tiles;
    if (token >= params.m) {
        return;
    }
    let units = WG / LANES;
    let pairs = units / SLOT_PAR;
    let unit = lid / LANES;
    let lane = lid % LANES;
    let o0 = (tile * pairs + unit / SLOT_PAR) * 2u;
    let v_row = params.k / 32u;

    var acc = vec2<f32>(0.0);
    if (o0 < params.n) {
        for (var j = unit % SLOT_PAR; j < params.top_k; j += SLOT_PAR) {
            let s = token * params.top_k + j;
            let e = ids[s];
            if (e < params.e0 || e >= params.e1) {
                continue;
            }
            let chunk_row = (e - params.e0) * params.n;
            // Rows past N are read (clamped) but never written.
            let row_a = chunk_row + o0;
            let row_b = chunk_row + min(o0 + 1u, params.n - 1u);
            let xbase = (s / params.x_div) * params.k;
            var d = vec2<f32>(0.0);
            for (var v = lane; v < v_row; v += LANES) {
                let k0 = v * 32u;
                let wa = packed[row_a * v_row + v];
                let wb = packed[row_b * v_row + v];
                let sa = word_scales(row_a * params.groups, k0);
                let sb = word_scales(row_b * params.groups, k0);
                for (var i = 0u; i < 4u; i++) {
                    let xi = (xbase + k0 + 8u * i) / 4u;
                    let xa = x[xi];
                    let xb = x[xi + 1u];
                    d.x += sa[i] * (dot(nibbles(wa[i], 0u), xa) + dot(nibbles(wa[i], 16u), xb));
                    d.y += sb[i] * (dot(nibbles(wb[i], 0u), xa) + dot(nibbles(wb[i], 16u), xb));
                }
            }
            acc += weights[s] * d;
        }
    }
    part[lid] = acc;
    workgroupBarrier();
    if (lid < 2u * pairs) {
        let pair = lid / 2u;
        let r = lid % 2u;
        let o = (tile * pairs + pair) * 2u + r;
        var sum = 0.0;
        for (var u = 0u; u < SLOT_PAR; u++) {
            let base = (pair * SLOT_PAR + u) * LANES;
            for (var l = 0u; l < LANES; l++) {
                sum += part[base + l][r];
            }
        }
        if (o < params.n) {
            let idx = token * params.n + o;
            if (params.accumulate != 0u) {
                out[idx] += sum;
            } else {
                out[idx] = sum;
            }
        }
    }
}
