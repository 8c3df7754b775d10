// q4_matvec_norm: q4_matvec.wgsl with the RMSNorm prologue of q4_matvec_norm_prologue.wgsli: x is
// not an input but built by every workgroup from the residual stream (norm, or residual
// add + norm), which removes the norm's own dispatch from the decode forward. The same
// contract, geometry, epilogues and accumulation as q4_matvec.wgsl otherwise.

#include "q4_matvec_common.wgsli"
#include "q4_matvec_norm_prologue.wgsli"
#include "q4_matvec_finish_wg.wgsli"

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let flat = wid.x + wid.y * nwg.x;
    // The first weights are requested before the prologue: they arrive while it runs.
    let rows = unit_rows(flat, lid / LANES / KSPLIT);
    let part = (lid / LANES) % KSPLIT;
    let first = first_words(rows, part, lid % LANES);
    norm_prologue(flat, lid);
    finish(flat, lid, rows, accumulate(rows, part, lid % LANES, first));
}
