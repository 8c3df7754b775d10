// attention_decode_latency: the decode route's kernels shaped for latency (same contract,
// bindings, grids and partial layout as attention_decode.wgsl, whose header states them).
// A decode step reads a few hundred keys per layer: its time is the chain of dependent
// memory round trips and workgroup barriers of each workgroup, not its bytes. So each
// workgroup takes its split in tiles of KS = 2048 / D4 keys (the planner gives each split
// one tile where it can) and, per tile, issues every load of the tile (the keys, the
// values) before any math, and synchronises twice per tile; nothing after the tiles
// (attention_decode.wgsl: 6 barriers per tile of 128-256 keys, 9 more to finish).
//
// Built only with uniform subgroups of SG lanes, 8 <= SG <= D4, SG a multiple of
// LPK = D4 / 8, D4 in 32..=128 (head_dim 128..=512), and SG <= D4 / 2 with FOLD_Q; the host
// checks (decode.rs, `latency_lanes`).
//
// Entry `partial`, workgroup (s, r, z) as in attention_decode.wgsl. The tile's 8 query
// heads are staged once in workgroup memory (with FOLD_Q normed and rotated on the way:
// each thread owns whole rotate_half pairs). Per tile:
//   scores: thread role = (key j, part) with LPK lanes per key, j = role / LPK; the lane
//     holds columns part + i * LPK (i < 8) of key j and dots them with the 8 heads; the LPK
//     lanes of a key sum their dots with subgroup shuffles. With K = V caches the key is
//     rebuilt from V: column i's rotate_half partner is column i + 4 of the same lane.
//   softmax: the tile's max per head (a butterfly over the subgroup's keys, then across
//     subgroups: barrier 1), running max m, rescale alpha, P = exp(s - m) to workgroup
//     memory and the tile's sum of P per head (the same way: barrier 2).
//   values: thread role = (column c, key group g), g = role % KP, KP = 256 / D4, keys
//     g + i * KP (i < 8): acc_h = acc_h * alpha_h + sum P[j, h] V[j, c], in registers.
// Then each column's KP groups (adjacent lanes) add their acc with shuffles and group 0
// writes attention_decode.wgsl's partial (or, DIRECT, the output).
// Entry `combine`, workgroup (c, h, r) as in attention_decode.wgsl: columns [8c, 8c + 8) of
// query (r, h); 32 groups x 8 columns; each group merges its splits online (4 loads in
// flight at a time), then the groups' (max, sum, acc) are merged across lanes and
// subgroups with 2 barriers.

#include "attention_decode_inputs.wgsli"
#include "attention_decode_outputs.wgsli"

const WG: u32 = 256u;
const NEG: f32 = -3.0e38;
const MAX_SPLITS: u32 = 512u;

override D4: u32 = 64u;
override QT: u32 = 8u;
override DIRECT: bool = false;
override KEY_FROM_V: bool = false;
// q holds the raw q_proj output: the partial applies q_norm and RoPE itself (see stage_q).
override FOLD_Q: bool = false;
// The device's subgroup size (uniform).
override SG: u32 = 32u;

// Keys per tile, lanes per key (scores), key groups (values).
override KS: u32 = 2048u / D4;
override LPK: u32 = D4 / 8u;
override KP: u32 = WG / D4;

#include "../rope/rope_sincos.wgsli"
#include "attention_decode_rows.wgsli"

// The tile's 8 query heads [8][D4] (partial); the groups' acc [256 / SG][8] (combine).
var<workgroup> pool: array<vec4<f32>, 1024>;
// P of the tile's keys: [KS][2] (heads 0-3, 4-7).
var<workgroup> probs: array<vec4<f32>, 128>;
// Per subgroup: the tile's max (partial) or the groups' max (combine) [256 / SG][2], and the
// sums of P (partial) or of the weighted l (combine).
var<workgroup> sg_max: array<vec4<f32>, 64>;
var<workgroup> sg_sum: array<vec4<f32>, 64>;
// FOLD_Q: q's sums of squares per subgroup's run of SG columns of a head.
var<workgroup> q_squares: array<f32, 128>;
var<workgroup> range_wg: vec2<u32>;

