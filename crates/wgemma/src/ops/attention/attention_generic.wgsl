// Attention, generic route: the split-K kernels of attention.wgsl (same bindings, entries,
// overrides, partial layout and combine) for any head_dim D that is a multiple of 4 in 4..=512
// (a multiple of 8 with KEY_FROM_V), where attention.wgsl needs a power of two. Gemma 4
// configs that HF runs may have head dims such as 24 or 48.
// What differs: the P V phase maps thread -> (vec4 column, query group) with
// step3 = WG / (D/4) groups; when D/4 does not divide WG the last WG % (D/4) threads idle
// (in attention.wgsl they would alias another group's queries), and each thread keeps up to
// ACC_N = 16 query accumulators, so a tile of gt <= min(32, 4096 / D) query heads is covered
// for every such D (floor(128 / (D/4)) * 16 >= 4096 / D). Slower than the power-of-two
// kernels: it is the fallback that makes these shapes run at all.
// Causal with an optional sliding window W (the query at position p sees keys p - W < k <= p),
// GQA (query head h reads kv head h / group), scale 1.0, f32 online softmax.
// Inputs: q [rows, heads, D] f32, row r at positions[r]; K, V cache chunk
// [kv_heads, chunk_slots, D] f32 (sliding ring: slot k % slots; full: chunked along slots).
// Entry `partial` (DIRECT: out = acc / l) and entry `combine`: as in attention.wgsl.
// Workgroups of 128 threads.

#include "attention_io.wgsli"
@group(0) @binding(8) var<storage, read> key_rope: array<vec4<f32>>;

const WG: u32 = 128u;
const BK: u32 = 32u;
const QT_MAX: u32 = 32u;
const QG: u32 = 4u; // WG / BK query groups in the score phase
const SPT: u32 = 8u; // QT_MAX / QG scores per thread
const ACC_N: u32 = 16u; // query accumulators per thread: gt <= (WG / (D/4)) * ACC_N
const MAX_SPLITS: u32 = 512u;
const NEG: f32 = -3.0e38;

override DIRECT: bool = false;
override KEY_FROM_V: bool = false;

var<workgroup> sc: array<f32, 1024>; // [QT_MAX][BK] scores, then probabilities
var<workgroup> m_run: array<f32, QT_MAX>;
var<workgroup> l_run: array<f32, QT_MAX>;
var<workgroup> alpha: array<f32, QT_MAX>;
var<workgroup> range_wg: vec2<u32>;
var<workgroup> wts: array<f32, MAX_SPLITS>;
var<workgroup> red: array<f32, WG>;

#include "../rope/rope_sincos.wgsli"

#include "attention_key_row.wgsli"

