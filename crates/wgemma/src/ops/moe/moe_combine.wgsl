// moe_combine: the weighted sum of the expert outputs of each token (the index_add_ of HF
// Gemma4TextExperts.forward): out[m, h] = sum_{j < top_k} weights[m, j] * y[m * top_k + j, h],
// summed in slot order j = 0, 1, ... in f32.
// Inputs: weights f32 [M, top_k] (moe_route's), y f32 [M * top_k, H] (one row per slot).
// Output: out f32 [M, H].
// Geometry: 256 invocations, one output each; the grid may be folded to 2-D, so the flat
// index is (wid.x + wid.y * nwg.x) * 256 + lid, bound-checked against M * H.

struct Params {
    m: u32,
    h: u32,
    top_k: u32,
    _pad: u32,
}

const WG: u32 = 256u;

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> weights: array<f32>;
@group(0) @binding(2) var<storage, read> y: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let i = (wid.x + wid.y * nwg.x) * WG + lid;
    if (i >= params.m * params.h) {
        return;
    }
    let m = i / params.h;
    let col = i % params.h;
    var acc = 0.0;
    for (var j = 0u; j < params.top_k; j++) {
        let s = m * params.top_k + j;
        acc += weights[s] * y[s * params.h + col];
    }
    out[i] = acc;
}
