// Tiled causal attention for prefill chunks on the tensor cores: attention_tiled.wgsl's
// contract, grid, tiles (BQ = 64 queries at D 256, 32 at D 512), key spans and outputs
// (DIRECT: out = O / l; else the split's partials and (m, l) for `attention.wgsl`'s
// combine), with S = Q K^T and O += P V as 16x16x16 cooperative matrices (`coop_mat16x16`,
// f16 A and B, f32 accumulators). Taken instead of the f32 kernel where the adapter offers
// them, subgroups are exactly 32 wide and subgroup operations exist (tiled.rs guards).
//
// Numbers: Q, K and V are rounded to f16 when staged (the model's q and k are RMS-normed,
// V values are activations: far inside f16's range); scores are f32 sums of the f16
// products, softmax runs in f32, P = e^(s - m) is rounded to f16 and l sums exactly those
// rounded P, so O / l is a convex combination of the f16 V rows.
//
// Online softmax without rescaling O every block: a cooperative matrix cannot be scaled per
// row, so a row's running max m only moves when a block's max exceeds it by more than TAU
// (P <= e^TAU = 2981 then, exact enough in f16, its products summed in f32). When some
// row's m moves while O holds something, the accumulators go through workgroup memory once
// to be scaled by e^(m_old - m_new); prompts rarely need it after their first blocks. The
// combine takes any m per split (it rescales by its own max), so m need not be the max.
//
// Geometry: 256 invocations = 8 subgroups of 32 (subgroup s = invocations 32s..32s+31,
// the guard's exact subgroup size). D is cut into NS = D / 128 slices; subgroup s owns
// query tile qt = s % QT (QT = BQ / 16) and slice c = s / QT: its 16 queries' Q slice as
// eight A fragments held for the whole kernel (staged once, 32 of D per round), and their
// O slice as eight f32 accumulators. Per block of BK keys (32 at D 256, 16 at D 512: the
// block is 8,192 values either way):
//   K block (fetched into registers during the previous block's P V) -> kv (f16, row
//     stride D + 8 halves); the V block's loads are issued; each subgroup multiplies its Q
//     slice by the block's K slice: a partial S (16 x BK) per slice into sc;
//   softmax: TPR = 4 invocations per query row (KPT = BK / 4 keys each) sum the
//     NS partials, mask (causal, window, block end), reduce the block max and the row sum
//     with subgroup shuffles, write P (f16) to pm, update m, l and alpha; then the V block
//     replaces K in kv (zeros past the block: 0 x garbage could be NaN) and the next K
//     block's loads are issued;
//   optional rescale of O (see above), then O += P V (A = P rows, B = V row-major).
// Every matrix operation runs in workgroup-uniform control flow; the staging areas are
// only reused across a workgroupBarrier.
// Workgroup memory: kv 2112 vec4<f16> (16,896 B), sc 4096 f32 (16,384 B, also the
// accumulators' 16 x 16 staging for rescales and the epilogue), pm 640 vec4<f16>
// (5,120 B), zeros 256 f32 (1,024 B), 5 x 64 row values (1,280 B), span and flag: 40,720 B.

enable f16;
enable wgpu_cooperative_matrix;

#include "attention_io.wgsli"

const WG: u32 = 256u;
const BQ_MAX: u32 = 64u;
// Q staging row stride per (query, slice) in vec4<f16>: 32 halves + 8 of padding.
const QLD: u32 = 10u;
const NEG: f32 = -3.0e38;
// A row's m moves only when a block's max passes it by more than this (P <= e^TAU).
const TAU: f32 = 8.0;
// Softmax invocations per query row; each takes BK / TPR keys (8 at D 256: all 256
// invocations work; 4 at D 512: 128 of them).
const TPR: u32 = 4u;

override DIRECT: bool = false;
// Queries per tile (64 at D 256, 32 at D 512) and keys per block (32 / 16).
override BQ: u32 = 64u;
override BK: u32 = 32u;
// D / 128: the slices of D, one per subgroup of a query tile.
override NS: u32 = 2u;