// Eight vec4s: a lane's 8 columns of a key (scores) or its 8 keys of a column (values).
struct Eight {
    e0: vec4<f32>,
    e1: vec4<f32>,
    e2: vec4<f32>,
    e3: vec4<f32>,
    e4: vec4<f32>,
    e5: vec4<f32>,
    e6: vec4<f32>,
    e7: vec4<f32>,
}

// Column `col` of the k_norm-weighted V row at vec4 `row` (K = V caches).
fn v_weighted(row: u32, col: u32) -> vec4<f32> {
    return v_cache[row + col] * key_rope[col];
}

// rope(own) for columns `col` (first half) and col + D4/2 (`pair`) of key `key`, the
// rotate_half pair, in attention_decode.wgsl's order of operations. Returns both.
fn rope_pair(own: vec4<f32>, pair: vec4<f32>, col: u32, key: u32) -> array<vec4<f32>, 2> {
    if (col * 4u >= params.rot_pairs) {
        return array<vec4<f32>, 2>(own, pair);
    }
    let ang = f32(key) * key_rope[D4 + col];
    let e0 = rope_sincos(ang.x);
    let e1 = rope_sincos(ang.y);
    let e2 = rope_sincos(ang.z);
    let e3 = rope_sincos(ang.w);
    let cs = vec4<f32>(e0.x, e1.x, e2.x, e3.x);
    let sn = vec4<f32>(e0.y, e1.y, e2.y, e3.y);
    return array<vec4<f32>, 2>(own * cs - pair * sn, pair * cs + own * sn);
}

// Columns part + i * LPK (i < 8) of key `key` (zeros at or past `end`).
fn key_columns(key: u32, end: u32, kvh: u32, part: u32) -> Eight {
    let z = vec4<f32>(0.0);
    if (key >= end) {
        return Eight(z, z, z, z, z, z, z, z);
    }
    let row = key_row(key, kvh);
    if (!KEY_FROM_V) {
        return Eight(
            k_cache[row + part],
            k_cache[row + part + LPK],
            k_cache[row + part + 2u * LPK],
            k_cache[row + part + 3u * LPK],
            k_cache[row + part + 4u * LPK],
            k_cache[row + part + 5u * LPK],
            k_cache[row + part + 6u * LPK],
            k_cache[row + part + 7u * LPK],
        );
    }
    // Columns i < 4 lie in the first half, i + 4 is their partner (4 * LPK = D4 / 2).
    let a = rope_pair(v_weighted(row, part), v_weighted(row, part + 4u * LPK), part, key);
    let b = rope_pair(v_weighted(row, part + LPK), v_weighted(row, part + 5u * LPK), part + LPK, key);
    let c = rope_pair(v_weighted(row, part + 2u * LPK), v_weighted(row, part + 6u * LPK), part + 2u * LPK, key);
    let d = rope_pair(v_weighted(row, part + 3u * LPK), v_weighted(row, part + 7u * LPK), part + 3u * LPK, key);
    return Eight(a[0], b[0], c[0], d[0], a[1], b[1], c[1], d[1]);
}

// Column `col` of values t0 + g + i * KP (i < 8), zeros at or past `end`.
fn value_keys(t0: u32, end: u32, kvh: u32, g: u32, col: u32) -> Eight {
    return Eight(
        value_at(t0 + g, end, kvh, col),
        value_at(t0 + g + KP, end, kvh, col),
        value_at(t0 + g + 2u * KP, end, kvh, col),
        value_at(t0 + g + 3u * KP, end, kvh, col),
        value_at(t0 + g + 4u * KP, end, kvh, col),
        value_at(t0 + g + 5u * KP, end, kvh, col),
        value_at(t0 + g + 6u * KP, end, kvh, col),
        value_at(t0 + g + 7u * KP, end, kvh, col),
    );
}

