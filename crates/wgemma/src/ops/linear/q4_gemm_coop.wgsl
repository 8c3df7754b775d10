// q4_gemm_coop: y[m, y_offset + n] = sum_k x[m, k] * W[n, k] on the tensor cores, for prefill
// rows and one row chunk of a Q4 weight. Cooperative matrices 16x16x16 with f16 A and B and an
// f32 accumulator (`coop_mat16x16`): x is rounded to f16, each weight to f16 after its
// dequantisation ((nibble - 8) * scale, rounded once), products and sums are f32.
//
// Inputs: x f32 [M, K] (K % 8 == 0, read as vec4); packed u32 [n, K/8] (word w of a row
// holds k = 8w + i in bits 4i..4i+3); scales f16 pairs [n * K/GROUP] (GROUP % 8 == 0, one
// scale per word). Output y f32 [M, y_stride]. K tails (K % 32 != 0) and partial tiles read
// zeros and are not written.
//
// Geometry: 256 invocations = 8 subgroups of 32 (the route's guard: subgroup size exactly
// 32, so subgroup s is invocations 32s..32s+31); workgroup t of ceil(n / 128) * ceil(M / 128)
// tiles, flat index wid.x + wid.y * nwg.x (the grid may be folded to 2-D), covers n-tile
// t % n_tiles and m-tile t / n_tiles. Subgroup s owns the 32 (m) x 64 (n) block
// (s % 4, s / 4) of the 128 x 128 tile: eight 16 x 16 accumulators, fed per 16 k by two A
// and four B fragments (6 fragment loads for 8 multiply-adds).
//
// K loop: steps of 32. The x and weight tiles of a step live in workgroup memory as
// vec4<f16>, row-major with k contiguous (row stride 10 vec4 = 40 halves: 80-byte rows keep
// the 16-byte alignment the matrix loads want and spread rows over banks; the matrix loads
// count their stride in vec4 units, the pointer's type), in two buffers: while the subgroups
// multiply out of one, every invocation has already fetched the next step's x and weight
// words from global memory into registers and writes them to the other after its
// multiply-adds, so one barrier a step suffices and the global loads overlap the tensor-core
// work. A (x, 16 m x 16 k) is loaded row-major (`coopLoadT`), B (W^T, 16 k x 16 n)
// column-major from the same k-contiguous weight rows. Results go through a 16 x 16 f32
// staging tile per subgroup so that partial tiles and any y stride or offset store with plain
// bounds checks. Workgroup memory: 2 x 2 x 10 KiB of tiles + 8 KiB of staging = 48 KiB.

enable f16;
enable wgpu_cooperative_matrix;

#include "q4_gemm_io.wgsli"

const WG: u32 = 256u;
const BM: u32 = 128u;
const BN: u32 = 128u;
const BK: u32 = 32u;
// Row stride of a staged tile, in vec4<f16>.
const LDV: u32 = 10u;
// One buffer of a tile: 128 rows of LDV vec4s.
const TILE: u32 = 1280u;

// Two buffers each: [2][BM][LDV] and [2][BN][LDV].
var<workgroup> xs: array<vec4<f16>, 2560>;
var<workgroup> ws: array<vec4<f16>, 2560>;
// Per subgroup: one 16 x 16 f32 tile (zeros for the accumulators' start, then results).
var<workgroup> cs: array<f32, 2048>;

// The next step's global data, held while the current step multiplies (named, not arrays:
// nothing here may be indexed at run time and pushed out of registers).
var<private> x0: vec4<f32>;
var<private> x1: vec4<f32>;
var<private> x2: vec4<f32>;
var<private> x3: vec4<f32>;
var<private> w0: vec2<u32>;
var<private> w1: vec2<u32>;

// x vec4 i of step k0's tile (row i / 8, k k0 + 4 (i % 8)); zero out of range.
fn load_x(i: u32, m0: u32, k0: u32) -> vec4<f32> {
    let m = m0 + i / 8u;
    let k = k0 + (i % 8u) * 4u;
    if (m < params.m && k < params.k) {
        return x[(m * params.k + k) / 4u];
    }
    return vec4<f32>(0.0);
}

// Weight word i of step k0's tile (row i / 4, word i % 4) and its scale (bitcast); a zero
// weight out of range.
fn load_w(i: u32, n0: u32, k0: u32) -> vec2<u32> {
    let words = params.k / 8u;
    let n = n0 + i / 4u;
    let wi = k0 / 8u + i % 4u;
    if (n < params.n && wi < words) {
        let sc = scale_at(n * params.groups + (wi * 8u) / GROUP);
        return vec2<u32>(packed[n * words + wi], bitcast<u32>(sc));
    }
    return vec2<u32>(0x88888888u, 0u);
}

// Global loads of step k0: 128 x-rows x 8 vec4 (4 per invocation), 128 weight rows x 4
// words (2 per invocation).
fn fetch(lid: u32, m0: u32, n0: u32, k0: u32) {
    x0 = load_x(lid, m0, k0);
    x1 = load_x(lid + WG, m0, k0);
    x2 = load_x(lid + 2u * WG, m0, k0);
    x3 = load_x(lid + 3u * WG, m0, k0);
    w0 = load_w(lid, n0, k0);
    w1 = load_w(lid + WG, n0, k0);
}

