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

#include "q4_gemm_io.wgsli"

const WG: u32 = 256u;
const BM: u32 = 64u;
const BN: u32 = 64u;
const BK: u32 = 32u;

// [BK][BM / 4] and [BK][BN / 4]: element (k, i) is xs[k * 16 + i / 4][i % 4].
var<workgroup> xs: array<vec4<f32>, 512>;
var<workgroup> ws: array<vec4<f32>, 512>;

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
    let tn = lid % 16u;
    let tm = lid / 16u;
    var acc: array<vec4<f32>, 4>;

    for (var k0 = 0u; k0 < params.k; k0 += BK) {
        // x tile: 64 rows x 8 vec4, two per invocation, stored transposed.
        for (var h = 0u; h < 2u; h++) {
            let i = lid + h * WG;
            let mm = i / 8u;
            let kq = i % 8u;
            let v = x_vec4(m0 + mm, k0 + kq * 4u);
            for (var c = 0u; c < 4u; c++) {
                xs[(kq * 4u + c) * 16u + mm / 4u][mm % 4u] = v[c];
            }
        }
        // Weight tile: 64 rows x 4 words, one word (8 weights) per invocation.
        {
            let nn = lid / 4u;
            let i = lid % 4u;
            let w = weight_word_scaled(n0 + nn, k0 / 8u + i);
            let lo = nibbles(w.x, 0u) * bitcast<f32>(w.y);
            let hi = nibbles(w.x, 16u) * bitcast<f32>(w.y);
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
