// RoPE, rotate_half layout (HF `apply_rotary_pos_emb`), f32, on activations [rows, heads, D]:
// for each pair i < D/2, (x[i], x[i + D/2]) -> (x[i] c - x[i + D/2] s, x[i + D/2] c + x[i] s)
// with c, s = cos, sin(f32(pos) * inv_freq[i]) and pos = positions[row] (u32 GPU buffer, so a
// kernel built once serves every step). inv_freq [D/2] is precomputed on the host exactly as HF
// does; pairs i >= rot_pairs have inv_freq 0 (HF "proportional": they pass through unchanged).
// cos/sin are computed here from the f32 angle with an exact Cody-Waite reduction (angles reach
// ~1e5 rad at long context, where hardware sin/cos are inaccurate); positions must be < 2^18.
//
// Entry points (bindings 0 params, 1 positions [rows] u32, 2 inv_freq [D/2] f32, then):
//   rope_inplace:    3 x [rows, heads_a, D] rotated in place.
//   rope_out:        3 x [rows, heads_a, D] read, 4 y [rows, heads_a, D] = rope(x).
//   rope_qk_inplace: 3 x = q [rows, heads_a, D] and 4 y = k [rows, heads_b, D], both in place.
// Grid: x = heads_a (+ heads_b for rope_qk_inplace), y = rows of this step (exact, so no
// bound check on rows). Workgroup: 64 threads striding over the D/2 pairs of one (row, head).

struct Params {
    heads_a: u32,
    heads_b: u32,
    half: u32,
    rot_pairs: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> positions: array<u32>;
@group(0) @binding(2) var<storage, read> inv_freq: array<f32>;
@group(0) @binding(3) var<storage, read_write> x: array<f32>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;

const WG: u32 = 64u;

#include "rope_sincos.wgsli"

@compute @workgroup_size(WG)
fn rope_inplace(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let half = params.half;
    let base = (wid.y * params.heads_a + wid.x) * 2u * half;
    let pos = f32(positions[wid.y]);
    for (var i = lid; i < params.rot_pairs; i += WG) {
        let cs = rope_sincos(pos * inv_freq[i]);
        let a = x[base + i];
        let b = x[base + i + half];
        x[base + i] = a * cs.x - b * cs.y;
        x[base + i + half] = b * cs.x + a * cs.y;
    }
}

@compute @workgroup_size(WG)
fn rope_out(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let half = params.half;
    let base = (wid.y * params.heads_a + wid.x) * 2u * half;
    let pos = f32(positions[wid.y]);
    for (var i = lid; i < half; i += WG) {
        let a = x[base + i];
        let b = x[base + i + half];
        if (i < params.rot_pairs) {
            let cs = rope_sincos(pos * inv_freq[i]);
            y[base + i] = a * cs.x - b * cs.y;
            y[base + i + half] = b * cs.x + a * cs.y;
        } else {
            y[base + i] = a;
            y[base + i + half] = b;
        }
    }
}

@compute @workgroup_size(WG)
fn rope_qk_inplace(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let half = params.half;
    let pos = f32(positions[wid.y]);
    if (wid.x < params.heads_a) {
        let base = (wid.y * params.heads_a + wid.x) * 2u * half;
        for (var i = lid; i < params.rot_pairs; i += WG) {
            let cs = rope_sincos(pos * inv_freq[i]);
            let a = x[base + i];
            let b = x[base + i + half];
            x[base + i] = a * cs.x - b * cs.y;
            x[base + i + half] = b * cs.x + a * cs.y;
        }
    } else {
        let base = (wid.y * params.heads_b + wid.x - params.heads_a) * 2u * half;
        for (var i = lid; i < params.rot_pairs; i += WG) {
            let cs = rope_sincos(pos * inv_freq[i]);
            let a = y[base + i];
            let b = y[base + i + half];
            y[base + i] = a * cs.x - b * cs.y;
            y[base + i + half] = b * cs.x + a * cs.y;
        }
    }
}