fn value_at(key: u32, end: u32, kvh: u32, col: u32) -> vec4<f32> {
    if (key >= end) {
        return vec4<f32>(0.0);
    }
    return v_cache[key_row(key, kvh) + col];
}

// The dots of one key column `k` with the 8 staged heads at column `col`: (heads 0-3, 4-7).
fn dot_heads(k: vec4<f32>, col: u32, lo: ptr<function, vec4<f32>>, hi: ptr<function, vec4<f32>>) {
    *lo += vec4<f32>(
        dot(pool[col], k),
        dot(pool[D4 + col], k),
        dot(pool[2u * D4 + col], k),
        dot(pool[3u * D4 + col], k),
    );
    *hi += vec4<f32>(
        dot(pool[4u * D4 + col], k),
        dot(pool[5u * D4 + col], k),
        dot(pool[6u * D4 + col], k),
        dot(pool[7u * D4 + col], k),
    );
}

// Sum over the LPK lanes of a key (consecutive lanes of one subgroup).
fn key_sum(v: vec4<f32>) -> vec4<f32> {
    var s = v;
    for (var o = 1u; o < LPK; o *= 2u) {
        s += subgroupShuffleXor(s, o);
    }
    return s;
}

// Stages the tile's q heads [8][D4] in `pool` (heads past nq zero; thread i holds vec4s
// i, i + 256, ...); the caller's barrier publishes them.
fn stage_q(query0: u32, nq: u32, lid: u32) {
    for (var i = lid; i < 8u * D4; i += WG) {
        let h = i / D4;
        var v = vec4<f32>(0.0);
        if (h < nq) {
            v = q[(query0 + h) * D4 + i % D4];
        }
        pool[i] = v;
    }
}

// FOLD_Q: one rotate_half pair of a raw q head (column c < D4/2 and its partner c + D4/2)
// with everything its rotation needs but the head's norm, loaded and computed before the
// barrier that publishes the heads' sums of squares.
struct FoldPair {
    own: vec4<f32>,
    partner: vec4<f32>,
    // q_norm's weights at the two columns.
    w: vec4<f32>,
    wp: vec4<f32>,
    cs: vec4<f32>,
    sn: vec4<f32>,
}

// Pair p (head p / (D4/2), column p % (D4/2)) of the tile; its squares go to
// q_squares[p / SG] (a subgroup's SG pairs belong to one head: SG <= D4 / 2).
fn fold_pair(p: u32, query0: u32, nq: u32, pos: f32, sg_lane: u32) -> FoldPair {
    let h4 = D4 / 2u;
    let h = p / h4;
    let c = p % h4;
    var own = vec4<f32>(0.0);
    var partner = vec4<f32>(0.0);
    if (h < nq) {
        own = q[(query0 + h) * D4 + c];
        partner = q[(query0 + h) * D4 + c + h4];
    }
    let s = subgroupAdd(dot(own, own) + dot(partner, partner));
    if (sg_lane == 0u) {
        q_squares[p / SG] = s;
    }
    let f = key_rope[params.q_rope_at + D4 + c];
    let e0 = rope_sincos(pos * f.x);
    let e1 = rope_sincos(pos * f.y);
    let e2 = rope_sincos(pos * f.z);
    let e3 = rope_sincos(pos * f.w);
    // Elements past q_rot_pairs keep their value (cos 1, sin 0).
    let element = vec4<u32>(c * 4u) + vec4<u32>(0u, 1u, 2u, 3u);
    let turn = element < vec4<u32>(params.q_rot_pairs);
    return FoldPair(
        own,
        partner,
        key_rope[params.q_rope_at + c],
        key_rope[params.q_rope_at + c + h4],
        select(vec4<f32>(1.0), vec4<f32>(e0.x, e1.x, e2.x, e3.x), turn),
        select(vec4<f32>(0.0), vec4<f32>(e0.y, e1.y, e2.y, e3.y), turn),
    );
}

