// GeGLU: out[m, j] = gelu_tanh(gate[m, j]) * up[m, j], f32, with PyTorch's tanh
// approximation gelu_tanh(x) = 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3))).
// Entry points:
//   split: gate [M, I] (binding 2), up [M, I] (binding 3)
//   fused: gate_up [M, 2I] (binding 2), row m = [gate(I) | up(I)] (gate first), the output
//          of one linear with the gate rows stacked over the up rows.
// out [M, I] (binding 1, read_write); params: n = M * I, inter = I.
// Geometry: 256 threads per workgroup, one output element each; the grid may be folded to
// 2-D, so the flat index is (wid.x + wid.y * nwg.x) * 256 + lid, bound-checked against n.

struct Params {
    n: u32,
    inter: u32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;
@group(0) @binding(2) var<storage, read> gate: array<f32>;
@group(0) @binding(3) var<storage, read> up: array<f32>;

const WG: u32 = 256u;

#include "gelu_tanh.wgsli"

@compute @workgroup_size(WG)
fn split(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let i = (wid.x + wid.y * nwg.x) * WG + lid;
    if (i >= params.n) {
        return;
    }
    out[i] = gelu_tanh(gate[i]) * up[i];
}

@compute @workgroup_size(WG)
fn fused(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let i = (wid.x + wid.y * nwg.x) * WG + lid;
    if (i >= params.n) {
        return;
    }
    let m = i / params.inter;
    let j = i - m * params.inter;
    let g = m * 2u * params.inter + j;
    out[i] = gelu_tanh(gate[g]) * gate[g + params.inter];
}
