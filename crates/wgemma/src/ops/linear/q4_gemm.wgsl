// q4_gemm: y[m, y_offset + n] = sum_k x[m, k] * W[n, k] for any M (prefill) and one row
// chunk of a Q4 weight. Tiled: a workgroup computes a 64 (m) x 64 (n) output tile, stepping
// K by 32: it stages the x tile and the dequantised weight tile in workgroup memory (both
// k-major, 16 KiB together, the WebGPU default limit), then each invocation accumulates a
// 4 (m) x 4 (n) block from two vec4 reads per k.
//
// Inputs: x f32 [M, K] (K % 8 == 0, read as vec4); packed u32 [n, K/8] (word w of a row
// holds k = 8w + i in bits 4i..4i+3); scales f16 pairs [n * K/GROUP] (GROUP % 8 == 0, one
// scale per word). Output y f32 [M, y_stride]. K tails (K % 32 != 0) and partial tiles read
// zeros and are not written.
//
// Geometry: 256 invocations; workgroup t of ceil(n / 64) * ceil(M / 64) tiles, flat index
// wid.x + wid.y * nwg.x (the grid may be folded to 2-D), covers n-tile t % n_tiles and
// m-tile t / n_tiles.

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

const WG: u32 = 256u;
const BM: u32 = 64u;
const BN: u32 = 64u;
const BK: u32 = 32u;

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> packed: array<u32>;
@group(0) @binding(3) var<storage, read> scales: array<u32>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;

// [BK][BM / 4] and [BK][BN / 4]: element (k, i) is xs[k * 16 + i / 4][i % 4].
var<workgroup> xs: array<vec4<f32>, 512>;
var<workgroup> ws: array<vec4<f32>, 512>;

fn scale_at(e: u32) -> f32 {
    let pair = unpack2x16float(scales[e >> 1u]);
    return select(pair.x, pair.y, (e & 1u) == 1u);
}

// (nibble - 8) for 4 nibbles starting at bit `first`: 0x4b000000 | v is 2^23 + v exactly.
fn nibbles(word: u32, first: u32) -> vec4<f32> {
    let shifts = vec4<u32>(first, first + 4u, first + 8u, first + 12u);
    let bits = (vec4<u32>(word) >> shifts) & vec4<u32>(15u);
    return bitcast<vec4<f32>>(bits | vec4<u32>(0x4b000000u)) - vec4<f32>(8388616.0);
}

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let n_tiles = (params.n + BN - 1u) / BN;
    let tile = wid.x + wid.y * nwg.x;
    if (tile >= n_tiles * ((params.m + BM - 1u) / BM)) {
        return;
    }
    let n0 = (tile % n_tiles) * BN;
    let m0 = (tile / n_tiles) * BM;
    let words = params.k / 8u;
    let tn = lid % 16u;
    let tm = lid / 16u;
    var acc: array<vec4<f32>, 4>;

    for (var k0 = 0u; k0 < params.k; k0 += BK) {
        // x tile: 64 rows x 8 vec4, two per invocation, stored transposed.
        for (var h = 0u; h < 2u; h++) {
            let i = lid + h * WG;
            let mm = i / 8u;
            let kq = i % 8u;
            let m = m0 + mm;
            let k = k0 + kq * 4u;
            var v = vec4<f32>(0.0);
            if (m < params.m && k < params.k) {
                v = x[(m * params.k + k) / 4u];
            }
            for (var c = 0u; c < 4u; c++) {
                xs[(kq * 4u + c) * 16u + mm / 4u][mm % 4u] = v[c];
            }
        }
        // Weight tile: 64 rows x 4 words, one word (8 weights) per invocation.
        {
            let nn = lid / 4u;
            let i = lid % 4u;
            let n = n0 + nn;
            let wi = k0 / 8u + i;
            var lo = vec4<f32>(0.0);
            var hi = vec4<f32>(0.0);
            if (n < params.n && wi < words) {
                let word = packed[n * words + wi];
                let sc = scale_at(n * params.groups + (wi * 8u) / GROUP);
                lo = nibbles(word, 0u) * sc;
                hi = nibbles(word, 16u) * sc;
            }
            for (var c = 0u; c < 4u; c++) {
                ws[(i * 8u + c) * 16u + nn / 4u][nn % 4u] = lo[c];
                ws[(i * 8u + 4u + c) * 16u + nn / 4u][nn % 4u] = hi[c];
            }
        }
        workgroupBarrier();
        for (var kk = 0u; kk < BK; kk++) {
            let a = xs[kk * 16u + tm];
            let b = ws[kk * 16u + tn];
            acc[0] += a.x * b;
            acc[1] += a.y * b;
            acc[2] += a.z * b;
            acc[3] += a.w * b;
        }
        workgroupBarrier();
    }

    for (var i = 0u; i < 4u; i++) {
        let m = m0 + tm * 4u + i;
        if (m >= params.m) {
            break;
        }
        for (var j = 0u; j < 4u; j++) {
            let n = n0 + tn * 4u + j;
            if (n < params.n) {
                y[m * params.y_stride + params.y_offset + n] = acc[i][j];
            }
        }
    }
}