// After the barrier that published q_squares: rope(N(q) * q_norm) of pair p, in
// norm_rope.wgsl's order of operations, into `pool` (rotate_half: the first half takes
// -partner * sin, the second + own * sin).
fn store_fold_pair(p: u32, f: FoldPair) {
    let h4 = D4 / 2u;
    let h = p / h4;
    let c = p % h4;
    let runs = h4 / SG;
    var ss = 0.0;
    for (var k = 0u; k < runs; k++) {
        ss += q_squares[h * runs + k];
    }
    let inv = inverseSqrt(ss / f32(4u * D4) + params.q_eps);
    pool[h * D4 + c] = f.own * inv * f.w * f.cs - f.partner * inv * f.wp * f.sn;
    pool[h * D4 + c + h4] = f.partner * inv * f.wp * f.cs + f.own * inv * f.w * f.sn;
}

// acc (heads 0..7 of the lane's column) rescaled by the tile's alpha.
fn scale_heads(acc: Eight, lo: vec4<f32>, hi: vec4<f32>) -> Eight {
    return Eight(acc.e0 * lo.x, acc.e1 * lo.y, acc.e2 * lo.z, acc.e3 * lo.w,
                 acc.e4 * hi.x, acc.e5 * hi.y, acc.e6 * hi.z, acc.e7 * hi.w);
}

// acc_h += P[key, h] * v for the 8 heads.
fn add_value(acc: Eight, key: u32, v: vec4<f32>) -> Eight {
    let pl = probs[key * 2u];
    let ph = probs[key * 2u + 1u];
    return Eight(acc.e0 + pl.x * v, acc.e1 + pl.y * v, acc.e2 + pl.z * v, acc.e3 + pl.w * v,
                 acc.e4 + ph.x * v, acc.e5 + ph.y * v, acc.e6 + ph.z * v, acc.e7 + ph.w * v);
}

// Writes column `col` of head `h` of the tile: the output (DIRECT, divided by l) or the
// split's partial.
fn write_head(h: u32, col: u32, acc: vec4<f32>, l: f32, query0: u32, nq: u32, split: u32, qcount: u32) {
    if (h >= nq) {
        return;
    }
    let query = query0 + h;
    if (DIRECT) {
        out[query * D4 + col] = select(acc / l, vec4<f32>(0.0), l == 0.0);
    } else {
        part_acc[(split * qcount + query) * D4 + col] = acc;
    }
}

// The sum over the KP key groups of a column (adjacent lanes of one subgroup).
fn group_sum(v: vec4<f32>) -> vec4<f32> {
    var s = v;
    for (var o = 1u; o < KP; o *= 2u) {
        s += subgroupShuffleXor(s, o);
    }
    return s;
}

// Max and sum over the keys of a subgroup: a key's LPK lanes hold the same value, so the
// butterfly starts at LPK.
fn keys_max(v: vec4<f32>) -> vec4<f32> {
    var s = v;
    for (var o = LPK; o < SG; o *= 2u) {
        s = max(s, subgroupShuffleXor(s, o));
    }
    return s;
}

fn keys_sum(v: vec4<f32>) -> vec4<f32> {
    var s = v;
    for (var o = LPK; o < SG; o *= 2u) {
        s += subgroupShuffleXor(s, o);
    }
    return s;
}

// The tile's sums of P (half 0: heads 0-3, 1: heads 4-7) over the subgroups.
fn sum_subgroups(half: u32) -> vec4<f32> {
    var s = vec4<f32>(0.0);
    for (var k = 0u; k < WG / SG; k++) {
        s += sg_sum[k * 2u + half];
    }
    return s;
}

// The tile's max per head (as sum_subgroups).
fn max_subgroups(half: u32) -> vec4<f32> {
    var s = vec4<f32>(NEG);
    for (var k = 0u; k < WG / SG; k++) {
        s = max(s, sg_max[k * 2u + half]);
    }
    return s;
}

