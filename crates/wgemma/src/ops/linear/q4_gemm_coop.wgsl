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
// Geometry: 128 invocations = 4 subgroups of 32 (the route's guard: subgroup size exactly
// 32, so subgroup s is invocations 32s..32s+31); workgroup t of ceil(n / 64) * ceil(M / 64)
// tiles, flat index wid.x + wid.y * nwg.x (the grid may be folded to 2-D), covers n-tile
// t % n_tiles and m-tile t / n_tiles. Subgroup s owns the 32 x 32 quarter (s / 2, s % 2) of
// the 64 x 64 tile: four 16 x 16 accumulators.
//
// K loop: steps of 32. The x and weight tiles of a step live in workgroup memory as f16,
// row-major with k contiguous (row stride 40: 80-byte rows keep the 16-byte alignment the
// matrix loads want and spread rows over banks), in two buffers: while the subgroups multiply
// out of one, every invocation has already fetched the next step's x and weight words from
// global memory into registers and writes them to the other after its multiply-adds, so one
// barrier a step suffices and the global loads overlap the tensor-core work.
// A (x, 16 m x 16 k) is loaded row-major (`coopLoadT`), B (W^T, 16 k x 16 n) column-major
// from the same k-contiguous weight rows. Results go through a 16 x 16 f32 staging tile per
// subgroup so that partial tiles and any y stride or offset store with plain bounds checks.

enable f16;
enable wgpu_cooperative_matrix;

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

const WG: u32 = 128u;
const BM: u32 = 64u;
const BN: u32 = 64u;
const BK: u32 = 32u;
const LDS: u32 = 40u;
// One buffer of a tile: 64 rows of LDS halves.
const TILE: u32 = 2560u;

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> packed: array<u32>;
@group(0) @binding(3) var<storage, read> scales: array<u32>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;

// Two buffers each: [2][BM][LDS] and [2][BN][LDS].
var<workgroup> xs: array<f16, 5120>;
var<workgroup> ws: array<f16, 5120>;
// Per subgroup: one 16 x 16 f32 tile (zeros for the accumulators' start, then results).
var<workgroup> cs: array<f32, 1024>;

// The next step's global data, held while the current step multiplies.
var<private> x_next: array<vec4<f32>, 4>;
var<private> w_next: array<u32, 2>;
var<private> s_next: array<f32, 2>;

fn scale_at(e: u32) -> f32 {
    let pair = unpack2x16float(scales[e >> 1u]);
    return select(pair.x, pair.y, (e & 1u) == 1u);
}

// Global loads of step k0: 64 x-rows x 8 vec4 (4 per invocation), 64 weight rows x 4 words
// (2 per invocation). Out-of-range elements read as zero.
fn fetch(lid: u32, m0: u32, n0: u32, k0: u32) {
    for (var h = 0u; h < 4u; h++) {
        let i = lid + h * WG;
        let m = m0 + i / 8u;
        let k = k0 + (i % 8u) * 4u;
        var v = vec4<f32>(0.0);
        if (m < params.m && k < params.k) {
            v = x[(m * params.k + k) / 4u];
        }
        x_next[h] = v;
    }
    let words = params.k / 8u;
    for (var h = 0u; h < 2u; h++) {
        let i = lid + h * WG;
        let n = n0 + i / 4u;
        let wi = k0 / 8u + i % 4u;
        var word = 0x88888888u;
        var sc = 0.0;
        if (n < params.n && wi < words) {
            word = packed[n * words + wi];
            sc = scale_at(n * params.groups + (wi * 8u) / GROUP);
        }
        w_next[h] = word;
        s_next[h] = sc;
    }
}

// Writes the fetched step into buffer `base` (0 or TILE) as f16.
fn stage(lid: u32, base: u32) {
    for (var h = 0u; h < 4u; h++) {
        let i = lid + h * WG;
        let at = base + (i / 8u) * LDS + (i % 8u) * 4u;
        let v = vec4<f16>(x_next[h]);
        xs[at] = v.x;
        xs[at + 1u] = v.y;
        xs[at + 2u] = v.z;
        xs[at + 3u] = v.w;
    }
    for (var h = 0u; h < 2u; h++) {
        let i = lid + h * WG;
        let at = base + (i / 4u) * LDS + (i % 4u) * 8u;
        let word = w_next[h];
        let sc = s_next[h];
        for (var c = 0u; c < 8u; c++) {
            let q = f32((word >> (4u * c)) & 15u) - 8.0;
            ws[at + c] = f16(q * sc);
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
    let sg = lid / 32u;
    let lane = lid % 32u;
    // This subgroup's quarter: rows 32 * (sg / 2), columns 32 * (sg % 2) of the tile.
    let qm = (sg / 2u) * 32u;
    let qn = (sg % 2u) * 32u;
    let cbase = sg * 256u;

    for (var e = 0u; e < 8u; e++) {
        cs[cbase + lane + e * 32u] = 0.0;
    }
    fetch(lid, m0, n0, 0u);
    stage(lid, 0u);
    workgroupBarrier();
    var c00 = coopLoad<coop_mat16x16<f32, C>>(&cs[cbase], 16u);
    var c01 = c00;
    var c10 = c00;
    var c11 = c00;

    let steps = (params.k + BK - 1u) / BK;
    for (var s = 0u; s < steps; s++) {
        let cur = (s % 2u) * TILE;
        let more = s + 1u < steps;
        if (more) {
            fetch(lid, m0, n0, (s + 1u) * BK);
        }
        for (var kk = 0u; kk < BK; kk += 16u) {
            let a0 = coopLoadT<coop_mat16x16<f16, A>>(&xs[cur + qm * LDS + kk], LDS);
            let a1 = coopLoadT<coop_mat16x16<f16, A>>(&xs[cur + (qm + 16u) * LDS + kk], LDS);
            let b0 = coopLoad<coop_mat16x16<f16, B>>(&ws[cur + qn * LDS + kk], LDS);
            let b1 = coopLoad<coop_mat16x16<f16, B>>(&ws[cur + (qn + 16u) * LDS + kk], LDS);
            c00 = coopMultiplyAdd(a0, b0, c00);
            c01 = coopMultiplyAdd(a0, b1, c01);
            c10 = coopMultiplyAdd(a1, b0, c10);
            c11 = coopMultiplyAdd(a1, b1, c11);
        }
        if (more) {
            stage(lid, TILE - cur);
        }
        workgroupBarrier();
    }

    // Each accumulator: to the staging tile (row-major), then 8 elements per lane to y.
    for (var q = 0u; q < 4u; q++) {
        switch q {
            case 0u: { coopStoreT(c00, &cs[cbase], 16u); }
            case 1u: { coopStoreT(c01, &cs[cbase], 16u); }
            case 2u: { coopStoreT(c10, &cs[cbase], 16u); }
            default: { coopStoreT(c11, &cs[cbase], 16u); }
        }
        workgroupBarrier();
        let r0 = m0 + qm + (q / 2u) * 16u;
        let c0 = n0 + qn + (q % 2u) * 16u;
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
}
