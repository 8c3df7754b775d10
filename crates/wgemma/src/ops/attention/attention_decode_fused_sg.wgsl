// attention_decode_fused_sg: attention_decode_fused.wgsl with the subgroup reduction of
// attention_decode_sg.wgsl (VSG = the device's subgroup size).

#include "attention_decode_inputs.wgsli"
#include "attention_decode_last_combine.wgsli"

// Lanes reduced together per batch: one subgroup (the host sets the device's size).
override VSG: u32 = 32u;

#include "attention_decode_shared.wgsli"

#include "attention_decode_reduce_sg.wgsli"

@compute @workgroup_size(WG)
fn partial_fused(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
    @builtin(subgroup_id) sg_id: u32,
    @builtin(subgroup_invocation_id) sg_lane: u32,
) {
    decode_partial(wid, nwg, lid, sg_id * VSG + sg_lane, sg_lane);
    merge_if_last(wid, nwg, lid);
}