@compute @workgroup_size(WG)
fn partial(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
    @builtin(subgroup_id) sg_id: u32,
    @builtin(subgroup_invocation_id) sg_lane: u32,
) {
    let r = wid.y;
    set_sequence(r, nwg.y);
    let kvh = wid.z / params.head_tiles;
    let tile = wid.z % params.head_tiles;
    let query0 = r * params.heads + kvh * params.group + tile * QT;
    let nq = min(QT, params.group - tile * QT);
    if (lid == 0u) {
        range_wg = split_range(r, wid.x, nwg.x);
    }
    if (!FOLD_Q) {
        stage_q(query0, nq, lid);
        // Publishes q and the range: the q loads and the positions load overlap.
        let range = workgroupUniformLoad(&range_wg);
        attend(range, wid, nwg, lid, sg_id, sg_lane);
        return;
    }
    // q_norm + RoPE folded: thread lid owns pairs lid and lid + 256 (4 * D4 pairs: 128,
    // 256 or 512), all their loads issued before the barrier that publishes the sums.
    let pos = f32(positions[r]);
    let first = fold_pair(lid, query0, nq, pos, sg_lane);
    var second = first;
    if (4u * D4 > WG) {
        second = fold_pair(lid + WG, query0, nq, pos, sg_lane);
    }
    let range = workgroupUniformLoad(&range_wg);
    if (lid < 4u * D4) {
        store_fold_pair(lid, first);
    }
    if (4u * D4 > WG) {
        store_fold_pair(lid + WG, second);
    }
    workgroupBarrier();
    attend(range, wid, nwg, lid, sg_id, sg_lane);
}

