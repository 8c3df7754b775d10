// Device read-bandwidth probe: the roofline every kernel benchmark is compared with.
// Reads `n_vec4` vec4<u32> words of `data` and writes, per workgroup, the wrapping sum of
// what its threads read into `partial[flat workgroup index]` (so the reads cannot be
// optimised away). Each thread reads `PER_THREAD` vec4 words strided by the workgroup size
// (coalesced). Workgroup 256; the grid may be folded to 2-D.

struct Params {
    n_vec4: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> data: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read_write> partial: array<u32>;

const WG: u32 = 256u;
const PER_THREAD: u32 = 8u;

var<workgroup> sums: array<u32, WG>;

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let group = wid.x + wid.y * nwg.x;
    let base = group * WG * PER_THREAD + lid;
    var acc = vec4<u32>(0u);
    for (var i = 0u; i < PER_THREAD; i++) {
        let idx = base + i * WG;
        if (idx < params.n_vec4) {
            acc += data[idx];
        }
    }
    sums[lid] = acc.x + acc.y + acc.z + acc.w;
    workgroupBarrier();
    for (var stride = WG / 2u; stride > 0u; stride /= 2u) {
        if (lid < stride) {
            sums[lid] += sums[lid + stride];
        }
        workgroupBarrier();
    }
    if (lid == 0u) {
        partial[group] = sums[0];
    }
}
