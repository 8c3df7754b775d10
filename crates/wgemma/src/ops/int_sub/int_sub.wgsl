// Integer subtraction c[i] = a[i] - b[i] over flat [n] tensors of one dtype (f32: float_sub.wgsl).
// Entry `sub_i32` (i32) with wrapping (two's complement) arithmetic: WGSL integer
// arithmetic wraps, so i32::MIN - 1 == i32::MAX. The host also binds u32 tensors here:
// wrapping subtraction is the same bit operation for both.
// Workgroup 256 threads, one element each; the grid may be folded to 2-D, so the flat
// workgroup index is wid.x + wid.y * num_workgroups.x, bound-checked against n.

struct Params {
    n: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> a_i32: array<i32>;
@group(0) @binding(2) var<storage, read> b_i32: array<i32>;
@group(0) @binding(3) var<storage, read_write> c_i32: array<i32>;

const WG: u32 = 256u;

@compute @workgroup_size(WG)
fn sub_i32(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let i = (wid.x + wid.y * nwg.x) * WG + lid;
    if (i >= params.n) {
        return;
    }
    c_i32[i] = a_i32[i] - b_i32[i];
}