// The tiles of the split `range` with the tile's q heads in `pool`, then the partial.
fn attend(range: vec2<u32>, wid: vec3<u32>, nwg: vec3<u32>, lid: u32, sg_id: u32, sg_lane: u32) {
    let role = sg_id * SG + sg_lane;
    let r = wid.y;
    let kvh = wid.z / params.head_tiles;
    let tile = wid.z % params.head_tiles;
    let query0 = r * params.heads + kvh * params.group + tile * QT;
    let nq = min(QT, params.group - tile * QT);
    let qcount = nwg.y * params.heads;
    let split = params.chunk_index * nwg.x + wid.x;
    // Score roles (key j, part) and value roles (group g, column c).
    let j = role / LPK;
    let part = role % LPK;
    let g = role % KP;
    let col = role / KP;

    var m_lo = vec4<f32>(NEG);
    var m_hi = vec4<f32>(NEG);
    var l_lo = vec4<f32>(0.0);
    var l_hi = vec4<f32>(0.0);
    let z = vec4<f32>(0.0);
    var acc = Eight(z, z, z, z, z, z, z, z);
    for (var t0 = range.x; t0 < range.y; t0 += KS) {
        let t_end = min(t0 + KS, range.y);
        // Every load of the tile first: the lane's key columns and its values.
        let k = key_columns(t0 + j, t_end, kvh, part);
        let v = value_keys(t0, t_end, kvh, g, col);
        var s_lo = vec4<f32>(0.0);
        var s_hi = vec4<f32>(0.0);
        dot_heads(k.e0, part, &s_lo, &s_hi);
        dot_heads(k.e1, part + LPK, &s_lo, &s_hi);
        dot_heads(k.e2, part + 2u * LPK, &s_lo, &s_hi);
        dot_heads(k.e3, part + 3u * LPK, &s_lo, &s_hi);
        dot_heads(k.e4, part + 4u * LPK, &s_lo, &s_hi);
        dot_heads(k.e5, part + 5u * LPK, &s_lo, &s_hi);
        dot_heads(k.e6, part + 6u * LPK, &s_lo, &s_hi);
        dot_heads(k.e7, part + 7u * LPK, &s_lo, &s_hi);
        s_lo = key_sum(s_lo);
        s_hi = key_sum(s_hi);
        if (t0 + j >= t_end) {
            s_lo = vec4<f32>(NEG);
            s_hi = vec4<f32>(NEG);
        }
        // The tile's max per head.
        let mx_lo = keys_max(s_lo);
        let mx_hi = keys_max(s_hi);
        if (sg_lane == 0u) {
            sg_max[sg_id * 2u] = mx_lo;
            sg_max[sg_id * 2u + 1u] = mx_hi;
        }
        workgroupBarrier();
        let new_lo = max(m_lo, max_subgroups(0u));
        let new_hi = max(m_hi, max_subgroups(1u));
        let alpha_lo = select(exp(m_lo - new_lo), vec4<f32>(0.0), m_lo == vec4<f32>(NEG));
        let alpha_hi = select(exp(m_hi - new_hi), vec4<f32>(0.0), m_hi == vec4<f32>(NEG));
        m_lo = new_lo;
        m_hi = new_hi;
        let p_lo = select(exp(s_lo - m_lo), vec4<f32>(0.0), s_lo == vec4<f32>(NEG));
        let p_hi = select(exp(s_hi - m_hi), vec4<f32>(0.0), s_hi == vec4<f32>(NEG));
        if (part == 0u) {
            probs[j * 2u] = p_lo;
            probs[j * 2u + 1u] = p_hi;
        }
        let sum_lo = keys_sum(p_lo);
        let sum_hi = keys_sum(p_hi);
        if (sg_lane == 0u) {
            sg_sum[sg_id * 2u] = sum_lo;
            sg_sum[sg_id * 2u + 1u] = sum_hi;
        }
        workgroupBarrier();
        l_lo = l_lo * alpha_lo + sum_subgroups(0u);
        l_hi = l_hi * alpha_hi + sum_subgroups(1u);
        acc = scale_heads(acc, alpha_lo, alpha_hi);
        acc = add_value(acc, g, v.e0);
        acc = add_value(acc, g + KP, v.e1);
        acc = add_value(acc, g + 2u * KP, v.e2);
        acc = add_value(acc, g + 3u * KP, v.e3);
        acc = add_value(acc, g + 4u * KP, v.e4);
        acc = add_value(acc, g + 5u * KP, v.e5);
        acc = add_value(acc, g + 6u * KP, v.e6);
        acc = add_value(acc, g + 7u * KP, v.e7);
    }

    // Lane g = 0 of each column writes the column of the tile's heads.
    let t0 = group_sum(acc.e0);
    let t1 = group_sum(acc.e1);
    let t2 = group_sum(acc.e2);
    let t3 = group_sum(acc.e3);
    let t4 = group_sum(acc.e4);
    let t5 = group_sum(acc.e5);
    let t6 = group_sum(acc.e6);
    let t7 = group_sum(acc.e7);
    if (g == 0u) {
        write_head(0u, col, t0, l_lo.x, query0, nq, split, qcount);
        write_head(1u, col, t1, l_lo.y, query0, nq, split, qcount);
        write_head(2u, col, t2, l_lo.z, query0, nq, split, qcount);
        write_head(3u, col, t3, l_lo.w, query0, nq, split, qcount);
        write_head(4u, col, t4, l_hi.x, query0, nq, split, qcount);
        write_head(5u, col, t5, l_hi.y, query0, nq, split, qcount);
        write_head(6u, col, t6, l_hi.z, query0, nq, split, qcount);
        write_head(7u, col, t7, l_hi.w, query0, nq, split, qcount);
    }
    if (!DIRECT) {
        if (lid < nq) {
            let m = select(m_hi[lid % 4u], m_lo[lid % 4u], lid < 4u);
            let l = select(l_hi[lid % 4u], l_lo[lid % 4u], lid < 4u);
            part_ml[1u + split * qcount + query0 + lid] = vec2<f32>(m, l);
        }
        if (lid == 0u && wid.x == 0u && wid.y == 0u && wid.z == 0u) {
            part_ml[0] = vec2<f32>(f32((params.chunk_index + 1u) * nwg.x), 0.0);
        }
    }
}

// Columns per combine workgroup and the split groups that share them.
const CB: u32 = 8u;
const GROUPS: u32 = WG / CB;

