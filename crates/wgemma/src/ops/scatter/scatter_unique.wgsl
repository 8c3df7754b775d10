// Scatter along the last dim, parallel unique-index route: dst[r, idx[r, i]] = src[r, i],
// one thread per source element, no ordering between them. Correct ONLY when the indices of
// each row are pairwise distinct; the host takes this route only for an index tensor that
// carries a uniqueness certificate (scatter::UniqueIndices). Shapes: idx u32 [rows, s],
// src f32 [rows, s], dst f32 [rows, n]. Out-of-range rule: an index >= n is dropped.
// Workgroup 256; flat workgroup index wid.x + wid.y * nwg.x (the grid may be folded),
// bound-checked against rows * s.

struct Params {
    rows: u32,
    n: u32,
    s: u32,
    _pad: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> idx: array<u32>;
@group(0) @binding(2) var<storage, read> src: array<f32>;
@group(0) @binding(3) var<storage, read_write> dst: array<f32>;

const WG: u32 = 256u;

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let e = (wid.x + wid.y * nwg.x) * WG + lid;
    if (e >= params.rows * params.s) {
        return;
    }
    let j = idx[e];
    if (j < params.n) {
        dst[(e / params.s) * params.n + j] = src[e];
    }
}
