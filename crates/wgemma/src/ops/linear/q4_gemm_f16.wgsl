// q4_gemm_f16: y[m, y_offset + n] = sum_k x[m, k] * W[n, k] for prefill rows and one row chunk
// of a Q4 weight, on the vector units of a device with shader-f16 (no tensor cores needed:
// browsers, lavapipe). The weight tile lives in workgroup memory as f16 holding the exact
// nibble values (nibble - 8, integers in [-8, 7]), half the bytes of f32, and each weight's
// scale is applied once per step to the step's partial sums: with GROUP % 32 == 0 a step of
// 32 k lies in one group. So the numbers are those of the f32 route (x stays f32, no weight
// is rounded), while the f16 tile buys a 64 x 128 output tile in 16 KiB (WebGPU's default)
// and 4 x 8 outputs per invocation: per k, one vec4 of x and two of W feed 32 FMAs.
//
// Inputs: x f32 [M, K] (K % 8 == 0, read as vec4); packed u32 [n, K/8] (word w of a row
// holds k = 8w + i in bits 4i..4i+3); scales f16 pairs [n * K/GROUP] (GROUP % 32 == 0).
// Output y f32 [M, y_stride]. Partial tiles read zeros and are not written.
//
// Geometry: 256 invocations; workgroup t of ceil(n / 128) * ceil(M / 64) tiles, flat index
// wid.x + wid.y * nwg.x (the grid may be folded to 2-D), covers n-tile t % n_tiles and
// m-tile t / n_tiles. Invocation (tm, tn) = (lid / 16, lid % 16) owns rows 4 tm..4 tm + 3
// and columns 4 tn..4 tn + 3 and 64 + 4 tn..64 + 4 tn + 3 (two column groups 64 apart, so
// neighbouring invocations read neighbouring vec4s).

enable f16;

#include "q4_gemm_io.wgsli"

const WG: u32 = 256u;
const BM: u32 = 64u;
const BN: u32 = 128u;
const BK: u32 = 32u;

// k-major: element (k, m) is xs[k * 16 + m / 4][m % 4]; (k, n) is ws[k * 32 + n / 4][n % 4].
var<workgroup> xs: array<vec4<f32>, 512>;
var<workgroup> ws: array<vec4<f16>, 1024>;

// The scales of columns n..n+3 in group g (zero past the chunk's rows).
fn scales4(n: u32, g: u32) -> vec4<f32> {
    var s = vec4<f32>(0.0);
    for (var j = 0u; j < 4u; j++) {
        if (n + j < params.n) {
            s[j] = scale_at((n + j) * params.groups + g);
        }
    }
    return s;
}

// y[m, n..n+3] = v where in range.
fn put(m: u32, n: u32, v: vec4<f32>) {
    if (m >= params.m) {
        return;
    }
    for (var j = 0u; j < 4u; j++) {
        if (n + j < params.n) {
            y[m * params.y_stride + params.y_offset + n + j] = v[j];
        }
    }
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
    let tn = lid % 16u;
    let tm = lid / 16u;
    // Accumulators as named vectors (never indexed at run time, so they stay in
    // registers): a* for columns 4 tn.., b* for 64 + 4 tn.., one per row 4 tm + i.
    var a0 = vec4<f32>(0.0);
    var a1 = vec4<f32>(0.0);
    var a2 = vec4<f32>(0.0);
    var a3 = vec4<f32>(0.0);
    var b0 = vec4<f32>(0.0);
    var b1 = vec4<f32>(0.0);
    var b2 = vec4<f32>(0.0);
    var b3 = vec4<f32>(0.0);

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
        // Weight tile: 128 rows x 4 words, two words (16 weights) per invocation.
        for (var h = 0u; h < 2u; h++) {
            let i = lid + h * WG;
            let nn = i / 4u;
            let wq = i % 4u;
            let word = weight_word(n0 + nn, k0 / 8u + wq);
            let lo = vec4<f16>(nibbles(word, 0u));
            let hi = vec4<f16>(nibbles(word, 16u));
            for (var c = 0u; c < 4u; c++) {
                ws[(wq * 8u + c) * 32u + nn / 4u][nn % 4u] = lo[c];
                ws[(wq * 8u + 4u + c) * 32u + nn / 4u][nn % 4u] = hi[c];
            }
        }
        // This step's group: its scales for my 8 columns (read while the tiles fill).
        let g = k0 / GROUP;
        let s0 = scales4(n0 + tn * 4u, g);
        let s1 = scales4(n0 + 64u + tn * 4u, g);
        workgroupBarrier();
        var p0 = vec4<f32>(0.0);
        var p1 = vec4<f32>(0.0);
        var p2 = vec4<f32>(0.0);
        var p3 = vec4<f32>(0.0);
        var q0 = vec4<f32>(0.0);
        var q1 = vec4<f32>(0.0);
        var q2 = vec4<f32>(0.0);
        var q3 = vec4<f32>(0.0);
        for (var kk = 0u; kk < BK; kk++) {
            let a = xs[kk * 16u + tm];
            let w0 = vec4<f32>(ws[kk * 32u + tn]);
            let w1 = vec4<f32>(ws[kk * 32u + 16u + tn]);
            p0 += a.x * w0;
            p1 += a.y * w0;
            p2 += a.z * w0;
            p3 += a.w * w0;
            q0 += a.x * w1;
            q1 += a.y * w1;
            q2 += a.z * w1;
            q3 += a.w * w1;
        }
        a0 += p0 * s0;
        a1 += p1 * s0;
        a2 += p2 * s0;
        a3 += p3 * s0;
        b0 += q0 * s1;
        b1 += q1 * s1;
        b2 += q2 * s1;
        b3 += q3 * s1;
        workgroupBarrier();
    }

    let m = m0 + tm * 4u;
    let na = n0 + tn * 4u;
    let nb = na + 64u;
    put(m, na, a0);
    put(m + 1u, na, a1);
    put(m + 2u, na, a2);
    put(m + 3u, na, a3);
    put(m, nb, b0);
    put(m + 1u, nb, b1);
    put(m + 2u, nb, b2);
    put(m + 3u, nb, b3);
}
