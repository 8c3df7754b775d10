// attention_decode_sg: the subgroup twin of attention_decode.wgsl (same contract, geometry,
// bindings and partial layout; everything between the decode_shared markers comes from
// attention_decode_shared.wgsli, included by both). Only the per-batch lane reduction
// differs: one subgroup of VSG lanes (VSG = the device's subgroup size, which must divide D4; the host
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
    sequences: u32,
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

#include "attention_decode_shared.wgsli"

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