fn stage_x(i: u32, base: u32, v: vec4<f32>) {
    xs[base + (i / 8u) * LDV + i % 8u] = vec4<f16>(v);
}

// Eight weights, dequantised and rounded to f16.
fn stage_w(i: u32, base: u32, w: vec2<u32>) {
    let at = base + (i / 4u) * LDV + (i % 4u) * 2u;
    let sc = bitcast<f32>(w.y);
    ws[at] = vec4<f16>(nibbles(w.x, 0u) * sc);
    ws[at + 1u] = vec4<f16>(nibbles(w.x, 16u) * sc);
}

// Writes the fetched step into buffer `base` (0 or TILE) as f16.
fn stage(lid: u32, base: u32) {
    stage_x(lid, base, x0);
    stage_x(lid + WG, base, x1);
    stage_x(lid + 2u * WG, base, x2);
    stage_x(lid + 3u * WG, base, x3);
    stage_w(lid, base, w0);
    stage_w(lid + WG, base, w1);
}

// The subgroup's staging tile (just stored, row-major) to y rows r0.., columns c0... Called
// by every invocation in the same order (barriers inside).
fn flush(cbase: u32, lane: u32, r0: u32, c0: u32) {
    workgroupBarrier();
    for (var e = 0u; e < 8u; e++) {
        let i = lane + e * 32u;
        let m = r0 + i / 16u;
        let n = c0 + i % 16u;
        if (m < params.m && n < params.n) {
            y[m * params.y_stride + params.y_offset + n] = cs[cbase + i];
        }
    }
    workgroupBarrier();
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
    let sg = lid / 32u;
    let lane = lid % 32u;
    // This subgroup's block: rows qm..qm+31, columns qn..qn+63 of the tile.
    let qm = (sg % 4u) * 32u;
    let qn = (sg / 4u) * 64u;
    let cbase = sg * 256u;

    for (var e = 0u; e < 8u; e++) {
        cs[cbase + lane + e * 32u] = 0.0;
    }
    fetch(lid, m0, n0, 0u);
    stage(lid, 0u);
    workgroupBarrier();
    var c00 = coopLoad<coop_mat16x16<f32, C>>(&cs[cbase], 16u);
    var c01 = c00;
    var c02 = c00;
    var c03 = c00;
    var c10 = c00;
    var c11 = c00;
    var c12 = c00;
    var c13 = c00;

    let steps = (params.k + BK - 1u) / BK;
    for (var s = 0u; s < steps; s++) {
        let cur = (s % 2u) * TILE;
        let more = s + 1u < steps;
        if (more) {
            fetch(lid, m0, n0, (s + 1u) * BK);
        }
        for (var kv = 0u; kv < BK / 4u; kv += 4u) {
            let a0 = coopLoadT<coop_mat16x16<f16, A>>(&xs[cur + qm * LDV + kv], LDV);
            let a1 = coopLoadT<coop_mat16x16<f16, A>>(&xs[cur + (qm + 16u) * LDV + kv], LDV);
            let b0 = coopLoad<coop_mat16x16<f16, B>>(&ws[cur + qn * LDV + kv], LDV);
            let b1 = coopLoad<coop_mat16x16<f16, B>>(&ws[cur + (qn + 16u) * LDV + kv], LDV);
            let b2 = coopLoad<coop_mat16x16<f16, B>>(&ws[cur + (qn + 32u) * LDV + kv], LDV);
            let b3 = coopLoad<coop_mat16x16<f16, B>>(&ws[cur + (qn + 48u) * LDV + kv], LDV);
            c00 = coopMultiplyAdd(a0, b0, c00);
            c01 = coopMultiplyAdd(a0, b1, c01);
            c02 = coopMultiplyAdd(a0, b2, c02);
            c03 = coopMultiplyAdd(a0, b3, c03);
            c10 = coopMultiplyAdd(a1, b0, c10);
            c11 = coopMultiplyAdd(a1, b1, c11);
            c12 = coopMultiplyAdd(a1, b2, c12);
            c13 = coopMultiplyAdd(a1, b3, c13);
        }
        if (more) {
            stage(lid, TILE - cur);
        }
        workgroupBarrier();
    }

    let r0 = m0 + qm;
    let r1 = r0 + 16u;
    let c0 = n0 + qn;
    coopStoreT(c00, &cs[cbase], 16u);
    flush(cbase, lane, r0, c0);
    coopStoreT(c01, &cs[cbase], 16u);
    flush(cbase, lane, r0, c0 + 16u);
    coopStoreT(c02, &cs[cbase], 16u);
    flush(cbase, lane, r0, c0 + 32u);
    coopStoreT(c03, &cs[cbase], 16u);
    flush(cbase, lane, r0, c0 + 48u);
    coopStoreT(c10, &cs[cbase], 16u);
    flush(cbase, lane, r1, c0);
    coopStoreT(c11, &cs[cbase], 16u);
    flush(cbase, lane, r1, c0 + 16u);
    coopStoreT(c12, &cs[cbase], 16u);
    flush(cbase, lane, r1, c0 + 32u);
    coopStoreT(c13, &cs[cbase], 16u);
    flush(cbase, lane, r1, c0 + 48u);
}
