// attention_decode: the `decode` route of attention (M <= 9 rows: decode M = 1, verify
// M = k + 1), built for bandwidth. Same semantics as attention.wgsl: scale 1.0, GQA (query
// head h reads kv head h / group), causal with an optional sliding window W (the query at
// position p sees keys k with p - W < k <= p; W = 0: 0 <= k <= p), f32 online softmax.
// Inputs: q [rows, heads, D] f32 (row r at positions[r]); K, V cache chunk [kv_heads,
// chunk_slots, D] f32, key k in slot k % slots (ring) or k - chunk_start (full cache chunk);
// D = 4 * D4 with D4 a power of two in 8..=128 (override). K = V caches (KEY_FROM_V) rebuild
// each key as rope(k_norm_weight * V, key position) from key_rope = [k_norm_weight [D],
// inv_freq [D/2]], as attention.wgsl does.
//
// Entry `partial`, workgroup (s, r, z) of 256 threads, z = kv_head * head_tiles + tile: one
// split s (of nwg.x) of row r's visible keys in this chunk, for a tile of QT <= 8 query heads
// of one kv head (QT override; nq = min(QT, group - tile * QT) are real). Thread roles: a
// key lane group is D4 threads; thread (ks, col) = (role / D4, role % D4), KP = 256 / D4 key
// groups. Each thread holds the q vec4s of column col of every head of the tile (gq0..gq7).
// The split is scanned in tiles of TK = KP * VSG keys:
//   1. scores: VSG batches of KP keys; key group ks reads key row b * KP + ks as one
//      coalesced row of D4 vec4s (four batches' rows are loaded together, so each thread
//      has four loads in flight), forms 8 partial dots and reduces them over VSG lanes
//      (`reduce_batch`: portable = through workgroup memory, 8 lanes; attention_decode_sg.wgsl
//      = subgroupAdd over one subgroup of VSG lanes, VSG a multiple of 4); the D4 / VSG lane
//      sums of each (key, head) are added per tile.
//   2. softmax: tile max per head (8 heads x 32 parts), running max m, rescale alpha,
//      probabilities P = exp(s - m) in place of the scores.
//   3. values: thread (ks, col) accumulates acc_h += P[key, h] * V[key, col] over keys
//      ks, ks + KP, ... of the tile (coalesced rows again, four in flight), acc and l in
//      registers.
//   Then acc and l are summed over the KP key groups through workgroup memory, and the split
//   writes, like attention.wgsl's partial, (m, l) to part_ml[1 + split * qcount + query] and
//   acc to part_acc[(split * qcount + query) * D4], qcount = rows * heads, split =
//   chunk_index * nwg.x + s, part_ml[0].x = f32((chunk_index + 1) * nwg.x); or, with DIRECT
//   (one split, one chunk), out = acc / l.
// Entry `combine`, workgroup (c, h, r) of 256 threads: columns [8c, 8c + 8) (vec4) of query
// (r, h); 32 lanes x 8 columns stride over the part_ml[0] splits: out = sum_s e^(m_s - M)
// acc_s / sum_s e^(m_s - M) l_s, M = max_s m_s (at most MAX_SPLITS splits).
// Empty splits hold m = NEG, l = 0 and weigh nothing. Workgroup memory: 2 x 8 KiB pools + 72 B
// (partial), 8 KiB + 3 KiB (combine). Private values only (no dynamically indexed arrays).

#include "attention_decode_inputs.wgsli"
#include "attention_decode_outputs.wgsli"

// Lanes reduced together per batch (a virtual subgroup of 8 lanes, one per head slot).
const VSG: u32 = 8u;

#include "attention_decode_shared.wgsli"

#include "attention_decode_reduce_wg.wgsli"

const MAX_SPLITS: u32 = 512u;
const CB: u32 = 8u; // vec4 columns per combine workgroup
var<workgroup> c_red: array<f32, WG>;
var<workgroup> c_wts: array<f32, MAX_SPLITS>;

fn combine_reduce(v: f32, lid: u32, is_max: bool) -> f32 {
    c_red[lid] = v;
    workgroupBarrier();
    for (var off = WG / 2u; off > 0u; off /= 2u) {
        if (lid < off) {
            if (is_max) {
                c_red[lid] = max(c_red[lid], c_red[lid + off]);
            } else {
                c_red[lid] += c_red[lid + off];
            }
        }
        workgroupBarrier();
    }
    let total = c_red[0];
    workgroupBarrier();
    return total;
}

@compute @workgroup_size(WG)
fn partial(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    decode_partial(wid, nwg, lid, lid, 0u);
}

@compute @workgroup_size(WG)
fn combine(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let qcount = nwg.z * params.heads;
    let query = wid.z * params.heads + wid.y;
    let n = min(u32(part_ml[0].x), MAX_SPLITS);
    var mx = NEG;
    for (var s = lid; s < n; s += WG) {
        mx = max(mx, part_ml[1u + s * qcount + query].x);
    }
    let gmax = combine_reduce(mx, lid, true);
    var lsum = 0.0;
    for (var s = lid; s < n; s += WG) {
        let ml = part_ml[1u + s * qcount + query];
        let w = select(exp(ml.x - gmax), 0.0, ml.x == NEG);
        c_wts[s] = w;
        lsum += w * ml.y;
    }
    let l = combine_reduce(lsum, lid, false);
    let c = wid.x * CB + lid % CB;
    var acc = vec4<f32>(0.0);
    for (var s = lid / CB; s < n; s += WG / CB) {
        acc += c_wts[s] * part_acc[(s * qcount + query) * D4 + c];
    }
    pool_a[lid] = acc;
    workgroupBarrier();
    if (lid < CB) {
        var total = vec4<f32>(0.0);
        for (var j = 0u; j < WG / CB; j++) {
            total += pool_a[j * CB + lid];
        }
        out[query * D4 + c] = select(total / l, vec4<f32>(0.0), l == 0.0);
    }
}
