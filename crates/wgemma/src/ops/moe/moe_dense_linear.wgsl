// moe_dense_linear: the gathered-expert linear over dense f32 or f16 expert weights (routes
// dense_f32 / dense_f16; parity runs). Same contract as moe_q4_matvec.wgsl: for slot s
// (expert e = ids[s]) and output o,
//   GEGLU == 0: y[s, o] = sum_k x[s / x_div, k] * W[e * N + o, k]                (o < N)
//   GEGLU == 1: y[s, o] = gelu_tanh(x . W[e * N + o]) * (x . W[e * N + I + o])   (o < N / 2)
// Inputs: ids u32 [slots]; x f32 [rows, K]; one expert chunk of W, experts e0 .. e1, bound
// as u32 words: f32 bits when W_F16 == 0, else f16 pairs (element
// c = ((e - e0) * N + row) * K + k in the low half of word c / 2 when c is even). Slots of
// other experts are skipped; ids >= E get zeros from the kernel with zero_invalid = 1.
// Output y f32 [slots, outputs].
// Geometry: one workgroup of 64 per (slot, output): workgroup t of slots * outputs (flat
// index wid.x + wid.y * nwg.x, the grid may be folded to 2-D) takes slot t / outputs and
// output t % outputs; lanes stride over k (coalesced), then a workgroup-memory tree.

struct Params {
    slots: u32,
    n: u32,
    k: u32,
    e0: u32,
    e1: u32,
    experts: u32,
    x_div: u32,
    outputs: u32,
    zero_invalid: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

override W_F16: u32 = 0u;
override GEGLU: u32 = 0u;

const WG: u32 = 64u;

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> ids: array<u32>;
@group(0) @binding(2) var<storage, read> x: array<f32>;
@group(0) @binding(3) var<storage, read> w: array<u32>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;

var<workgroup> red: array<vec2<f32>, WG>;
var<workgroup> wg_expert: u32;

fn weight(c: u32) -> f32 {
    if (W_F16 == 0u) {
        return bitcast<f32>(w[c]);
    }
    let pair = unpack2x16float(w[c >> 1u]);
    return select(pair.x, pair.y, (c & 1u) == 1u);
}

#include "../geglu/gelu_tanh.wgsli"

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let t = wid.x + wid.y * nwg.x;
    let slot = t / params.outputs;
    let o = t % params.outputs;
    if (slot >= params.slots) {
        return;
    }
    if (lid == 0u) {
        wg_expert = ids[slot];
    }
    let e = workgroupUniformLoad(&wg_expert);
    let in_chunk = e >= params.e0 && e < params.e1;
    if (!in_chunk) {
        if (e >= params.experts && params.zero_invalid != 0u && lid == 0u) {
            y[slot * params.outputs + o] = 0.0;
        }
        return;
    }
    let rb = select(o, o + params.outputs, GEGLU != 0u);
    let base_a = ((e - params.e0) * params.n + o) * params.k;
    let base_b = ((e - params.e0) * params.n + rb) * params.k;
    let xbase = (slot / params.x_div) * params.k;
    var acc = vec2<f32>(0.0);
    for (var kk = lid; kk < params.k; kk += WG) {
        let xv = x[xbase + kk];
        acc.x += weight(base_a + kk) * xv;
        if (GEGLU != 0u) {
            acc.y += weight(base_b + kk) * xv;
        }
    }
    red[lid] = acc;
    workgroupBarrier();
    for (var stride = WG / 2u; stride > 0u; stride >>= 1u) {
        if (lid < stride) {
            red[lid] += red[lid + stride];
        }
        workgroupBarrier();
    }
    if (lid == 0u) {
        let sum = red[0];
        var out = sum.x;
        if (GEGLU != 0u) {
            out = gelu_tanh(sum.x) * sum.y;
        }
        y[slot * params.outputs + o] = out;
    }
}
