// Per-head RMSNorm then RoPE of one attention layer's q, k and v in ONE dispatch (Gemma 4
// normalises every head: q_norm and k_norm with weights, v_norm without, then rotates q
// and k). Replaces up to four dispatches (q_norm, k_norm, v_norm, rope_qk).
//
// Head slots, one workgroup each per (slot, row): grid x = nq + nk + nv, y = rows.
//   slot < nq:            q[row, h]  = rope(N(q[row, h]) * wq)               in place
//   slot < nq + nk:       k[row, h]  = rope(N(k[row, h]) * wk)               in place
//   otherwise (v heads):  v[row, h]  = N(src[row, h]), src = k when v_from_k (Gemma 4's
//                         K = V layers: V is the weightless norm of k_proj's output) else v
// N(x) = x / sqrt(mean(x^2) + eps). Tensors [rows, heads, D] f32; weights [D] f32; rope as
// rope.wgsl (rotate_half pairs (i, i + D/2), i < rot_pairs rotated, positions [rows] u32,
// inv_freq [D/2]). The norm is computed exactly as rmsnorm.wgsl does it (the same 256
// threads striding over D, the same tree), so the values match the unfused ops.
// Bindings: 0 params, 1 positions, 2 inv_freq, 3 q, 4 k, 5 v (read_write), 6 wq, 7 wk
// (unused tensors are bound to 1-element stand-ins and never touched).
//
// Entry `main_append` also appends the row's k and v heads to the layer's KV cache (the
// kv_append kernel's work, one dependent dispatch less per layer): after its head is
// written, the workgroup copies it to slot p % slots (ring) or p (full) of cache
// [sequences * kv_heads, slots, D] (8 k_cache, 9 v_cache, read_write; one chunk), with
// p = positions[row] and, with sequences > 1, the sequence positions[rows + row]. K = V
// caches hold V only (nk = 0, k_cache a stand-in). Only this entry binds 8 and 9, so `main`
// keeps 7 storage bindings (browsers guarantee 8).

struct Params {
    nq: u32,
    nk: u32,
    nv: u32,
    d: u32,
    half: u32,
    rot_pairs: u32,
    eps: f32,
    v_from_k: u32,
    // main_append only:
    kv_heads: u32,
    slots: u32,
    ring: u32,
    sequences: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> positions: array<u32>;
@group(0) @binding(2) var<storage, read> inv_freq: array<f32>;
@group(0) @binding(3) var<storage, read_write> q: array<f32>;
@group(0) @binding(4) var<storage, read_write> k: array<f32>;
@group(0) @binding(5) var<storage, read_write> v: array<f32>;
@group(0) @binding(6) var<storage, read> wq: array<f32>;
@group(0) @binding(7) var<storage, read> wk: array<f32>;

const WG: u32 = 256u;

#include "rope_sincos.wgsli"

#include "../rmsnorm/workgroup_sum.wgsli"

// Reads element i of the slot's source head.
fn src_at(kind: u32, base: u32, i: u32) -> f32 {
    if (kind == 0u) {
        return q[base + i];
    }
    if (kind == 1u || params.v_from_k == 1u) {
        return k[base + i];
    }
    return v[base + i];
}

fn weight_at(kind: u32, i: u32) -> f32 {
    if (kind == 0u) {
        return wq[i];
    }
    if (kind == 1u) {
        return wk[i];
    }
    return 1.0;
}

fn store(kind: u32, at: u32, value: f32) {
    if (kind == 0u) {
        q[at] = value;
    } else if (kind == 1u) {
        k[at] = value;
    } else {
        v[at] = value;
    }
}

// (kind: 0 q, 1 k, 2 v; head; heads of that kind) of head slot `slot`.
fn slot_kind(slot: u32) -> vec3<u32> {
    if (slot < params.nq) {
        return vec3<u32>(0u, slot, params.nq);
    }
    if (slot < params.nq + params.nk) {
        return vec3<u32>(1u, slot - params.nq, params.nk);
    }
    return vec3<u32>(2u, slot - params.nq - params.nk, params.nv);
}

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    norm_rope_head(wid.x, wid.y, lid);
}

@group(0) @binding(8) var<storage, read_write> k_cache: array<f32>;
@group(0) @binding(9) var<storage, read_write> v_cache: array<f32>;

@compute @workgroup_size(WG)
fn main_append(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    norm_rope_head(wid.x, wid.y, lid);
    // The head's values were written by other invocations of this workgroup.
    storageBarrier();
    let row = wid.y;
    let kh = slot_kind(wid.x);
    let p = positions[row];
    var cslot = p;
    if (params.ring != 0u) {
        cslot = p % params.slots;
    }
    if (kh.x == 0u || cslot >= params.slots) {
        return;
    }
    var sequence = 0u;
    if (params.sequences > 1u) {
        sequence = min(positions[nwg.y + row], params.sequences - 1u);
    }
    let d = params.d;
    let base = (row * kh.z + kh.y) * d;
    let dst = ((sequence * params.kv_heads + kh.y) * params.slots + cslot) * d;
    for (var i = lid; i < d; i += WG) {
        if (kh.x == 1u) {
            k_cache[dst + i] = k[base + i];
        } else {
            v_cache[dst + i] = v[base + i];
        }
    }
}

// Normalises (and rotates) head slot `slot` of row `row`.
fn norm_rope_head(slot: u32, row: u32, lid: u32) {
    let kh = slot_kind(slot);
    let kind = kh.x;
    let head = kh.y;
    let heads = kh.z;
    let d = params.d;
    let base = (row * heads + head) * d;
    var s = 0.0;
    for (var i = lid; i < d; i += WG) {
        let x = src_at(kind, base, i);
        s += x * x;
    }
    let inv = inverseSqrt(workgroup_sum(s, lid) / f32(d) + params.eps);
    if (kind == 2u) {
        for (var i = lid; i < d; i += WG) {
            store(kind, base + i, src_at(kind, base, i) * inv * weight_at(kind, i));
        }
        return;
    }
    // Every element is read above and written below by the owner of its pair only.
    let half = params.half;
    let pos = f32(positions[row]);
    for (var i = lid; i < half; i += WG) {
        let a = src_at(kind, base, i) * inv * weight_at(kind, i);
        let b = src_at(kind, base, i + half) * inv * weight_at(kind, i + half);
        if (i < params.rot_pairs) {
            let cs = rope_sincos(pos * inv_freq[i]);
            store(kind, base + i, a * cs.x - b * cs.y);
            store(kind, base + i + half, b * cs.x + a * cs.y);
        } else {
            store(kind, base + i, a);
            store(kind, base + i + half, b);
        }
    }
}
