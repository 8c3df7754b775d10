// Elementwise f32 ops: out[i] = a[i] + b[i] (op 0), a[i] * b[i] (op 1), a[i] * scale (op 2).
// Shapes: a, b, out flat [n] (for scale the host binds a as b). Workgroup 256 threads, one element each; the grid may be
// folded to 2-D, so the flat workgroup index is wid.x + wid.y * num_workgroups.x.

struct Params {
    n: u32,
    op: u32,
    scale: f32,
    _pad: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;

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
    switch params.op {
        case 0u: { out[i] = a[i] + b[i]; }
        case 1u: { out[i] = a[i] * b[i]; }
        default: { out[i] = a[i] * params.scale; }
    }
}
