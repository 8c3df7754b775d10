// Tiled causal attention for prefill chunks on the tensor cores: attention_tiled.wgsl's
// contract, grid, tiles, key spans and outputs (DIRECT: out = O / l; else the split's
// partials and (m, l) for `attention.wgsl`'s combine), with S = Q K^T and O = P V as 16x16x16
// cooperative matrices (f16 A and B, f32 accumulators; `coop_mat16x16`). Taken instead of
// the f32 kernel where the adapter offers them and subgroups are exactly 32 wide (tiled.rs).
//
// Numbers: Q, K, V and P are rounded to f16 when staged; scores, sums and O are f32.
//
// Softmax in two passes over the workgroup's key span, so that O never needs rescaling (a
// cooperative matrix cannot be scaled per row): pass 1 computes S block by block and keeps
// each query's running max m; pass 2 recomputes S, P = e^(S - m) (masked: 0), l = sum P
// (of the f16-rounded P the matrices use) and O += P V. S costs twice, P V once.
//
// Geometry: 256 invocations = 8 subgroups of 32 (subgroup s = invocations 32s..32s+31).
// Tile: BQ queries (64 for D = 256, 32 for D = 512) x keys in blocks of BK = 32.
//   S (BQ x 32): for BQ = 64 eight 16 x 16 tiles, subgroup s owns (s % 4, s / 4); for
//     BQ = 32 four tiles and subgroups s and s + 4 compute the same one (same values, same
//     stores: keeps every matrix op in uniform control flow). Q and K are staged 64 of D at
//     a time as f16 (row stride LDS vec4<f16>: 16-byte aligned rows).
//   O (BQ x D): subgroup s owns query tile s % QT (QT = BQ / 16) and D columns
//     (s / QT) * 128.. +128: eight 16 x 16 accumulators; V of a block is staged whole as f16
//     over the Q/K stage (row stride D / 4 + 2 vec4<f16>).
// Workgroup memory: stage 4160 vec4<f16> (33,280 B), scores 2304 f32 (9,216 B, also the
// epilogue's 8 x 16 x 16 staging), P 640 vec4<f16> (5,120 B), rows 4 x 64 x 4 B, span:
// 48,648 B (the tensor-core devices' 48 KiB).

enable f16;
enable wgpu_cooperative_matrix;

#include "attention_io.wgsli"

const WG: u32 = 256u;
const BK: u32 = 32u; // keys per block
const DCH4: u32 = 16u; // vec4s of D staged per step of S (64 values)
const LDS: u32 = 18u; // Q / K stage row stride, vec4<f16>
const K_BASE: u32 = 1152u; // 64 * LDS: the K chunk follows the Q chunk
const SC_ROW: u32 = 36u; // score row stride, f32
const LDP: u32 = 10u; // P row stride, vec4<f16> (32 keys + padding)
const BQ_MAX: u32 = 64u;
const NEG: f32 = -3.0e38;

override DIRECT: bool = false;
override BQ: u32 = 32u;

var<workgroup> stage: array<vec4<f16>, 4160>;
var<workgroup> sc: array<f32, 2304>;
var<workgroup> pm: array<vec4<f16>, 640>;
var<workgroup> row_lo: array<u32, BQ_MAX>;
var<workgroup> row_hi: array<u32, BQ_MAX>;
var<workgroup> m_run: array<f32, BQ_MAX>;
var<workgroup> l_run: array<f32, BQ_MAX>;
var<workgroup> span_wg: vec2<u32>;

#include "attention_key_row.wgsli"

// The tile's geometry.
struct Tile {
    r0: u32,
    nr: u32,
    h0: u32,
    nq: u32,
    gt: u32,
    rows: u32,
    split: u32,
    kvh: u32,
}

// The q vec4 of tile query qi at vec4 column c (zero past the tile).
fn q_at(t: Tile, qi: u32, c: u32) -> vec4<f32> {
    let rl = qi / t.gt;
    let hl = qi % t.gt;
    if (rl < t.nr && hl < t.nq) {
        return q[((t.r0 + rl) * params.heads + t.h0 + hl) * params.d4 + c];
    }
    return vec4<f32>(0.0);
}