var<workgroup> kv: array<vec4<f16>, 2112>;
var<workgroup> sc: array<f32, 4096>;
var<workgroup> pm: array<vec4<f16>, 640>;
var<workgroup> zc: array<f32, 256>;
var<workgroup> row_lo: array<u32, BQ_MAX>;
var<workgroup> row_hi: array<u32, BQ_MAX>;
var<workgroup> m_run: array<f32, BQ_MAX>;
var<workgroup> l_run: array<f32, BQ_MAX>;
var<workgroup> alpha: array<f32, BQ_MAX>;
var<workgroup> span_wg: vec2<u32>;
var<workgroup> rescale_wg: u32;

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

// The q vec4 of tile query qi at vec4 column c4 (zero past the tile).
fn q_vec(t: Tile, qi: u32, c4: u32) -> vec4<f32> {
    let rl = qi / t.gt;
    let hl = qi % t.gt;
    if (rl < t.nr && hl < t.nq) {
        return q[((t.r0 + rl) * params.heads + t.h0 + hl) * params.d4 + c4];
    }
    return vec4<f32>(0.0);
}

// Round r of the Q staging: D values [128 c + 32 r, +32) of every query and slice c, as
// f16 at kv[(qi * NS + c) * QLD ..]. BQ * NS * 8 = 1024 vec4s: 4 per invocation.
fn stage_q(t: Tile, lid: u32, round: u32) {
    for (var e = 0u; e < 4u; e++) {
        let i = lid + e * WG;
        let qi = i / (NS * 8u);
        let c = (i / 8u) % NS;
        let j = i % 8u;
        kv[(qi * NS + c) * QLD + j] = vec4<f16>(q_vec(t, qi, c * 32u + round * 8u + j));
    }
}

// The next K or V block, held in registers while the tensor cores work (named, not an
// array: nothing indexed at run time may leave registers): 8 vec4s per invocation.
var<private> f0: vec4<f32>;
var<private> f1: vec4<f32>;
var<private> f2: vec4<f32>;
var<private> f3: vec4<f32>;
var<private> f4: vec4<f32>;
var<private> f5: vec4<f32>;
var<private> f6: vec4<f32>;
var<private> f7: vec4<f32>;

// vec4 i (< 2048) of the K (values = false) or V block at kb with nk keys: row i / (D / 4);
// zeros past nk (0 x garbage could be NaN).
fn block_vec(t: Tile, values: bool, i: u32, kb: u32, nk: u32) -> vec4<f32> {
    let kj = i / params.d4;
    if (kj >= nk) {
        return vec4<f32>(0.0);
    }
    let at = key_row(kb + kj, t.kvh) + i % params.d4;
    if (values) {
        return v_cache[at];
    }
    return k_cache[at];
}

// Loads a block (BK * D / 4 = 2048 vec4s: 8 per invocation) into f0..f7.
fn fetch(t: Tile, values: bool, lid: u32, kb: u32, nk: u32) {
    f0 = block_vec(t, values, lid, kb, nk);
    f1 = block_vec(t, values, lid + WG, kb, nk);
    f2 = block_vec(t, values, lid + 2u * WG, kb, nk);
    f3 = block_vec(t, values, lid + 3u * WG, kb, nk);
    f4 = block_vec(t, values, lid + 4u * WG, kb, nk);
    f5 = block_vec(t, values, lid + 5u * WG, kb, nk);
    f6 = block_vec(t, values, lid + 6u * WG, kb, nk);
    f7 = block_vec(t, values, lid + 7u * WG, kb, nk);
}

fn put_vec(i: u32, v: vec4<f32>) {
    let d4n = params.d4;
    kv[(i / d4n) * (d4n + 2u) + i % d4n] = vec4<f16>(v);
}

// The fetched block into kv as f16 rows of D + 8 halves.
fn put(lid: u32) {
    put_vec(lid, f0);
    put_vec(lid + WG, f1);
    put_vec(lid + 2u * WG, f2);
    put_vec(lid + 3u * WG, f3);
    put_vec(lid + 4u * WG, f4);
    put_vec(lid + 5u * WG, f5);
    put_vec(lid + 6u * WG, f6);
    put_vec(lid + 7u * WG, f7);
}

fn row_max(v: f32) -> f32 {
    var m = v;
    for (var o = 1u; o < TPR; o *= 2u) {
        m = max(m, subgroupShuffleXor(m, o));
    }
    return m;
}

