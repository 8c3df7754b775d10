// moe_route: the Gemma 4 MoE router after its projection (HF Gemma4TextRouter.forward from
// `softmax` on). Per row m of scores [M, E] (f32, the router.proj output):
//   p = softmax(scores[m]) in f32;
//   top-k experts by score, descending; ties (equal order keys): the lower expert first;
//   w_j = p[e_j] / sum_{i<k} p[e_i] * per_expert_scale[e_j].
// Selection is on the scores, not on the rounded probabilities: softmax is monotone, so
// this is HF's selection wherever f32 rounding of p does not tie distinct scores (and
// torch.topk's own order among ties is unspecified). Order: order_key below (NaN greatest,
// -0 == +0), as the argmax and TopK ops.
//
// Inputs: params {m, e, top_k}; scores f32 [M, E]; per_expert_scale f32 [E].
// Outputs: ids u32 [M, top_k] (descending score), weights f32 [M, top_k].
// Limits (host guards): 1 <= top_k <= min(E, MAX_K), E <= MAX_E.
// Geometry: one workgroup of 128 per row; the grid may be folded to 2-D, so the row is
// wid.x + wid.y * nwg.x, and rows >= M exit. The keys live in workgroup memory; each
// invocation ranks experts lid, lid + 128, ... by counting the experts ahead of them
// (rank = #{f: key_f > key_e, or key_f == key_e and f < e}, distinct by construction), so
// the top_k need no sequential rounds; the expert of rank 0 gives the softmax maximum.

struct Params {
    m: u32,
    e: u32,
    top_k: u32,
    _pad: u32,
}

const WG: u32 = 128u;
const MAX_E: u32 = 2048u;
const MAX_K: u32 = 64u;

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> scores: array<f32>;
@group(0) @binding(2) var<storage, read> per_expert_scale: array<f32>;
@group(0) @binding(3) var<storage, read_write> ids: array<u32>;
@group(0) @binding(4) var<storage, read_write> weights: array<f32>;

var<workgroup> keys: array<u32, MAX_E>;
var<workgroup> chosen: array<u32, MAX_K>;
var<workgroup> red: array<f32, WG>;

// Order-preserving u32 key of an f32: NaN (any payload) greatest, -0 == +0.
fn order_key(bits: u32) -> u32 {
    if ((bits & 0x7fffffffu) > 0x7f800000u) {
        return 0xffffffffu;
    }
    if (bits == 0x80000000u) {
        return 0x80000000u;
    }
    if ((bits & 0x80000000u) != 0u) {
        return ~bits;
    }
    return bits | 0x80000000u;
}

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let row = wid.x + wid.y * nwg.x;
    if (row >= params.m) {
        return;
    }
    let n = params.e;
    let base = row * n;
    for (var e = lid; e < n; e += WG) {
        keys[e] = order_key(bitcast<u32>(scores[base + e]));
    }
    workgroupBarrier();

    // Rank by counting; the top_k ranks name the chosen experts, best first.
    for (var e = lid; e < n; e += WG) {
        let ke = keys[e];
        var rank = 0u;
        for (var f = 0u; f < n; f++) {
            let kf = keys[f];
            rank += u32(kf > ke || (kf == ke && f < e));
        }
        if (rank < params.top_k) {
            chosen[rank] = e;
        }
    }
    workgroupBarrier();

    // Softmax denominator around the top score. A row with a NaN score has unspecified
    // weights (WGSL does not promise NaN propagation; lavapipe gives NaN).
    let mx = scores[base + chosen[0]];
    var sum = 0.0;
    for (var e = lid; e < n; e += WG) {
        sum += exp(scores[base + e] - mx);
    }
    red[lid] = sum;
    workgroupBarrier();
    for (var stride = WG / 2u; stride > 0u; stride >>= 1u) {
        if (lid < stride) {
            red[lid] += red[lid + stride];
        }
        workgroupBarrier();
    }
    let total = red[0];

    // Renormalise over the chosen probabilities (summed in rank order), then scale.
    if (lid == 0u) {
        var psum = 0.0;
        for (var j = 0u; j < params.top_k; j++) {
            psum += exp(scores[base + chosen[j]] - mx) / total;
        }
        for (var j = 0u; j < params.top_k; j++) {
            let e = chosen[j];
            let p = exp(scores[base + e] - mx) / total;
            ids[row * params.top_k + j] = e;
            weights[row * params.top_k + j] = p / psum * per_expert_scale[e];
        }
    }
}
