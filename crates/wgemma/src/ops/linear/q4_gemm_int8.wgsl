// q4_gemm_int8: y[m, y_offset + n] = sum_k x[m, k] * W[n, k] for prefill rows and one row
// chunk of a Q4 weight, on integer dot products: x arrives quantised per block of 32
// (q8_quantize_rows.wgsl: the int8 matvecs' rounding and packing), and each block of a
// (row, weight row) pair is summed exactly in i32 by 8 dot4I8Packed (dp4a on NVIDIA) of the
// weight's nibbles masked into bytes with the packed activations, as the matvecs do
// (q4_matvec_q8_accumulate.wgsli): with nibbles n (value (n - 8) s) the block's term is
//   s * (d * (f32(sum_k n_k q_k) - 8 sum_k q_k)),
// the matvecs' product order, so each block's term is theirs bit for bit; the terms are
// summed in K order (the matvecs sum lanes' strided parts, then reduce).
//
// Tiled: a workgroup computes a 64 (m) x 128 (n) output tile, stepping K by two blocks (64):
// it stages both operands' packed bytes in workgroup memory (the weight words already masked
// into bytes, 14 KiB in all, under the WebGPU default 16 KiB), then each invocation
// accumulates 4 rows (m) x 8 weight rows (n, strided by 16 so that neighbouring invocations
// read neighbouring vec4s) from 2 vec4 reads per row.
//
// Inputs: xq vec4<u32> (q8_quantize_rows.wgsl's layout: packed bytes of block b of row m at
// 2 (m * KB + b), (d, 8 sum q) pairs from d_base at d_base + (m * KBP + b) / 2; KB = K / 32,
// KBP = KB rounded up to even); packed vec4<u32> [n, K/32] (a block's 4 words, word j holds
// k = 8j + i in bits 4i..4i+3); scales f16 pairs [n * K/GROUP] (GROUP % 32 == 0: one scale
// per block). K % 32 == 0. Output y f32 [M, y_stride]. Blocks past K, rows past M or the
// chunk's rows stage zeros and are not written.
//
// Geometry: 256 invocations; workgroup t of ceil(n / 128) * ceil(M / 64) tiles, flat index
// wid.x + wid.y * nwg.x (the grid may be folded to 2-D), covers n-tile t % n_tiles and m-tile
// t / n_tiles.

struct Params {
    m: u32,
    n: u32,
    k: u32,
    groups: u32,
    y_stride: u32,
    y_offset: u32,
    // Where the (d, 8 sum q) pairs start in xq (vec4 index).
    d_base: u32,
    _pad0: u32,
}

override GROUP: u32 = 32u;

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> xq: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read> packed: array<vec4<u32>>;
@group(0) @binding(3) var<storage, read> scales: array<u32>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;

#include "q4_format.wgsli"

const WG: u32 = 256u;
const BM: u32 = 64u;
const BN: u32 = 128u;
// Blocks of 32 per step.
const BB: u32 = 2u;

// Packed activation bytes: block j, half h of tile row mm at (2 j + h) * BM + mm.
var<workgroup> xs: array<vec4<u32>, 256>;
// (d, 8 sum q) of block j of tile row mm at j * BM + mm.
var<workgroup> xd: array<vec2<f32>, 128>;
// Weight bytes: block j, half h of tile row nn at (2 j + h) * BN + nn; half 0 holds words 0
// and 1 (even k bytes, odd k bytes, ...), half 1 words 2 and 3, in the activations' order.
var<workgroup> ws: array<vec4<u32>, 512>;
// Scale of block j of tile row nn at j * BN + nn.
var<workgroup> wsc: array<f32, 256>;

const NIBBLES: u32 = 0x0F0F0F0Fu;

// One block's packed weight words as bytes: (half 0, half 1), matching the activations'
// interleaved packing (even k of word j, then its odd k).
fn weight_bytes(w: vec4<u32>) -> array<vec4<u32>, 2> {
    let lo = w & vec4<u32>(NIBBLES);
    let hi = (w >> vec4<u32>(4u)) & vec4<u32>(NIBBLES);
    return array<vec4<u32>, 2>(
        vec4<u32>(lo.x, hi.x, lo.y, hi.y),
        vec4<u32>(lo.z, hi.z, lo.w, hi.w),
    );
}

