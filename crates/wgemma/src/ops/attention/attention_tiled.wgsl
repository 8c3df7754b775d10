// Tiled causal attention for steps of many rows (prefill chunks): flash attention in f32
// vector math. Same contract as `attention.wgsl`'s partial (scale 1.0, GQA, causal with an
// optional sliding window W: the query at position p sees keys p - W < k <= p), on a cache of
// ONE chunk and ONE sequence, keys stored (not K = V).
// Inputs: q [rows, heads, D] f32 (rows = grid y, exact), positions [rows] u32 (any order; each
// row masks its own keys), K, V cache [kv_heads, slots, D] f32 (key k in slot k % slots for a
// ring, slot k for a full cache). D = 256 or 512.
//
// Entry `tiled`: grid (splits, rows, kv_heads * head_tiles). Workgroup y < T = ceil(rows / R)
// takes a tile of R = BQ / gt consecutive rows x the gt query heads of one head tile (BQ =
// 16384 / D queries share every K and V row they load); workgroups y >= T return at once (the
// grid's y carries the row count). Tiles run latest rows (the most keys) first. A workgroup
// scans split x of the union of its rows' visible keys in blocks of BK = 32 keys:
//   S = Q K^T, Q and K staged through workgroup memory 32 floats of D at a time (each thread
//     a register tile of BQ/16 queries x 2 keys), masked per row;
//   an online-softmax update per query (one thread per query);
//   O = O * alpha + P V, O in registers: each thread 4 queries x 4 vec4 columns (LANES =
//     D / 16 threads across the columns, WG / LANES query blocks).
// Every per-thread value is a named variable, never an array indexed in a loop: NVIDIA's
// compiler keeps such arrays in local memory (q4_gemm_f16 ran 6.8x faster without them).
// Memory is O(BQ x D) per workgroup whatever the context: no rows x keys score matrix.
// DIRECT (one split): out = O / l. Otherwise the partials go where `attention.wgsl`'s partial
// puts them (part_acc, part_ml, part_ml[0].x = splits) for its `combine` entry.
// Workgroups of 256 threads; ~15 KB of workgroup memory (under WebGPU's default 16 KiB).

#include "attention_io.wgsli"

const WG: u32 = 256u;
const BK: u32 = 32u; // keys per block
const DC4: u32 = 8u; // vec4s of D staged per step of S = Q K^T
const ROW4: u32 = 9u; // staged row stride in vec4s (padded: no bank conflicts)
const BQ_MAX: u32 = 64u;
const K_BASE: u32 = 576u; // BQ_MAX * ROW4: the K chunk follows the Q chunk
const PS_ROW: u32 = 33u; // score row stride in floats (padded)
const NEG: f32 = -3.0e38;

override DIRECT: bool = false;
// Queries per tile: 32 (D 512) or 64 (D 256); threads across an output row: D / 16.
override BQ: u32 = 32u;
override LANES: u32 = 32u;

// Q chunk [BQ][ROW4] at 0 and K chunk [BK][ROW4] at K_BASE; the scores / probabilities
// [BQ][PS_ROW] (f32) reuse the Q part once S is complete.
var<workgroup> stage: array<vec4<f32>, 864>;
var<workgroup> row_lo: array<u32, BQ_MAX>;
var<workgroup> row_hi: array<u32, BQ_MAX>;
var<workgroup> span_wg: vec2<u32>;
var<workgroup> m_run: array<f32, BQ_MAX>;
var<workgroup> l_run: array<f32, BQ_MAX>;
var<workgroup> alpha: array<f32, BQ_MAX>;

#include "attention_key_row.wgsli"

fn score_get(i: u32) -> f32 {
    return stage[i / 4u][i % 4u];
}

fn score_set(i: u32, v: f32) {
    stage[i / 4u][i % 4u] = v;
}

