// q4_linear_generic: the fallback route, correct for any M and K % 8 == 0, GROUP % 8 == 0:
// y[m, y_offset + n] = sum_k x[m, k] * W[n, k] for one row chunk of a Q4 weight, one
// invocation per output, walking the row's packed words (8 weights, one scale each).
//
// Inputs: x f32 [M, K] read as vec4; packed u32 [n, K/8] (k = 8w + i in bits 4i..4i+3 of
// word w); scales f16 pairs [n * K/GROUP]. Output y f32 [M, y_stride].
// Geometry: 64 invocations, output t = m * n + row is invocation t of the flat workgroup
// index wid.x + wid.y * nwg.x (the grid may be folded to 2-D); t >= M * n returns.

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

override GROUP: u32 = 32u;

const WG: u32 = 64u;

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> packed: array<u32>;
@group(0) @binding(3) var<storage, read> scales: array<u32>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;

#include "q4_format.wgsli"

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let t = (wid.x + wid.y * nwg.x) * WG + lid;
    if (t >= params.m * params.n) {
        return;
    }
    let m = t / params.n;
    let n = t % params.n;
    let words = params.k / 8u;
    var acc = 0.0;
    for (var w = 0u; w < words; w++) {
        let word = packed[n * words + w];
        let sc = scale_at(n * params.groups + (w * 8u) / GROUP);
        let xi = (m * params.k + w * 8u) / 4u;
        acc += sc * (dot(nibbles(word, 0u), x[xi]) + dot(nibbles(word, 16u), x[xi + 1u]));
    }
    y[m * params.y_stride + params.y_offset + n] = acc;
}
