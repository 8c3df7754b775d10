// moe_q4_generic: the gathered-expert Q4 linear's fallback route (q4_generic), correct for
// any K % 8 == 0, GROUP % 8 == 0 and any number of slots; same contract as
// moe_q4_matvec.wgsl: for slot s (expert e = ids[s]) and output o,
//   GEGLU == 0: y[s, o] = sum_k x[s / x_div, k] * W[e * N + o, k]                (o < N)
//   GEGLU == 1: y[s, o] = gelu_tanh(x . W[e * N + o]) * (x . W[e * N + I + o])   (o < N / 2)
// Inputs: ids u32 [slots]; x f32 [rows, K] read as vec4; one expert chunk of the Q4 weight,
// experts e0 .. e1: packed u32 [(e1 - e0) * N, K/8] (k = 8w + i in bits 4i..4i+3 of word
// w), scales f16 pairs [(e1 - e0) * N * K/GROUP]. Slots of other experts are skipped; ids
// >= E get zeros from the kernel with zero_invalid = 1. Output y f32 [slots, outputs].
// Geometry: 64 invocations, one output each: invocation t of the flat workgroup index
// (wid.x + wid.y * nwg.x, the grid may be folded to 2-D) takes slot t / outputs and output
// t % outputs; t >= slots * outputs returns.

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
override GEGLU: u32 = 0u;

const WG: u32 = 64u;

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> ids: array<u32>;
@group(0) @binding(2) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> packed: array<u32>;
@group(0) @binding(4) var<storage, read> scales: array<u32>;
@group(0) @binding(5) var<storage, read_write> y: array<f32>;

#include "../linear/q4_format.wgsli"

#include "../geglu/gelu_tanh.wgsli"

fn row_dot(row: u32, xbase: u32) -> f32 {
    let words = params.k / 8u;
    var acc = 0.0;
    for (var w = 0u; w < words; w++) {
        let word = packed[row * words + w];
        let sc = scale_at(row * params.groups + (w * 8u) / GROUP);
        let xi = (xbase + w * 8u) / 4u;
        acc += sc * (dot(nibbles(word, 0u), x[xi]) + dot(nibbles(word, 16u), x[xi + 1u]));
    }
    return acc;
}

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let t = (wid.x + wid.y * nwg.x) * WG + lid;
    if (t >= params.slots * params.outputs) {
        return;
    }
    let slot = t / params.outputs;
    let o = t % params.outputs;
    let e = ids[slot];
    if (e < params.e0 || e >= params.e1) {
        if (e >= params.experts && params.zero_invalid != 0u) {
            y[t] = 0.0;
        }
        return;
    }
    let row = (e - params.e0) * params.n + o;
    let xbase = (slot / params.x_div) * params.k;
    var out = row_dot(row, xbase);
    if (GEGLU != 0u) {
        out = gelu_tanh(out) * row_dot(row + params.outputs, xbase);
    }
    y[t] = out;
}