// S = Q K^T of the block at kb (nk keys) into sc (unmasked; rows >= BQ unused). Every
// invocation calls it (barriers inside).
fn scores(t: Tile, lid: u32, kb: u32, nk: u32) {
    let sg = lid / 32u;
    let qt = sg % (BQ / 16u);
    let kt = (sg / (BQ / 16u)) % 2u;
    // Zeros to start the accumulator from (the sc rows are free here).
    sc[lid] = 0.0;
    workgroupBarrier();
    var s = coopLoad<coop_mat16x16<f32, C>>(&sc[0], 16u);
    workgroupBarrier();
    for (var d0 = 0u; d0 < params.d4; d0 += DCH4) {
        for (var i = lid; i < BQ * DCH4; i += WG) {
            let qi = i / DCH4;
            let c = i % DCH4;
            stage[qi * LDS + c] = vec4<f16>(q_at(t, qi, d0 + c));
        }
        for (var i = lid; i < BK * DCH4; i += WG) {
            let kj = i / DCH4;
            let c = i % DCH4;
            var v = vec4<f32>(0.0);
            if (kj < nk) {
                v = k_cache[key_row(kb + kj, t.kvh) + d0 + c];
            }
            stage[K_BASE + kj * LDS + c] = vec4<f16>(v);
        }
        workgroupBarrier();
        for (var kk = 0u; kk < DCH4; kk += 4u) {
            let a = coopLoadT<coop_mat16x16<f16, A>>(&stage[qt * 16u * LDS + kk], LDS);
            let b = coopLoad<coop_mat16x16<f16, B>>(&stage[K_BASE + kt * 16u * LDS + kk], LDS);
            s = coopMultiplyAdd(a, b, s);
        }
        workgroupBarrier();
    }
    coopStoreT(s, &sc[qt * 16u * SC_ROW + kt * 16u], SC_ROW);
    workgroupBarrier();
}

// Score of tile query qi and block key j, masked by the query's row range and the block.
fn masked(qi: u32, j: u32, kb: u32, nk: u32, gt: u32) -> f32 {
    let rl = qi / gt;
    let key = kb + j;
    let seen = j < nk && key >= row_lo[rl] && key < row_hi[rl];
    return select(NEG, sc[qi * SC_ROW + j], seen);
}

// e^(s - m) rounded to f16 (0 for a masked score).
fn prob(s: f32, m: f32) -> f16 {
    return f16(select(exp(s - m), 0.0, s == NEG));
}

// Writes accumulator block (query tile oq, vec4 column c0) from the subgroup's staging at
// sc[base..base + 256] (just stored, row-major): out / l (DIRECT) or the split's partial.
fn emit(t: Tile, lane: u32, base: u32, oq: u32, c0: u32) {
    workgroupBarrier();
    for (var e = 0u; e < 2u; e++) {
        let i = lane + e * 32u;
        let r = i / 4u;
        let c4 = i % 4u;
        let at = base + r * 16u + c4 * 4u;
        let v = vec4<f32>(sc[at], sc[at + 1u], sc[at + 2u], sc[at + 3u]);
        let qi = oq * 16u + r;
        let rl = qi / t.gt;
        let hl = qi % t.gt;
        if (rl < t.nr && hl < t.nq) {
            let query = (t.r0 + rl) * params.heads + t.h0 + hl;
            let col = query * params.d4 + c0 + c4;
            if (DIRECT) {
                let l = l_run[qi];
                out[col] = v * select(1.0 / l, 0.0, l == 0.0);
            } else {
                part_acc[t.split * t.rows * params.heads * params.d4 + col] = v;
            }
        }
    }
    workgroupBarrier();
}