// Stages blocks b0 and b0 + 1 of the tile's activation and weight rows (b0 even).
fn stage(m0: u32, n0: u32, b0: u32, lid: u32) {
    let kb = params.k / 32u;
    // Activations: 64 rows x 2 blocks x 2 halves, one vec4 per invocation.
    {
        let mm = lid / 4u;
        let part = lid % 4u;
        let b = b0 + part / 2u;
        var v = vec4<u32>(0u);
        if (m0 + mm < params.m && b < kb) {
            v = xq[2u * ((m0 + mm) * kb + b0) + part];
        }
        xs[part * BM + mm] = v;
    }
    // Their (d, 8 sum q): one pair of blocks per row.
    if (lid < BM) {
        var d = vec4<f32>(0.0);
        if (m0 + lid < params.m) {
            let kbp = (kb + 1u) & ~1u;
            d = bitcast<vec4<f32>>(xq[params.d_base + ((m0 + lid) * kbp + b0) / 2u]);
        }
        xd[lid] = d.xy;
        xd[BM + lid] = d.zw;
    }
    // Weights: 128 rows x 2 blocks, one vec4 (a block's words) and its scale per invocation.
    {
        let nn = lid / 2u;
        let j = lid % 2u;
        let b = b0 + j;
        var w = vec4<u32>(0u);
        var s = 0.0;
        if (n0 + nn < params.n && b < kb) {
            w = packed[(n0 + nn) * kb + b];
            s = scale_at((n0 + nn) * params.groups + (32u * b) / GROUP);
        }
        let bytes = weight_bytes(w);
        ws[2u * j * BN + nn] = bytes[0];
        ws[(2u * j + 1u) * BN + nn] = bytes[1];
        wsc[j * BN + nn] = s;
    }
}

// The 8 integer dot products of one block: weight bytes (a, b) with activation bytes (p, q).
fn block_sum(a: vec4<u32>, b: vec4<u32>, p: vec4<u32>, q: vec4<u32>) -> i32 {
    return dot4I8Packed(a.x, p.x) + dot4I8Packed(a.y, p.y) + dot4I8Packed(a.z, p.z)
        + dot4I8Packed(a.w, p.w) + dot4I8Packed(b.x, q.x) + dot4I8Packed(b.y, q.y)
        + dot4I8Packed(b.z, q.z) + dot4I8Packed(b.w, q.w);
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
    // acc[j][i]: row m0 + 4 tm + i, weight row n0 + tn + 16 j.
    var acc: array<vec4<f32>, 8>;
    let kb = params.k / 32u;

    for (var b0 = 0u; b0 < kb; b0 += BB) {
        stage(m0, n0, b0, lid);
        workgroupBarrier();
        for (var j = 0u; j < BB; j++) {
            let r = 4u * tm;
            let p0 = xs[2u * j * BM + r];
            let p1 = xs[2u * j * BM + r + 1u];
            let p2 = xs[2u * j * BM + r + 2u];
            let p3 = xs[2u * j * BM + r + 3u];
            let q0 = xs[(2u * j + 1u) * BM + r];
            let q1 = xs[(2u * j + 1u) * BM + r + 1u];
            let q2 = xs[(2u * j + 1u) * BM + r + 2u];
            let q3 = xs[(2u * j + 1u) * BM + r + 3u];
            let e0 = xd[j * BM + r];
            let e1 = xd[j * BM + r + 1u];
            let e2 = xd[j * BM + r + 2u];
            let e3 = xd[j * BM + r + 3u];
            let d = vec4<f32>(e0.x, e1.x, e2.x, e3.x);
            let offset = vec4<f32>(e0.y, e1.y, e2.y, e3.y);
            for (var c = 0u; c < 8u; c++) {
                let nn = tn + 16u * c;
                let a = ws[2u * j * BN + nn];
                let b = ws[(2u * j + 1u) * BN + nn];
                let s = vec4<i32>(
                    block_sum(a, b, p0, q0),
                    block_sum(a, b, p1, q1),
                    block_sum(a, b, p2, q2),
                    block_sum(a, b, p3, q3),
                );
                acc[c] += wsc[j * BN + nn] * (d * (vec4<f32>(s) - offset));
            }
        }
        workgroupBarrier();
    }

    for (var c = 0u; c < 8u; c++) {
        let n = n0 + tn + 16u * c;
        for (var i = 0u; i < 4u; i++) {
            let m = m0 + 4u * tm + i;
            if (m < params.m && n < params.n) {
                y[m * params.y_stride + params.y_offset + n] = acc[c][i];
            }
        }
    }
}
