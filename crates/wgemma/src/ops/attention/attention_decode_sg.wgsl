// attention_decode_sg: the subgroup twin of attention_decode.wgsl (same contract, geometry,
// bindings and partial layout; the block between the decode_shared markers is identical in
// both, a test compares the copies). Only the per-batch lane reduction differs: one
// subgroup of VSG lanes (VSG = the device's subgroup size, which must divide D4; the host
// builds this shader only when every subgroup has exactly VSG lanes) sums its 8 partial
// dots with subgroupAdd, and its first lane stores them: no workgroup barrier per batch.
// Thread roles come from the subgroup builtins (role = subgroup_id * VSG + lane), so a
// subgroup always holds VSG consecutive columns of one key, whatever order the device
// gives invocations. The combine entry lives in attention_decode.wgsl only.

struct Params {
    heads: u32,
    kv_heads: u32,
    group: u32,
    head_tiles: u32,
    window: u32,
    slots: u32,
    ring: u32,
    chunk_start: u32,
    chunk_slots: u32,
    chunk_index: u32,
    rot_pairs: u32,
    _pad: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read_write> out: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> part_acc: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read_write> part_ml: array<vec2<f32>>;
@group(0) @binding(4) var<storage, read> positions: array<u32>;
@group(0) @binding(5) var<storage, read> q: array<vec4<f32>>;
@group(0) @binding(6) var<storage, read> k_cache: array<vec4<f32>>;
@group(0) @binding(7) var<storage, read> v_cache: array<vec4<f32>>;
@group(0) @binding(8) var<storage, read> key_rope: array<vec4<f32>>;

// Lanes reduced together per batch: one subgroup (the host sets the device's size).
override VSG: u32 = 32u;

// BEGIN decode_shared (kept identical in attention_decode_sg.wgsl; a test compares the copies)
const WG: u32 = 256u;
const NEG: f32 = -3.0e38;

override D4: u32 = 64u;
override QT: u32 = 8u;
override DIRECT: bool = false;
override KEY_FROM_V: bool = false;

// Partial: [0, 512) scores / probabilities [TK][2] (and the portable batch lanes [256][2]);
// the KP lane sums of l at the end. Combine: acc lanes [32][8].
var<workgroup> pool_a: array<vec4<f32>, 512>;
// Partial: lane sums [TK][D4 / VSG][2]; tile max parts [32][2]; acc of two heads [2][KP][D4].
var<workgroup> pool_b: array<vec4<f32>, 512>;
var<workgroup> m_run: array<vec4<f32>, 2>;
// alpha of the current tile, then the final l.
var<workgroup> alpha_wg: array<vec4<f32>, 2>;
var<workgroup> range_wg: vec2<u32>;

// Per-invocation state of the partial kernel: plain private values (registers), no arrays.
var<private> g_query0: u32;
var<private> g_nq: u32;
var<private> g_split: u32;
var<private> g_qcount: u32;
// q of column col for the tile's heads 0..7.
var<private> gq0: vec4<f32>;
var<private> gq1: vec4<f32>;
var<private> gq2: vec4<f32>;
var<private> gq3: vec4<f32>;
var<private> gq4: vec4<f32>;
var<private> gq5: vec4<f32>;
var<private> gq6: vec4<f32>;
var<private> gq7: vec4<f32>;
// acc of column col for heads 0..7, and l of heads 0..3 / 4..7 over this key group's keys.
var<private> ga0: vec4<f32>;
var<private> ga1: vec4<f32>;
var<private> ga2: vec4<f32>;
var<private> ga3: vec4<f32>;
var<private> ga4: vec4<f32>;
var<private> ga5: vec4<f32>;
var<private> ga6: vec4<f32>;
var<private> ga7: vec4<f32>;
var<private> gl_lo: vec4<f32>;
var<private> gl_hi: vec4<f32>;

// BEGIN rope_sincos (kept identical in rope.wgsl; a test compares the copies)
// (cos a, sin a) for an f32 angle 0 <= a < 2^18 * pi / 2. a = k * pi/2 + r with pi/2 split
// into 6-bit pieces, so every k * piece (k < 2^18) is exact in f32 and the reduction loses
// nothing (fused or not); then Taylor polynomials on |r| <= pi/4 + 0.03 (error < 1e-8).
fn rope_sincos(a: f32) -> vec2<f32> {
    let k = floor(a * 0.63661977236758134 + 0.5);
    var r = a - k * 1.5625;
    r = r - k * 0.008056640625;
    r = r - k * 0.00023651123046875;
    r = r - k * 3.159046173095703e-06;
    r = r - k * 1.5832483768463135e-08;
    r = r - k * 6.002665031701326e-11;
    r = r - k * 7.389644451905042e-13;
    let r2 = r * r;
    let s = r + r * r2 * (-0.16666666666666666 + r2 * (0.008333333333333333
        + r2 * (-0.0001984126984126984 + r2 * 2.7557319223985893e-06)));
    let c = 1.0 + r2 * (-0.5 + r2 * (0.041666666666666664 + r2 * (-0.001388888888888889
        + r2 * (2.48015873015873e-05 - r2 * 2.755731922398589e-07))));
    switch (u32(k) & 3u) {
        case 0u: { return vec2<f32>(c, s); }
        case 1u: { return vec2<f32>(-s, c); }
        case 2u: { return vec2<f32>(-c, -s); }
        default: { return vec2<f32>(s, -c); }
    }
}
// END rope_sincos

// vec4 index of the start of key `key`'s row for kv head `kvh` in the bound chunk.
fn key_row(key: u32, kvh: u32) -> u32 {
    var slot = key - params.chunk_start;
    if (params.ring != 0u) {
        slot = key % params.slots;
    }
    return (kvh * params.chunk_slots + slot) * D4;
}

// Column `col` of key `key` (zero at or past `end`).
fn key_vec(key: u32, end: u32, kvh: u32, col: u32) -> vec4<f32> {
    if (key >= end) {
        return vec4<f32>(0.0);
    }
    let row = key_row(key, kvh);
    if (!KEY_FROM_V) {
        return k_cache[row + col];
    }
    // rotate_half pairs column c with c + D4/2: rebuild both, keep this thread's one.
    let h4 = D4 / 2u;
    let own = v_cache[row + col] * key_rope[col];
    let pair = col % h4;
    if (pair * 4u >= params.rot_pairs) {
        return own;
    }
    let partner = select(col + h4, col - h4, col >= h4);
    let other = v_cache[row + partner] * key_rope[partner];
    let ang = f32(key) * key_rope[D4 + pair];
    let e0 = rope_sincos(ang.x);
    let e1 = rope_sincos(ang.y);
    let e2 = rope_sincos(ang.z);
    let e3 = rope_sincos(ang.w);
    let cs = vec4<f32>(e0.x, e1.x, e2.x, e3.x);
    let sn = vec4<f32>(e0.y, e1.y, e2.y, e3.y);
    if (col < h4) {
        return own * cs - other * sn;
    }
    return own * cs + other * sn;
}

// Column `col` of value `key` (zero at or past `end`).
fn value_vec(key: u32, end: u32, kvh: u32, col: u32) -> vec4<f32> {
    if (key >= end) {
        return vec4<f32>(0.0);
    }
    return v_cache[key_row(key, kvh) + col];
}

// Query q of head `h` of the tile at column `col` (zero for heads past the tile).
fn load_q(h: u32, col: u32) -> vec4<f32> {
    if (h >= g_nq) {
        return vec4<f32>(0.0);
    }
    return q[(g_query0 + h) * D4 + col];
}

// Partial dots of one key column with the tile's queries, reduced over the key's lanes.
fn score_batch(tkey: u32, col: u32, role: u32, lane: u32, kv: vec4<f32>) {
    let lo = vec4<f32>(dot(gq0, kv), dot(gq1, kv), dot(gq2, kv), dot(gq3, kv));
    var hi = vec4<f32>(0.0);
    if (QT > 4u) {
        hi = vec4<f32>(dot(gq4, kv), dot(gq5, kv), dot(gq6, kv), dot(gq7, kv));
    }
    reduce_batch(tkey, col, role, lane, lo, hi);
}

// acc += P[tkey] * v for the tile's heads, l += P[tkey].
fn value_batch(tkey: u32, v: vec4<f32>) {
    let pl = pool_a[tkey * 2u];
    ga0 += pl.x * v;
    ga1 += pl.y * v;
    ga2 += pl.z * v;
    ga3 += pl.w * v;
    gl_lo += pl;
    if (QT > 4u) {
        let ph = pool_a[tkey * 2u + 1u];
        ga4 += ph.x * v;
        ga5 += ph.y * v;
        ga6 += ph.z * v;
        ga7 += ph.w * v;
        gl_hi += ph;
    }
}

// Writes column `col` of head `h` of the tile: the output (DIRECT) or the split's partial.
fn write_acc(h: u32, col: u32, acc: vec4<f32>) {
    if (h >= g_nq) {
        return;
    }
    let query = g_query0 + h;
    if (DIRECT) {
        let l = alpha_wg[h / 4u][h % 4u];
        out[query * D4 + col] = select(acc / l, vec4<f32>(0.0), l == 0.0);
    } else {
        part_acc[(g_split * g_qcount + query) * D4 + col] = acc;
    }
}

// Sums the acc of heads h and h + 1 over the KP key groups and writes them.
fn finish_pair(h: u32, ks: u32, col: u32, lid: u32, x: vec4<f32>, y: vec4<f32>) {
    pool_b[ks * D4 + col] = x;
    pool_b[WG + ks * D4 + col] = y;
    workgroupBarrier();
    if (lid < 2u * D4) {
        let hh = lid / D4;
        let c = lid % D4;
        var acc = vec4<f32>(0.0);
        for (var j = 0u; j < WG / D4; j++) {
            acc += pool_b[hh * WG + j * D4 + c];
        }
        write_acc(h + hh, c, acc);
    }
    workgroupBarrier();
}

fn decode_partial(wid: vec3<u32>, nwg: vec3<u32>, lid: u32, role: u32, lane: u32) {
    let kp = WG / D4;
    let tk = kp * VSG;
    let ne = D4 / VSG;
    let ks = role / D4;
    let col = role % D4;
    let r = wid.y;
    let kvh = wid.z / params.head_tiles;
    let tile = wid.z % params.head_tiles;
    g_query0 = r * params.heads + kvh * params.group + tile * QT;
    g_nq = min(QT, params.group - tile * QT);
    g_qcount = nwg.y * params.heads;
    g_split = params.chunk_index * nwg.x + wid.x;
    if (lid == 0u) {
        let p = positions[r];
        var lo = 0u;
        if (params.window != 0u && p + 1u > params.window) {
            lo = p + 1u - params.window;
        }
        var hi = p + 1u;
        if (params.ring == 0u) {
            lo = max(lo, params.chunk_start);
            hi = min(hi, params.chunk_start + params.chunk_slots);
        }
        hi = max(hi, lo);
        let per = (hi - lo + nwg.x - 1u) / nwg.x;
        let k0 = min(lo + wid.x * per, hi);
        range_wg = vec2<u32>(k0, min(k0 + per, hi));
        m_run[0] = vec4<f32>(NEG);
        m_run[1] = vec4<f32>(NEG);
    }
    let range = workgroupUniformLoad(&range_wg);

    gq0 = load_q(0u, col);
    gq1 = load_q(1u, col);
    gq2 = load_q(2u, col);
    gq3 = load_q(3u, col);
    gq4 = load_q(4u, col);
    gq5 = load_q(5u, col);
    gq6 = load_q(6u, col);
    gq7 = load_q(7u, col);
    ga0 = vec4<f32>(0.0);
    ga1 = vec4<f32>(0.0);
    ga2 = vec4<f32>(0.0);
    ga3 = vec4<f32>(0.0);
    ga4 = vec4<f32>(0.0);
    ga5 = vec4<f32>(0.0);
    ga6 = vec4<f32>(0.0);
    ga7 = vec4<f32>(0.0);
    gl_lo = vec4<f32>(0.0);
    gl_hi = vec4<f32>(0.0);

    for (var t0 = range.x; t0 < range.y; t0 += tk) {
        let t_end = min(t0 + tk, range.y);
        // 1. Scores of the tile's keys, lane sums into pool_b. Four batches' key rows are
        // loaded together (four independent loads in flight per thread).
        for (var b = 0u; b < VSG; b += 4u) {
            if (t0 + b * kp < t_end) {
                let tkey = b * kp + ks;
                let k0 = key_vec(t0 + tkey, t_end, kvh, col);
                let k1 = key_vec(t0 + tkey + kp, t_end, kvh, col);
                let k2 = key_vec(t0 + tkey + 2u * kp, t_end, kvh, col);
                let k3 = key_vec(t0 + tkey + 3u * kp, t_end, kvh, col);
                score_batch(tkey, col, role, lane, k0);
                score_batch(tkey + kp, col, role, lane, k1);
                score_batch(tkey + 2u * kp, col, role, lane, k2);
                score_batch(tkey + 3u * kp, col, role, lane, k3);
            }
        }
        workgroupBarrier();
        // Scores: sum the ne lane sums of each key (NEG past the tile).
        var s_lo = vec4<f32>(NEG);
        var s_hi = vec4<f32>(NEG);
        if (lid < tk && t0 + lid < t_end) {
            s_lo = vec4<f32>(0.0);
            s_hi = vec4<f32>(0.0);
            for (var e = 0u; e < ne; e++) {
                s_lo += pool_b[(lid * ne + e) * 2u];
                s_hi += pool_b[(lid * ne + e) * 2u + 1u];
            }
        }
        if (lid < tk) {
            pool_a[lid * 2u] = s_lo;
            pool_a[lid * 2u + 1u] = s_hi;
        }
        workgroupBarrier();
        // 2. Tile max per head: 32 parts x 8 heads, then the running max and alpha.
        {
            let h = lid % 8u;
            let part = lid / 8u;
            var mx = NEG;
            for (var k = part; k < tk; k += 32u) {
                mx = max(mx, pool_a[k * 2u + h / 4u][h % 4u]);
            }
            pool_b[part * 2u + h / 4u][h % 4u] = mx;
        }
        workgroupBarrier();
        if (lid < 2u) {
            let old = m_run[lid];
            var mx = old;
            for (var part = 0u; part < 32u; part++) {
                mx = max(mx, pool_b[part * 2u + lid]);
            }
            alpha_wg[lid] = select(exp(old - mx), vec4<f32>(0.0), old == vec4<f32>(NEG));
            m_run[lid] = mx;
        }
        workgroupBarrier();
        if (lid < tk) {
            let sl = pool_a[lid * 2u];
            let sh = pool_a[lid * 2u + 1u];
            pool_a[lid * 2u] = select(exp(sl - m_run[0]), vec4<f32>(0.0), sl == vec4<f32>(NEG));
            pool_a[lid * 2u + 1u] = select(exp(sh - m_run[1]), vec4<f32>(0.0), sh == vec4<f32>(NEG));
        }
        workgroupBarrier();
        // 3. acc = acc * alpha + P V over keys ks, ks + KP, ... of the tile (four value rows
        // loaded together).
        let al = alpha_wg[0];
        let ah = alpha_wg[1];
        ga0 *= al.x;
        ga1 *= al.y;
        ga2 *= al.z;
        ga3 *= al.w;
        gl_lo *= al;
        if (QT > 4u) {
            ga4 *= ah.x;
            ga5 *= ah.y;
            ga6 *= ah.z;
            ga7 *= ah.w;
            gl_hi *= ah;
        }
        for (var b = 0u; b < VSG; b += 4u) {
            if (t0 + b * kp < t_end) {
                let tkey = b * kp + ks;
                let v0 = value_vec(t0 + tkey, t_end, kvh, col);
                let v1 = value_vec(t0 + tkey + kp, t_end, kvh, col);
                let v2 = value_vec(t0 + tkey + 2u * kp, t_end, kvh, col);
                let v3 = value_vec(t0 + tkey + 3u * kp, t_end, kvh, col);
                value_batch(tkey, v0);
                value_batch(tkey + kp, v1);
                value_batch(tkey + 2u * kp, v2);
                value_batch(tkey + 3u * kp, v3);
            }
        }
        workgroupBarrier();
    }

    // l: sum over the KP key groups (every column of a group holds the same sums).
    if (col == 0u) {
        pool_a[ks * 2u] = gl_lo;
        pool_a[ks * 2u + 1u] = gl_hi;
    }
    workgroupBarrier();
    if (lid < 2u) {
        var l = vec4<f32>(0.0);
        for (var j = 0u; j < kp; j++) {
            l += pool_a[j * 2u + lid];
        }
        alpha_wg[lid] = l;
    }
    workgroupBarrier();
    finish_pair(0u, ks, col, lid, ga0, ga1);
    if (QT > 2u) {
        finish_pair(2u, ks, col, lid, ga2, ga3);
    }
    if (QT > 4u) {
        finish_pair(4u, ks, col, lid, ga4, ga5);
    }
    if (QT > 6u) {
        finish_pair(6u, ks, col, lid, ga6, ga7);
    }
    if (!DIRECT) {
        if (lid < g_nq) {
            let m = m_run[lid / 4u][lid % 4u];
            let l = alpha_wg[lid / 4u][lid % 4u];
            part_ml[1u + g_split * g_qcount + g_query0 + lid] = vec2<f32>(m, l);
        }
        if (lid == 0u && wid.x == 0u && wid.y == 0u && wid.z == 0u) {
            part_ml[0] = vec2<f32>(f32((params.chunk_index + 1u) * nwg.x), 0.0);
        }
    }
}
// END decode_shared

// Subgroup batch reduction: the subgroup's VSG lanes are columns [e * VSG, e * VSG + VSG) of
// key `tkey`, e = col / VSG; lane 0 stores the 8 head sums.
fn reduce_batch(tkey: u32, col: u32, role: u32, lane: u32, lo: vec4<f32>, hi: vec4<f32>) {
    let s_lo = subgroupAdd(lo);
    let s_hi = subgroupAdd(hi);
    if (lane == 0u) {
        let i = (tkey * (D4 / VSG) + col / VSG) * 2u;
        pool_b[i] = s_lo;
        pool_b[i + 1u] = s_hi;
    }
}

@compute @workgroup_size(WG)
fn partial(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
    @builtin(subgroup_id) sg_id: u32,
    @builtin(subgroup_invocation_id) sg_lane: u32,
) {
    decode_partial(wid, nwg, lid, sg_id * VSG + sg_lane, sg_lane);
}