@compute @workgroup_size(WG)
fn tiled(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let rows = nwg.y;
    let gt = params.gt;
    let tile_rows = BQ / gt;
    let tiles = (rows + tile_rows - 1u) / tile_rows;
    if (wid.y >= tiles) {
        return;
    }
    let r0 = (tiles - 1u - wid.y) * tile_rows;
    let nr = min(tile_rows, rows - r0);
    let kvh = wid.z / params.head_tiles;
    let head_tile = wid.z % params.head_tiles;
    let h0 = kvh * params.group + head_tile * gt;
    let nq = min(gt, params.group - head_tile * gt);
    let t = Tile(r0, nr, h0, nq, gt, rows, wid.x, kvh);

    if (lid < BQ_MAX) {
        m_run[lid] = NEG;
        l_run[lid] = 0.0;
        // Rows past the tile see nothing: [0, 0).
        var lo = 0u;
        var hi = 0u;
        if (lid < nr) {
            let p = positions[r0 + lid];
            if (params.window != 0u && p + 1u > params.window) {
                lo = p + 1u - params.window;
            }
            hi = p + 1u;
        }
        row_lo[lid] = lo;
        row_hi[lid] = hi;
    }
    workgroupBarrier();
    if (lid == 0u) {
        var lo = row_lo[0];
        var hi = row_hi[0];
        for (var i = 1u; i < nr; i++) {
            lo = min(lo, row_lo[i]);
            hi = max(hi, row_hi[i]);
        }
        let per = ((hi - lo + nwg.x - 1u) / nwg.x + BK - 1u) / BK * BK;
        let k0 = min(lo + wid.x * per, hi);
        span_wg = vec2<u32>(k0, min(k0 + per, hi));
    }
    let span = workgroupUniformLoad(&span_wg);

    // Pass 1: each query's max over the span.
    for (var kb = span.x; kb < span.y; kb += BK) {
        let nk = min(BK, span.y - kb);
        scores(t, lid, kb, nk);
        if (lid < BQ) {
            var mx = m_run[lid];
            for (var j = 0u; j < nk; j++) {
                mx = max(mx, masked(lid, j, kb, nk, gt));
            }
            m_run[lid] = mx;
        }
        workgroupBarrier();
    }

    // Pass 2: P, l and O = P V.
    let sg = lid / 32u;
    let lane = lid % 32u;
    let oq = sg % (BQ / 16u);
    // This subgroup's first output column, in vec4s (128 columns each).
    let c0 = (sg / (BQ / 16u)) * 32u;
    let ldv = params.d4 + 2u;
    sc[lid] = 0.0;
    workgroupBarrier();
    var o0 = coopLoad<coop_mat16x16<f32, C>>(&sc[0], 16u);
    var o1 = o0;
    var o2 = o0;
    var o3 = o0;
    var o4 = o0;
    var o5 = o0;
    var o6 = o0;
    var o7 = o0;
    workgroupBarrier();
    for (var kb = span.x; kb < span.y; kb += BK) {
        let nk = min(BK, span.y - kb);
        scores(t, lid, kb, nk);
        if (lid < BQ) {
            let m = m_run[lid];
            var l = l_run[lid];
            for (var j = 0u; j < BK; j += 4u) {
                let p = vec4<f16>(
                    prob(masked(lid, j, kb, nk, gt), m),
                    prob(masked(lid, j + 1u, kb, nk, gt), m),
                    prob(masked(lid, j + 2u, kb, nk, gt), m),
                    prob(masked(lid, j + 3u, kb, nk, gt), m),
                );
                let pf = vec4<f32>(p);
                l += pf.x + pf.y + pf.z + pf.w;
                pm[lid * LDP + j / 4u] = p;
            }
            l_run[lid] = l;
        }
        // V of the block over the (free) Q/K stage; keys past nk are zeros (P is 0 there,
        // but 0 * garbage could be NaN).
        for (var i = lid; i < BK * params.d4; i += WG) {
            let kj = i / params.d4;
            let c = i % params.d4;
            var v = vec4<f32>(0.0);
            if (kj < nk) {
                v = v_cache[key_row(kb + kj, kvh) + c];
            }
            stage[kj * ldv + c] = vec4<f16>(v);
        }
        workgroupBarrier();
        for (var kk = 0u; kk < BK / 16u; kk++) {
            let a = coopLoadT<coop_mat16x16<f16, A>>(&pm[oq * 16u * LDP + kk * 4u], LDP);
            let vb = kk * 16u * ldv + c0;
            o0 = coopMultiplyAdd(a, coopLoadT<coop_mat16x16<f16, B>>(&stage[vb], ldv), o0);
            o1 = coopMultiplyAdd(a, coopLoadT<coop_mat16x16<f16, B>>(&stage[vb + 4u], ldv), o1);
            o2 = coopMultiplyAdd(a, coopLoadT<coop_mat16x16<f16, B>>(&stage[vb + 8u], ldv), o2);
            o3 = coopMultiplyAdd(a, coopLoadT<coop_mat16x16<f16, B>>(&stage[vb + 12u], ldv), o3);
            o4 = coopMultiplyAdd(a, coopLoadT<coop_mat16x16<f16, B>>(&stage[vb + 16u], ldv), o4);
            o5 = coopMultiplyAdd(a, coopLoadT<coop_mat16x16<f16, B>>(&stage[vb + 20u], ldv), o5);
            o6 = coopMultiplyAdd(a, coopLoadT<coop_mat16x16<f16, B>>(&stage[vb + 24u], ldv), o6);
            o7 = coopMultiplyAdd(a, coopLoadT<coop_mat16x16<f16, B>>(&stage[vb + 28u], ldv), o7);
        }
        workgroupBarrier();
    }

    // O through the subgroup's 16 x 16 staging in sc (free: the last barrier passed).
    let base = sg * 256u;
    coopStoreT(o0, &sc[base], 16u);
    emit(t, lane, base, oq, c0);
    coopStoreT(o1, &sc[base], 16u);
    emit(t, lane, base, oq, c0 + 4u);
    coopStoreT(o2, &sc[base], 16u);
    emit(t, lane, base, oq, c0 + 8u);
    coopStoreT(o3, &sc[base], 16u);
    emit(t, lane, base, oq, c0 + 12u);
    coopStoreT(o4, &sc[base], 16u);
    emit(t, lane, base, oq, c0 + 16u);
    coopStoreT(o5, &sc[base], 16u);
    emit(t, lane, base, oq, c0 + 20u);
    coopStoreT(o6, &sc[base], 16u);
    emit(t, lane, base, oq, c0 + 24u);
    coopStoreT(o7, &sc[base], 16u);
    emit(t, lane, base, oq, c0 + 28u);
    if (!DIRECT) {
        let rl = lid / gt;
        let hl = lid % gt;
        if (lid < BQ && rl < nr && hl < nq) {
            let query = (r0 + rl) * params.heads + h0 + hl;
            part_ml[1u + wid.x * rows * params.heads + query] = vec2<f32>(m_run[lid], l_run[lid]);
        }
        if (lid == 0u && wid.x == 0u && wid.y == 0u && wid.z == 0u) {
            part_ml[0] = vec2<f32>(f32(nwg.x), 0.0);
        }
    }
}
