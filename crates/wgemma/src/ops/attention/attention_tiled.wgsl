// Tiled causal attention for steps of many rows (prefill chunks): flash attention in f32
// vector math. Same contract as `attention.wgsl`'s partial (scale 1.0, GQA, causal with an
// optional sliding window W: the query at position p sees keys p - W < k <= p), on a cache of
// ONE chunk and ONE sequence, keys stored (not K = V).
// Inputs: q [rows, heads, D] f32 (rows = grid y, exact), positions [rows] u32 (any order; each
// row masks its own keys), K, V cache [kv_heads, slots, D] f32 (key k in slot k % slots for a
// ring, slot k for a full cache). D = 4 * d4 with d4 = 32 * CPT, CPT in {1, 2, 4}.
//
// Entry `tiled`: grid (splits, rows, kv_heads * head_tiles). Workgroup y < T = ceil(rows / R)
// takes a tile of R = BQ / gt consecutive rows x the gt query heads of one head tile (BQ =
// 8 * QPT queries share every K and V row they load); workgroups y >= T return at once (the
// grid's y carries the row count). Tiles run latest rows (the most keys) first. A workgroup
// scans split x of the union of its rows' visible keys in blocks of BK = 32 keys:
//   S = Q K^T, Q and K staged through workgroup memory 32 floats of D at a time (each thread
//     a register tile of BQ/16 queries x 2 keys), masked per row;
//   an online-softmax update per query (one thread per query);
//   O = O * alpha + P V, O in registers (each thread QPT queries x CPT vec4 columns).
// Memory is O(BQ x D) per workgroup whatever the context: no rows x keys score matrix.
// DIRECT (one split): out = O / l. Otherwise the partials go where `attention.wgsl`'s partial
// puts them (part_acc, part_ml, part_ml[0].x = splits) for its `combine` entry.
// Workgroups of 256 threads; ~15 KB of workgroup memory (under WebGPU's default 16 KiB).

struct Params {
    heads: u32,
    kv_heads: u32,
    group: u32,
    d4: u32,
    gt: u32,
    head_tiles: u32,
    window: u32,
    slots: u32,
    ring: u32,
    chunk_start: u32,
    chunk_slots: u32,
    chunk_index: u32,
    rot_pairs: u32,
    sequences: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read_write> out: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> part_acc: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read_write> part_ml: array<vec2<f32>>;
@group(0) @binding(4) var<storage, read> positions: array<u32>;
@group(0) @binding(5) var<storage, read> q: array<vec4<f32>>;
@group(0) @binding(6) var<storage, read> k_cache: array<vec4<f32>>;
@group(0) @binding(7) var<storage, read> v_cache: array<vec4<f32>>;

const WG: u32 = 256u;
const BK: u32 = 32u; // keys per block
const DC4: u32 = 8u; // vec4s of D staged per step of S = Q K^T
const ROW4: u32 = 9u; // staged row stride in vec4s (padded: no bank conflicts)
const BQ_MAX: u32 = 64u;
const K_BASE: u32 = 576u; // BQ_MAX * ROW4: the K chunk follows the Q chunk
const PS_ROW: u32 = 33u; // score row stride in floats (padded)
const NEG: f32 = -3.0e38;

override DIRECT: bool = false;
// Queries per thread in O += P V (BQ = 8 * QPT, at most 64) and vec4 columns per thread
// (d4 / 32); QPT * CPT <= 16.
override QPT: u32 = 4u;
override CPT: u32 = 4u;

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

@compute @workgroup_size(WG)
fn tiled(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let rows = nwg.y;
    let bq = 8u * QPT;
    let gt = params.gt;
    let tile_rows = bq / gt;
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

    // Scores: thread (sk, sq) owns keys sk and sk + 16 of a block x queries sq + 16 j.
    let sk = lid % 16u;
    let sq = lid / 16u;
    let sqn = bq / 16u;
    // Output: thread (oc, ob) owns columns oc + 32 i x queries ob * QPT + j.
    let oc = lid % 32u;
    let ob = lid / 32u;
    var acc: array<vec4<f32>, 16>;
    for (var i = 0u; i < 16u; i++) {
        acc[i] = vec4<f32>(0.0);
    }

    for (var kb = span.x; kb < span.y; kb += BK) {
        let nk = min(BK, span.y - kb);
        var s: array<f32, 8>;
        for (var i = 0u; i < 8u; i++) {
            s[i] = 0.0;
        }
        for (var d0 = 0u; d0 < d4n; d0 += DC4) {
            for (var i = lid; i < bq * DC4; i += WG) {
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
                for (var j = 0u; j < sqn; j++) {
                    let qv = stage[(sq + 16u * j) * ROW4 + c];
                    s[2u * j] += dot(qv, k1);
                    s[2u * j + 1u] += dot(qv, k2);
                }
            }
            workgroupBarrier();
        }

        // Masked scores into the (now free) Q part of the stage.
        for (var j = 0u; j < sqn; j++) {
            let qi = sq + 16u * j;
            let rl = qi / gt;
            let lo = row_lo[rl];
            let hi = row_hi[rl];
            for (var t = 0u; t < 2u; t++) {
                let kj = sk + 16u * t;
                let key = kb + kj;
                let visible = kj < nk && key >= lo && key < hi;
                score_set(qi * PS_ROW + kj, select(NEG, s[2u * j + t], visible));
            }
        }
        workgroupBarrier();

        // Online softmax: one thread per query.
        if (lid < bq) {
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
        for (var j = 0u; j < QPT; j++) {
            let a = alpha[ob * QPT + j];
            for (var i = 0u; i < CPT; i++) {
                acc[j * CPT + i] *= a;
            }
        }
        for (var t = 0u; t < nk; t++) {
            let vrow = key_row(kb + t, kvh) + oc;
            var p: array<f32, 8>;
            for (var j = 0u; j < QPT; j++) {
                p[j] = score_get((ob * QPT + j) * PS_ROW + t);
            }
            for (var i = 0u; i < CPT; i++) {
                let v = v_cache[vrow + 32u * i];
                for (var j = 0u; j < QPT; j++) {
                    acc[j * CPT + i] += p[j] * v;
                }
            }
        }
        workgroupBarrier();
    }

    let qcount = rows * params.heads;
    for (var j = 0u; j < QPT; j++) {
        let qi = ob * QPT + j;
        let rl = qi / gt;
        let hl = qi % gt;
        if (rl < nr && hl < nq) {
            let query = (r0 + rl) * params.heads + h0 + hl;
            let l = l_run[qi];
            for (var i = 0u; i < CPT; i++) {
                let col = oc + 32u * i;
                if (DIRECT) {
                    out[query * d4n + col] = select(acc[j * CPT + i] / l, vec4<f32>(0.0), l == 0.0);
                } else {
                    part_acc[(wid.x * qcount + query) * d4n + col] = acc[j * CPT + i];
                }
            }
        }
    }
    if (!DIRECT) {
        let rl = lid / gt;
        let hl = lid % gt;
        if (lid < bq && rl < nr && hl < nq) {
            let query = (r0 + rl) * params.heads + h0 + hl;
            part_ml[1u + wid.x * qcount + query] = vec2<f32>(m_run[lid], l_run[lid]);
        }
        if (lid == 0u && wid.x == 0u && wid.y == 0u && wid.z == 0u) {
            part_ml[0] = vec2<f32>(f32(nwg.x), 0.0);
        }
    }
}