@compute @workgroup_size(WG)
fn partial(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let r = wid.y;
    set_sequence(r, nwg.y);
    let kvh = wid.z / params.head_tiles;
    let tile = wid.z % params.head_tiles;
    let h0 = kvh * params.group + tile * params.gt;
    let nq = min(params.gt, params.group - tile * params.gt);
    let d4n = params.d4;
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
        let per = ((hi - lo + nwg.x - 1u) / nwg.x + BK - 1u) / BK * BK;
        let k0 = min(lo + wid.x * per, hi);
        range_wg = vec2<u32>(k0, min(k0 + per, hi));
    }
    if (lid < QT_MAX) {
        m_run[lid] = NEG;
        l_run[lid] = 0.0;
    }
    let range = workgroupUniformLoad(&range_wg);

    let kj = lid % BK;
    let qg = lid / BK;
    var qbase: array<u32, SPT>;
    for (var j = 0u; j < SPT; j++) {
        qbase[j] = (r * params.heads + h0 + qg + j * QG) * d4n;
    }
    let step3 = WG / d4n;
    // Threads past step3 * d4n idle in the P V phase (their group would alias group 0's).
    let active3 = lid < step3 * d4n;
    let col = lid % d4n;
    let qg3 = select(QT_MAX * ACC_N, lid / d4n, active3);
    var acc: array<vec4<f32>, ACC_N>;
    for (var i = 0u; i < ACC_N; i++) {
        acc[i] = vec4<f32>(0.0);
    }

    for (var kb = range.x; kb < range.y; kb += BK) {
        let nk = min(BK, range.y - kb);
        // Scores of key kb + kj against queries qg, qg + QG, ...
        var s: array<f32, SPT>;
        for (var j = 0u; j < SPT; j++) {
            s[j] = 0.0;
        }
        if (kj < nk) {
            let key = kb + kj;
            let kr = key_row(key, kvh);
            if (KEY_FROM_V) {
                let h4 = d4n / 2u;
                for (var c = 0u; c < h4; c++) {
                    var k1 = v_cache[kr + c] * key_rope[c];
                    var k2 = v_cache[kr + c + h4] * key_rope[c + h4];
                    if (c * 4u < params.rot_pairs) {
                        let ang = f32(key) * key_rope[d4n + c];
                        let e0 = rope_sincos(ang.x);
                        let e1 = rope_sincos(ang.y);
                        let e2 = rope_sincos(ang.z);
                        let e3 = rope_sincos(ang.w);
                        let cs = vec4<f32>(e0.x, e1.x, e2.x, e3.x);
                        let sn = vec4<f32>(e0.y, e1.y, e2.y, e3.y);
                        let r1 = k1 * cs - k2 * sn;
                        let r2 = k2 * cs + k1 * sn;
                        k1 = r1;
                        k2 = r2;
                    }
                    for (var j = 0u; j < SPT; j++) {
                        if (qg + j * QG < nq) {
                            s[j] += dot(q[qbase[j] + c], k1) + dot(q[qbase[j] + c + h4], k2);
                        }
                    }
                }
            } else {
                for (var c = 0u; c < d4n; c++) {
                    let kv = k_cache[kr + c];
                    for (var j = 0u; j < SPT; j++) {
                        if (qg + j * QG < nq) {
                            s[j] += dot(q[qbase[j] + c], kv);
                        }
                    }
                }
            }
        }
        for (var j = 0u; j < SPT; j++) {
            sc[(qg + j * QG) * BK + kj] = select(NEG, s[j], kj < nk);
        }
        workgroupBarrier();

        // Online softmax: one thread per query.
        if (lid < nq) {
            let row = lid * BK;
            var mx = NEG;
            for (var j = 0u; j < nk; j++) {
                mx = max(mx, sc[row + j]);
            }
            let m_old = m_run[lid];
            let m_new = max(m_old, mx);
            let a = select(exp(m_old - m_new), 0.0, m_old == NEG);
            var sum = 0.0;
            for (var j = 0u; j < nk; j++) {
                let v = sc[row + j];
                let pj = select(exp(v - m_new), 0.0, v == NEG);
                sc[row + j] = pj;
                sum += pj;
            }
            m_run[lid] = m_new;
            l_run[lid] = l_run[lid] * a + sum;
            alpha[lid] = a;
        }
        workgroupBarrier();

        // acc = acc * alpha + P V: thread = vec4 column col, queries qg3 + i * step3.
        for (var i = 0u; i < ACC_N; i++) {
            let qi = qg3 + i * step3;
            if (qi < nq) {
                acc[i] *= alpha[qi];
            }
        }
        for (var j = 0u; j < nk; j++) {
            let v = v_cache[key_row(kb + j, kvh) + col];
            for (var i = 0u; i < ACC_N; i++) {
                let qi = qg3 + i * step3;
                if (qi < nq) {
                    acc[i] += sc[qi * BK + j] * v;
                }
            }
        }
        workgroupBarrier();
    }

    let qcount = nwg.y * params.heads;
    let split = params.chunk_index * nwg.x + wid.x;
    for (var i = 0u; i < ACC_N; i++) {
        let qi = qg3 + i * step3;
        if (qi < nq) {
            let query = r * params.heads + h0 + qi;
            if (DIRECT) {
                let l = l_run[qi];
                out[query * d4n + col] = select(acc[i] / l, vec4<f32>(0.0), l == 0.0);
            } else {
                part_acc[(split * qcount + query) * d4n + col] = acc[i];
            }
        }
    }
    if (!DIRECT) {
        if (lid < nq) {
            let query = r * params.heads + h0 + lid;
            part_ml[1u + split * qcount + query] = vec2<f32>(m_run[lid], l_run[lid]);
        }
        if (lid == 0u && wid.x == 0u && wid.y == 0u && wid.z == 0u) {
            part_ml[0] = vec2<f32>(f32((params.chunk_index + 1u) * nwg.x), 0.0);
        }
    }
}

@compute @workgroup_size(WG)
fn combine(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let qcount = nwg.y * params.heads;
    let query = wid.y * params.heads + wid.x;
    let n = min(u32(part_ml[0].x), MAX_SPLITS);
    var mx = NEG;
    for (var s = lid; s < n; s += WG) {
        mx = max(mx, part_ml[1u + s * qcount + query].x);
    }
    red[lid] = mx;
    workgroupBarrier();
    for (var off = WG / 2u; off > 0u; off /= 2u) {
        if (lid < off) {
            red[lid] = max(red[lid], red[lid + off]);
        }
        workgroupBarrier();
    }
    let gmax = red[0];
    workgroupBarrier();
    var lsum = 0.0;
    for (var s = lid; s < n; s += WG) {
        let ml = part_ml[1u + s * qcount + query];
        let w = select(exp(ml.x - gmax), 0.0, ml.x == NEG);
        wts[s] = w;
        lsum += w * ml.y;
    }
    red[lid] = lsum;
    workgroupBarrier();
    for (var off = WG / 2u; off > 0u; off /= 2u) {
        if (lid < off) {
            red[lid] += red[lid + off];
        }
        workgroupBarrier();
    }
    let l = red[0];
    let d4n = params.d4;
    for (var c = lid; c < d4n; c += WG) {
        var acc = vec4<f32>(0.0);
        for (var s = 0u; s < n; s++) {
            acc += wts[s] * part_acc[(s * qcount + query) * d4n + c];
        }
        out[query * d4n + c] = select(acc / l, vec4<f32>(0.0), l == 0.0);
    }
}
