// Float subtraction c[i] = a[i] - b[i] over flat f32 [n] tensors (IEEE; the float half of
// the `int_sub` op's all-int-or-all-float contract).
// Workgroup 256 threads, one element each; the grid may be folded to 2-D, so the flat
// workgroup index is wid.x + wid.y * num_workgroups.x, bound-checked against n.

struct Params {
    n: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(0) @binding(3) var<storage, read_write> c: array<f32>;

const WG: u32 = 256u;

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let i = (wid.x + wid.y * nwg.x) * WG + lid;
    if (i >= params.n) {
        return;
    }
    c[i] = a[i] - b[i];
}
