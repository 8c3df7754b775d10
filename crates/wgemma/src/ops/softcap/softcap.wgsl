// Logit soft-capping: y = cap * tanh(x / cap) (Gemma 4 final logits: cap = 30), f32.
// Entry points: inplace (dst = softcap(dst)) and copy (dst = softcap(src)).
// Shapes: flat [n] (n = M * vocab, up to 2^32 - 1). Bindings: 0 params, 1 dst (read_write),
// 2 src (copy only). Geometry: 256 threads per workgroup, one element each; the grid may be
// folded to 2-D, so the flat index is (wid.x + wid.y * nwg.x) * 256 + lid, bound-checked.

struct Params {
    n: u32,
    cap: f32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read_write> dst: array<f32>;
@group(0) @binding(2) var<storage, read> src: array<f32>;

const WG: u32 = 256u;

// Same order as HF: (x / cap), tanh, * cap. tanh is exactly +-1 in f32 beyond |x| ~ 9.01;
// the clamp keeps drivers that compute (e^2x - 1) / (e^2x + 1) from returning NaN.
fn softcap(x: f32) -> f32 {
    return tanh(clamp(x / params.cap, -10.0, 10.0)) * params.cap;
}

@compute @workgroup_size(WG)
fn inplace(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let i = (wid.x + wid.y * nwg.x) * WG + lid;
    if (i >= params.n) {
        return;
    }
    dst[i] = softcap(dst[i]);
}

@compute @workgroup_size(WG)
fn copy(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let i = (wid.x + wid.y * nwg.x) * WG + lid;
    if (i >= params.n) {
        return;
    }
    dst[i] = softcap(src[i]);
}
