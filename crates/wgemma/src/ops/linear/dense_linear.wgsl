// dense_linear: y[m, n] = sum_k x[m, k] * W[n, k] with dense f32 or f16 weights (parity
// runs against the Q4 routes and the HF reference). Any M, N, K.
//
// Inputs: x f32 [M, K]; w [N, K] row-major, bound as u32 words: f32 bits when W_F16 == 0,
// else f16 pairs (element e = n * K + k in the low half of word e / 2 when e is even).
// Output y f32 [M, N].
// Geometry: 64 invocations per (row n, block of 4 activation rows): workgroup t of
// N * ceil(M / 4), flat index wid.x + wid.y * nwg.x (the grid may be folded to 2-D), takes
// n = t % N and rows 4 * (t / N) ..; lanes stride over k (coalesced weight reads), then a
// workgroup-memory tree reduction.

struct Params {
    m: u32,
    n: u32,
    k: u32,
    _pad: u32,
}

override W_F16: u32 = 0u;

const WG: u32 = 64u;

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> w: array<u32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;

var<workgroup> red: array<vec4<f32>, WG>;

fn weight(e: u32) -> f32 {
    if (W_F16 == 0u) {
        return bitcast<f32>(w[e]);
    }
    let pair = unpack2x16float(w[e >> 1u]);
    return select(pair.x, pair.y, (e & 1u) == 1u);
}

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let t = wid.x + wid.y * nwg.x;
    if (t >= params.n * ((params.m + 3u) / 4u)) {
        return;
    }
    let n = t % params.n;
    let m0 = (t / params.n) * 4u;
    let rows = min(params.m - m0, 4u);
    var acc = vec4<f32>(0.0);
    for (var k = lid; k < params.k; k += WG) {
        let wv = weight(n * params.k + k);
        for (var i = 0u; i < rows; i++) {
            acc[i] += wv * x[(m0 + i) * params.k + k];
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
        for (var i = 0u; i < rows; i++) {
            y[(m0 + i) * params.n + n] = sum[i];
        }
    }
}