fn row_sum(v: f32) -> f32 {
    var s = v;
    for (var o = 1u; o < TPR; o *= 2u) {
        s += subgroupShuffleXor(s, o);
    }
    return s;
}

// The block's softmax step for invocation `role` (= 32 subgroup + lane: TPR consecutive
// lanes of one subgroup share a row; roles past BQ rows only join the shuffles): P into
// pm (whole vec4s: BK / TPR is 4 or 8), m, l and alpha updated, rescale_wg set when a row with
// something in O moved its m. Called by every invocation.
fn softmax(role: u32, kb: u32, nk: u32, gt: u32) {
    let row = role / TPR;
    let in_tile = row < BQ;
    let kpt = BK / TPR;
    let k0 = (role % TPR) * kpt;
    var mx = NEG;
    if (in_tile) {
        let rl = row / gt;
        let lo = row_lo[rl];
        let hi = row_hi[rl];
        for (var j = 0u; j < kpt; j++) {
            let kj = k0 + j;
            var s = 0.0;
            for (var c = 0u; c < NS; c++) {
                s += sc[(c * BQ + row) * BK + kj];
            }
            let key = kb + kj;
            s = select(NEG, s, kj < nk && key >= lo && key < hi);
            // The summed, masked score back into slice 0 (this invocation's own entry).
            sc[row * BK + kj] = s;
            mx = max(mx, s);
        }
    }
    mx = row_max(mx);
    var m_old = NEG;
    if (in_tile) {
        m_old = m_run[row];
    }
    let m_new = select(m_old, mx, mx > m_old + TAU);
    var sum = 0.0;
    if (in_tile) {
        let ldp = BK / 4u + 2u;
        var pv = vec4<f16>(0.0);
        for (var j = 0u; j < kpt; j++) {
            let kj = k0 + j;
            let s = sc[row * BK + kj];
            let p = f16(select(exp(s - m_new), 0.0, s == NEG));
            pv[j % 4u] = p;
            sum += f32(p);
            if (j % 4u == 3u) {
                pm[row * ldp + kj / 4u] = pv;
            }
        }
    }
    sum = row_sum(sum);
    if (in_tile && role % TPR == 0u) {
        // m_old = NEG (nothing seen yet): O and l are zero, exp gives 0.
        let a = select(exp(m_old - m_new), 1.0, m_new == m_old);
        alpha[row] = a;
        m_run[row] = m_new;
        l_run[row] = l_run[row] * a + sum;
        if (m_new != m_old && m_old != NEG) {
            rescale_wg = 1u;
        }
    }
}

// Scales the rows of the subgroup's 16 x 16 staging at sc[base..] (just stored,
// row-major) by alpha of query tile qt. Called by every invocation (barriers inside).
fn scale_rows(base: u32, lane: u32, qt: u32) {
    workgroupBarrier();
    for (var e = 0u; e < 8u; e++) {
        let i = lane + e * 32u;
        sc[base + i] *= alpha[qt * 16u + i / 16u];
    }
    workgroupBarrier();
}

