// GeGLU with a strided `up` operand (Gemma 4's per-layer-input gate):
//   out[m, j] = gelu_tanh(gate[m, j]) * up[m * up_stride + up_offset + j]
// gate, out: [M, I] f32; up: f32 rows of `up_stride` floats, of which this layer's slice
// starts at `up_offset` (HF `per_layer_inputs[:, :, layer, :]` of a [M, layers * I] tensor).
// 256 threads per workgroup, one output element each; the grid may be folded to 2-D.

struct Params {
    n: u32,
    inter: u32,
    up_stride: u32,
    up_offset: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;
@group(0) @binding(2) var<storage, read> gate: array<f32>;
@group(0) @binding(3) var<storage, read> up: array<f32>;

const WG: u32 = 256u;

#include "gelu_tanh.wgsli"

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
    let m = i / params.inter;
    let j = i - m * params.inter;
    out[i] = gelu_tanh(gate[i]) * up[m * params.up_stride + params.up_offset + j];
}