// Scores of query qi against keys kj and kj + 16 of the block at kb, masked by the query's
// row range and the block's nk keys.
fn store_scores(qi: u32, kj: u32, kb: u32, nk: u32, gt: u32, sa: f32, sb: f32) {
    let rl = qi / gt;
    let lo = row_lo[rl];
    let hi = row_hi[rl];
    let ka = kb + kj;
    let kc = ka + 16u;
    score_set(qi * PS_ROW + kj, select(NEG, sa, kj < nk && ka >= lo && ka < hi));
    score_set(qi * PS_ROW + kj + 16u, select(NEG, sb, kj + 16u < nk && kc >= lo && kc < hi));
}

// The tile's geometry, shared by the epilogue's writes.
struct Tile {
    r0: u32,
    nr: u32,
    h0: u32,
    nq: u32,
    gt: u32,
    rows: u32,
    split: u32,
}

// Writes output row qi of the tile, columns col + LANES i: the normalised output (DIRECT)
// or the split's partial accumulator.
fn emit(t: Tile, qi: u32, col: u32, o0: vec4<f32>, o1: vec4<f32>, o2: vec4<f32>, o3: vec4<f32>) {
    let rl = qi / t.gt;
    let hl = qi % t.gt;
    if (rl >= t.nr || hl >= t.nq) {
        return;
    }
    let query = (t.r0 + rl) * params.heads + t.h0 + hl;
    var at = query * params.d4 + col;
    if (DIRECT) {
        let l = l_run[qi];
        let inv = select(1.0 / l, 0.0, l == 0.0);
        out[at] = o0 * inv;
        out[at + LANES] = o1 * inv;
        out[at + 2u * LANES] = o2 * inv;
        out[at + 3u * LANES] = o3 * inv;
    } else {
        at += t.split * t.rows * params.heads * params.d4;
        part_acc[at] = o0;
        part_acc[at + LANES] = o1;
        part_acc[at + 2u * LANES] = o2;
        part_acc[at + 3u * LANES] = o3;
    }
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
    let d4n = params.d4;

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

    // Scores: thread (sk, sq) owns keys sk and sk + 16 of a block x queries sq + 16 j
    // (j < 2, or < 4 when BQ = 64).
    let sk = lid % 16u;
    let sq = lid / 16u;
    // Output: thread (oc, ob) owns columns oc + LANES i (i < 4) of queries 4 ob + j (j < 4).
    let oc = lid % LANES;
    let ob = lid / LANES;
    let q0 = 4u * ob;
    var a00 = vec4<f32>(0.0);
    var a01 = a00;
    var a02 = a00;
    var a03 = a00;
    var a10 = a00;
    var a11 = a00;
    var a12 = a00;
    var a13 = a00;
    var a20 = a00;
    var a21 = a00;
    var a22 = a00;
    var a23 = a00;
    var a30 = a00;
    var a31 = a00;
    var a32 = a00;
    var a33 = a00;

    for (var kb = span.x; kb < span.y; kb += BK) {
        let nk = min(BK, span.y - kb);
        var s0 = 0.0;
        var s1 = 0.0;
        var s2 = 0.0;
        var s3 = 0.0;
        var s4 = 0.0;
        var s5 = 0.0;
        var s6 = 0.0;
        var s7 = 0.0;
        for (var d0 = 0u; d0 < d4n; d0 += DC4) {
            for (var i = lid; i < BQ * DC4; i += WG) {
                let qi = i / DC4;
                let c = i % DC4;
                let rl = qi / gt;
                let hl = qi % gt;
                var v = vec4<f32>(0.0);
                if (rl < nr && hl < nq) {
                    v = q[((r0 + rl) * params.heads + h0 + hl) * d4n + d0 + c];
                }
                stage[qi * ROW4 + c] = v;
            }
            // BK * DC4 = WG: one K vec4 per thread.
            let kj = lid / DC4;
            let kc = lid % DC4;
            var kv = vec4<f32>(0.0);
            if (kj < nk) {
                kv = k_cache[key_row(kb + kj, kvh) + d0 + kc];
            }
            stage[K_BASE + kj * ROW4 + kc] = kv;
            workgroupBarrier();
            for (var c = 0u; c < DC4; c++) {
                let k1 = stage[K_BASE + sk * ROW4 + c];
                let k2 = stage[K_BASE + (sk + 16u) * ROW4 + c];
                let x0 = stage[sq * ROW4 + c];
                let x1 = stage[(sq + 16u) * ROW4 + c];
                s0 += dot(x0, k1);
                s1 += dot(x0, k2);
                s2 += dot(x1, k1);
                s3 += dot(x1, k2);
                if (BQ > 32u) {
                    let x2 = stage[(sq + 32u) * ROW4 + c];
                    let x3 = stage[(sq + 48u) * ROW4 + c];
                    s4 += dot(x2, k1);
                    s5 += dot(x2, k2);
                    s6 += dot(x3, k1);
                    s7 += dot(x3, k2);
                }
            }
            workgroupBarrier();
        }

        // Masked scores into the (now free) Q part of the stage.
        store_scores(sq, sk, kb, nk, gt, s0, s1);
        store_scores(sq + 16u, sk, kb, nk, gt, s2, s3);
        if (BQ > 32u) {
            store_scores(sq + 32u, sk, kb, nk, gt, s4, s5);
            store_scores(sq + 48u, sk, kb, nk, gt, s6, s7);
        }
        workgroupBarrier();

        // Online softmax: one thread per query.
        if (lid < BQ) {
            let row = lid * PS_ROW;
            var mx = NEG;
            for (var j = 0u; j < nk; j++) {
                mx = max(mx, score_get(row + j));
            }
            let m_old = m_run[lid];
            let m_new = max(m_old, mx);
            let a = select(exp(m_old - m_new), 0.0, m_old == NEG);
            var sum = 0.0;
            for (var j = 0u; j < nk; j++) {
                let v = score_get(row + j);
                let pj = select(exp(v - m_new), 0.0, v == NEG);
                score_set(row + j, pj);
                sum += pj;
            }
            m_run[lid] = m_new;
            l_run[lid] = l_run[lid] * a + sum;
            alpha[lid] = a;
        }
        workgroupBarrier();

        // O = O * alpha + P V.
        let al0 = alpha[q0];
        let al1 = alpha[q0 + 1u];
        let al2 = alpha[q0 + 2u];
        let al3 = alpha[q0 + 3u];
        a00 *= al0;
        a01 *= al0;
        a02 *= al0;
        a03 *= al0;
        a10 *= al1;
        a11 *= al1;
        a12 *= al1;
        a13 *= al1;
        a20 *= al2;
        a21 *= al2;
        a22 *= al2;
        a23 *= al2;
        a30 *= al3;
        a31 *= al3;
        a32 *= al3;
        a33 *= al3;
        for (var t = 0u; t < nk; t++) {
            let vrow = key_row(kb + t, kvh) + oc;
            let v0 = v_cache[vrow];
            let v1 = v_cache[vrow + LANES];
            let v2 = v_cache[vrow + 2u * LANES];
            let v3 = v_cache[vrow + 3u * LANES];
            let p0 = score_get(q0 * PS_ROW + t);
            let p1 = score_get((q0 + 1u) * PS_ROW + t);
            let p2 = score_get((q0 + 2u) * PS_ROW + t);
            let p3 = score_get((q0 + 3u) * PS_ROW + t);
            a00 += p0 * v0;
            a01 += p0 * v1;
            a02 += p0 * v2;
            a03 += p0 * v3;
            a10 += p1 * v0;
            a11 += p1 * v1;
            a12 += p1 * v2;
            a13 += p1 * v3;
            a20 += p2 * v0;
            a21 += p2 * v1;
            a22 += p2 * v2;
            a23 += p2 * v3;
            a30 += p3 * v0;
            a31 += p3 * v1;
            a32 += p3 * v2;
            a33 += p3 * v3;
        }
        workgroupBarrier();
    }

    let t = Tile(r0, nr, h0, nq, gt, rows, wid.x);
    emit(t, q0, oc, a00, a01, a02, a03);
    emit(t, q0 + 1u, oc, a10, a11, a12, a13);
    emit(t, q0 + 2u, oc, a20, a21, a22, a23);
    emit(t, q0 + 3u, oc, a30, a31, a32, a33);
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