// Writes the subgroup's 16 x 16 staging at sc[base..] (just stored, row-major): output rows
// of query tile qt, vec4 columns c0..c0+3: out / l (DIRECT) or the split's partial. Called
// by every invocation (barriers inside).
fn emit(t: Tile, lane: u32, base: u32, qt: u32, c0: u32) {
    workgroupBarrier();
    for (var e = 0u; e < 2u; e++) {
        let i = lane + e * 32u;
        let r = i / 4u;
        let c4 = i % 4u;
        let at = base + r * 16u + c4 * 4u;
        let v = vec4<f32>(sc[at], sc[at + 1u], sc[at + 2u], sc[at + 3u]);
        let qi = qt * 16u + r;
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
    @builtin(subgroup_id) sg: u32,
    @builtin(subgroup_invocation_id) lane: u32,
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
    // Roles from the subgroup builtins: a subgroup's matrices and its softmax rows belong
    // to one subgroup whatever order the device numbers invocations in.
    let role = sg * 32u + lane;
    let qt = sg % (BQ / 16u);
    let c = sg / (BQ / 16u);
    let ldk = params.d4 + 2u;
    let ldp = BK / 4u + 2u;

    zc[lid] = 0.0;
    if (lid < BQ_MAX) {
        m_run[lid] = NEG;
        l_run[lid] = 0.0;
        alpha[lid] = 1.0;
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
    if (lid == 0u) {
        rescale_wg = 0u;
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

    // The subgroup's Q slice: eight 16 x 16 A fragments, two per staging round.
    let qa = (qt * 16u * NS + c) * QLD;
    let qld = NS * QLD;
    stage_q(t, lid, 0u);
    workgroupBarrier();
    let q0 = coopLoadT<coop_mat16x16<f16, A>>(&kv[qa], qld);
    let q1 = coopLoadT<coop_mat16x16<f16, A>>(&kv[qa + 4u], qld);
    workgroupBarrier();
    stage_q(t, lid, 1u);
    workgroupBarrier();
    let q2 = coopLoadT<coop_mat16x16<f16, A>>(&kv[qa], qld);
    let q3 = coopLoadT<coop_mat16x16<f16, A>>(&kv[qa + 4u], qld);
    workgroupBarrier();
    stage_q(t, lid, 2u);
    workgroupBarrier();
    let q4 = coopLoadT<coop_mat16x16<f16, A>>(&kv[qa], qld);
    let q5 = coopLoadT<coop_mat16x16<f16, A>>(&kv[qa + 4u], qld);
    workgroupBarrier();
    stage_q(t, lid, 3u);
    workgroupBarrier();
    let q6 = coopLoadT<coop_mat16x16<f16, A>>(&kv[qa], qld);
    let q7 = coopLoadT<coop_mat16x16<f16, A>>(&kv[qa + 4u], qld);
    var o0 = coopLoad<coop_mat16x16<f32, C>>(&zc[0], 16u);
    var o1 = o0;
    var o2 = o0;
    var o3 = o0;
    var o4 = o0;
    var o5 = o0;
    var o6 = o0;
    var o7 = o0;
    workgroupBarrier();

    fetch(t, false, lid, span.x, min(BK, span.y - span.x));
    for (var kb = span.x; kb < span.y; kb += BK) {
        let nk = min(BK, span.y - kb);
        if (lid == 0u) {
            rescale_wg = 0u;
        }
        put(lid);
        workgroupBarrier();
        // The V block's loads fly while S is computed.
        fetch(t, true, lid, kb, nk);
        // S partial of slice c: this subgroup's 16 queries x the block's keys, 16 at a time.
        for (var kt = 0u; kt < BK / 16u; kt++) {
            let kp = kt * 16u * ldk + c * 32u;
            var s = coopLoad<coop_mat16x16<f32, C>>(&zc[0], 16u);
            s = coopMultiplyAdd(q0, coopLoad<coop_mat16x16<f16, B>>(&kv[kp], ldk), s);
            s = coopMultiplyAdd(q1, coopLoad<coop_mat16x16<f16, B>>(&kv[kp + 4u], ldk), s);
            s = coopMultiplyAdd(q2, coopLoad<coop_mat16x16<f16, B>>(&kv[kp + 8u], ldk), s);
            s = coopMultiplyAdd(q3, coopLoad<coop_mat16x16<f16, B>>(&kv[kp + 12u], ldk), s);
            s = coopMultiplyAdd(q4, coopLoad<coop_mat16x16<f16, B>>(&kv[kp + 16u], ldk), s);
            s = coopMultiplyAdd(q5, coopLoad<coop_mat16x16<f16, B>>(&kv[kp + 20u], ldk), s);
            s = coopMultiplyAdd(q6, coopLoad<coop_mat16x16<f16, B>>(&kv[kp + 24u], ldk), s);
            s = coopMultiplyAdd(q7, coopLoad<coop_mat16x16<f16, B>>(&kv[kp + 28u], ldk), s);
            coopStoreT(s, &sc[(c * BQ + qt * 16u) * BK + kt * 16u], BK);
        }
        workgroupBarrier();
        softmax(role, kb, nk, gt);
        put(lid);
        // The next K block's loads fly while P V is computed (zeros past the span).
        let kn = kb + BK;
        fetch(t, false, lid, kn, select(0u, min(BK, span.y - kn), kn < span.y));
        if (workgroupUniformLoad(&rescale_wg) != 0u) {
            let base = sg * 256u;
            coopStoreT(o0, &sc[base], 16u);
            scale_rows(base, lane, qt);
            o0 = coopLoadT<coop_mat16x16<f32, C>>(&sc[base], 16u);
            workgroupBarrier();
            coopStoreT(o1, &sc[base], 16u);
            scale_rows(base, lane, qt);
            o1 = coopLoadT<coop_mat16x16<f32, C>>(&sc[base], 16u);
            workgroupBarrier();
            coopStoreT(o2, &sc[base], 16u);
            scale_rows(base, lane, qt);
            o2 = coopLoadT<coop_mat16x16<f32, C>>(&sc[base], 16u);
            workgroupBarrier();
            coopStoreT(o3, &sc[base], 16u);
            scale_rows(base, lane, qt);
            o3 = coopLoadT<coop_mat16x16<f32, C>>(&sc[base], 16u);
            workgroupBarrier();
            coopStoreT(o4, &sc[base], 16u);
            scale_rows(base, lane, qt);
            o4 = coopLoadT<coop_mat16x16<f32, C>>(&sc[base], 16u);
            workgroupBarrier();
            coopStoreT(o5, &sc[base], 16u);
            scale_rows(base, lane, qt);
            o5 = coopLoadT<coop_mat16x16<f32, C>>(&sc[base], 16u);
            workgroupBarrier();
            coopStoreT(o6, &sc[base], 16u);
            scale_rows(base, lane, qt);
            o6 = coopLoadT<coop_mat16x16<f32, C>>(&sc[base], 16u);
            workgroupBarrier();
            coopStoreT(o7, &sc[base], 16u);
            scale_rows(base, lane, qt);
            o7 = coopLoadT<coop_mat16x16<f32, C>>(&sc[base], 16u);
            workgroupBarrier();
        }
        // O += P V: A = 16 queries x 16 keys of P, B = 16 keys x 16 columns of V.
        for (var kc = 0u; kc < BK / 16u; kc++) {
            let p = coopLoadT<coop_mat16x16<f16, A>>(&pm[qt * 16u * ldp + kc * 4u], ldp);
            let vp = kc * 16u * ldk + c * 32u;
            o0 = coopMultiplyAdd(p, coopLoadT<coop_mat16x16<f16, B>>(&kv[vp], ldk), o0);
            o1 = coopMultiplyAdd(p, coopLoadT<coop_mat16x16<f16, B>>(&kv[vp + 4u], ldk), o1);
            o2 = coopMultiplyAdd(p, coopLoadT<coop_mat16x16<f16, B>>(&kv[vp + 8u], ldk), o2);
            o3 = coopMultiplyAdd(p, coopLoadT<coop_mat16x16<f16, B>>(&kv[vp + 12u], ldk), o3);
            o4 = coopMultiplyAdd(p, coopLoadT<coop_mat16x16<f16, B>>(&kv[vp + 16u], ldk), o4);
            o5 = coopMultiplyAdd(p, coopLoadT<coop_mat16x16<f16, B>>(&kv[vp + 20u], ldk), o5);
            o6 = coopMultiplyAdd(p, coopLoadT<coop_mat16x16<f16, B>>(&kv[vp + 24u], ldk), o6);
            o7 = coopMultiplyAdd(p, coopLoadT<coop_mat16x16<f16, B>>(&kv[vp + 28u], ldk), o7);
        }
        workgroupBarrier();
    }

    // O through the subgroup's 16 x 16 staging (sc is free: the last barrier passed).
    let base = sg * 256u;
    let c0 = c * 32u;
    coopStoreT(o0, &sc[base], 16u);
    emit(t, lane, base, qt, c0);
    coopStoreT(o1, &sc[base], 16u);
    emit(t, lane, base, qt, c0 + 4u);
    coopStoreT(o2, &sc[base], 16u);
    emit(t, lane, base, qt, c0 + 8u);
    coopStoreT(o3, &sc[base], 16u);
    emit(t, lane, base, qt, c0 + 12u);
    coopStoreT(o4, &sc[base], 16u);
    emit(t, lane, base, qt, c0 + 16u);
    coopStoreT(o5, &sc[base], 16u);
    emit(t, lane, base, qt, c0 + 20u);
    coopStoreT(o6, &sc[base], 16u);
    emit(t, lane, base, qt, c0 + 24u);
    coopStoreT(o7, &sc[base], 16u);
    emit(t, lane, base, qt, c0 + 28u);
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
