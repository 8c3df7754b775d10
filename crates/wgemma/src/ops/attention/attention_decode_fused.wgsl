// attention_decode_fused: the decode route's partial kernel (attention_decode.wgsl's contract
// and portable reduction) whose last workgroup per (row, kv head tile) also merges the
// splits (attention_decode_last_combine.wgsli): attention in one dispatch. Native only: the
// partials are @coherent (Features::MEMORY_DECORATION_COHERENT); single-chunk caches;
// binding 9 is the counters buffer (one u32 per row x kv head tile, zero between dispatches).

#include "attention_decode_inputs.wgsli"
#include "attention_decode_last_combine.wgsli"

// Lanes reduced together per batch (a virtual subgroup of 8 lanes, one per head slot).
const VSG: u32 = 8u;

#include "attention_decode_shared.wgsli"

#include "attention_decode_reduce_wg.wgsli"

@compute @workgroup_size(WG)
fn partial_fused(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    decode_partial(wid, nwg, lid, lid, 0u);
    merge_if_last(wid, nwg, lid);
}