// (m, l) and acc of split s of `query` at column c (the last split for s >= n: its weight is
// then zero, and the load stays in bounds).
fn split_ml(s: u32, n: u32, query: u32, qcount: u32) -> vec2<f32> {
    return part_ml[1u + min(s, n - 1u) * qcount + query];
}

fn split_acc(s: u32, n: u32, query: u32, qcount: u32, c: u32) -> vec4<f32> {
    return part_acc[(min(s, n - 1u) * qcount + query) * D4 + c];
}

// Merges split (ml, acc) into the running (m, l, acc) of a group; splits at or past n weigh
// nothing, and so do empty splits (m = NEG).
struct Merge {
    m: f32,
    l: f32,
    acc: vec4<f32>,
}

fn merge(run: Merge, s: u32, n: u32, ml: vec2<f32>, acc: vec4<f32>) -> Merge {
    if (s >= n || ml.x == NEG) {
        return run;
    }
    let m = max(run.m, ml.x);
    let old = select(exp(run.m - m), 0.0, run.m == NEG);
    let w = exp(ml.x - m);
    return Merge(m, run.l * old + ml.y * w, run.acc * old + acc * w);
}

@compute @workgroup_size(WG)
fn combine(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
    @builtin(subgroup_id) sg_id: u32,
    @builtin(subgroup_invocation_id) sg_lane: u32,
) {
    let qcount = nwg.z * params.heads;
    let query = wid.z * params.heads + wid.y;
    let n = max(min(u32(part_ml[0].x), MAX_SPLITS), 1u);
    let role = sg_id * SG + sg_lane;
    let g = role / CB;
    let c = wid.x * CB + role % CB;
    // Group g merges splits g, g + GROUPS, ...: four splits' loads in flight at a time.
    var run = Merge(NEG, 0.0, vec4<f32>(0.0));
    for (var s = g; s < n; s += 4u * GROUPS) {
        let s1 = s + GROUPS;
        let s2 = s + 2u * GROUPS;
        let s3 = s + 3u * GROUPS;
        let ml0 = split_ml(s, n, query, qcount);
        let ml1 = split_ml(s1, n, query, qcount);
        let ml2 = split_ml(s2, n, query, qcount);
        let ml3 = split_ml(s3, n, query, qcount);
        let acc0 = split_acc(s, n, query, qcount, c);
        let acc1 = split_acc(s1, n, query, qcount, c);
        let acc2 = split_acc(s2, n, query, qcount, c);
        let acc3 = split_acc(s3, n, query, qcount, c);
        run = merge(run, s, n, ml0, acc0);
        run = merge(run, s1, n, ml1, acc1);
        run = merge(run, s2, n, ml2, acc2);
        run = merge(run, s3, n, ml3, acc3);
    }
    // The query's max over every group.
    let sg_m = subgroupMax(run.m);
    if (sg_lane == 0u) {
        sg_max[sg_id] = vec4<f32>(sg_m);
    }
    workgroupBarrier();
    var mx = NEG;
    for (var k = 0u; k < WG / SG; k++) {
        mx = max(mx, sg_max[k].x);
    }
    let w = select(exp(run.m - mx), 0.0, run.m == NEG);
    // Each group's l is held by its CB lanes: count the first once.
    let l_part = subgroupAdd(select(0.0, run.l * w, role % CB == 0u));
    var acc = run.acc * w;
    for (var o = CB; o < SG; o *= 2u) {
        acc += subgroupShuffleXor(acc, o);
    }
    if (sg_lane < CB) {
        pool[sg_id * CB + sg_lane] = acc;
    }
    if (sg_lane == 0u) {
        sg_sum[sg_id] = vec4<f32>(l_part);
    }
    workgroupBarrier();
    if (lid < CB) {
        var total = vec4<f32>(0.0);
        var l = 0.0;
        for (var k = 0u; k < WG / SG; k++) {
            total += pool[k * CB + lid];
            l += sg_sum[k].x;
        }
        out[query * D4 + wid.x * CB + lid] = select(total / l, vec4<f32>(0.0), l == 0.0);
    }
}
