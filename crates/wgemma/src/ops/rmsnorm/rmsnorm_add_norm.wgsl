// Fused residual add and the next RMSNorm, one workgroup per row (decoder layers end one
// block with `h = (h + N1(x)) * out_scale` and start the next with `y = N2(h)`; fusing
// them saves a dispatch and a round trip of h):
//   N1(v) = v * in_scale / sqrt(mean((v * in_scale)^2) + eps) * w1   (w1 = 1 when has_weight == 0)
//   h     = (h + N1(x)) * out_scale                                  (residual updated in place)
//   y     = h / sqrt(mean(h^2) + eps) * w2
// Both norms compute exactly as rmsnorm.wgsl's `add` and `norm` entry points do (same
// per-thread partial sums, same tree), so the fusion changes no bit.
// Bindings: 0 params, 1 h [rows, d] (read_write), 2 w1 [d] (1-element dummy when
// has_weight == 0), 3 x [rows, d], 4 y [rows, d] (read_write), 5 w2 [d].
// Geometry as rmsnorm.wgsl: WG threads per row, thread t owns columns t, t + WG, ... (it
// re-reads the h values it wrote itself, so no barrier is needed between the passes).

#include "rmsnorm_common.wgsli"

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read_write> h: array<f32>;
@group(0) @binding(2) var<storage, read> w1: array<f32>;
@group(0) @binding(3) var<storage, read> x: array<f32>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;
@group(0) @binding(5) var<storage, read> w2: array<f32>;

fn w1_at(k: u32) -> f32 {
    if (params.has_weight != 0u) {
        return w1[k];
    }
    return 1.0;
}

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let row = row_of(wid, nwg);
    if (row >= params.rows) {
        return;
    }
    let base = row * params.d;
    var s = 0.0;
    for (var k = lid; k < params.d; k += WG) {
        let v = x[base + k] * params.in_scale;
        s += v * v;
    }
    let inv = inv_rms(workgroup_sum(s, lid));
    var s2 = 0.0;
    for (var k = lid; k < params.d; k += WG) {
        let v = x[base + k] * params.in_scale;
        let hk = (h[base + k] + v * inv * w1_at(k)) * params.out_scale;
        h[base + k] = hk;
        s2 += hk * hk;
    }
    let inv2 = inverseSqrt(workgroup_sum(s2, lid) / f32(params.d) + params.eps);
    for (var k = lid; k < params.d; k += WG) {
        y[base + k] = h[base + k] * inv2 * w2[k];
    }
}
