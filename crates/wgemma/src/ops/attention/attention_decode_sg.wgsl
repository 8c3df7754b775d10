// attention_decode_sg: the subgroup twin of attention_decode.wgsl (same contract, geometry,
// bindings and partial layout; everything between the decode_shared markers comes from
// attention_decode_shared.wgsli, included by both). Only the per-batch lane reduction
// differs: one subgroup of VSG lanes (VSG = the device's subgroup size, which must divide D4; the host
// builds this shader only when every subgroup has exactly VSG lanes) sums its 8 partial
// dots with subgroupAdd, and its first lane stores them: no workgroup barrier per batch.
// Thread roles come from the subgroup builtins (role = subgroup_id * VSG + lane), so a
// subgroup always holds VSG consecutive columns of one key, whatever order the device
// gives invocations. The combine entry lives in attention_decode.wgsl only.

#include "attention_decode_inputs.wgsli"
#include "attention_decode_outputs.wgsli"

// Lanes reduced together per batch: one subgroup (the host sets the device's size).
override VSG: u32 = 32u;

#include "attention_decode_shared.wgsli"

#include "attention_decode_reduce_sg.wgsli"

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
