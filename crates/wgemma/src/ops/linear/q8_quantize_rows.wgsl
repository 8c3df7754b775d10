// q8_quantize_rows: the activations of the int8 prefill GEMM (q4_gemm_int8.wgsl), x f32
// [M, K] (K % 32 == 0) quantised per block of 32 once per linear, by the int8 matvecs' own
// quantiser (q4_matvec_q8_quantize_wg.wgsli: d = max|x| * (1 / 127),
// q = round(x * (127 / max|x|)), ties to even, packed in the Q4 nibble order), so a row
// rounds the same way at every batch size. The quantiser fills the workgroup stage
// (int8_stage.wgsli) with one row's chunk of CHUNK_WORDS blocks; the workgroup copies it out.
//
// Output `xq` (vec4<u32>): the packed bytes, block b of row m at 2 (m * KB + b) and the next
// (KB = K / 32); then from `params.d_base` each row's (d, 8 sum q) pairs as f32 bits, two
// blocks to a vec4: row m's block b at d_base + (m * KBP + b) / 2, components 2 (b % 2) and
// 2 (b % 2) + 1 (KBP = KB rounded up to even, so a pair never spans two rows).
//
// Geometry: WG invocations, one per block; workgroup t (flat index wid.x + wid.y * nwg.x)
// quantises row t / chunks, blocks CHUNK_WORDS (t % chunks) onward.

struct Params {
    m: u32,
    k: u32,
    chunks: u32,
    d_base: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> xq_out: array<vec4<u32>>;

// The quantiser's includer contract: one activation row per stage (MV_M), WG invocations,
// row_words() and x_vec4(m, k4).
const WG: u32 = 64u;
const MV_M: u32 = 1u;

#include "int8_stage.wgsli"

// The row this workgroup quantises.
var<private> row: u32;

fn row_words() -> u32 {
    return params.k / 32u;
}

fn x_vec4(m: u32, k4: u32) -> vec4<f32> {
    return x[(row + m) * (params.k / 4u) + k4];
}

#include "q4_matvec_q8_quantize_wg.wgsli"

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let t = wid.x + wid.y * nwg.x;
    if (t >= params.m * params.chunks) {
        return;
    }
    row = t / params.chunks;
    let c0 = (t % params.chunks) * CHUNK_WORDS;
    quantize_chunk(c0, lid);
    workgroupBarrier();
    let kb = row_words();
    let b = c0 + lid;
    if (lid < CHUNK_WORDS && b < kb) {
        let i = row * kb + b;
        xq_out[2u * i] = xq[2u * lid];
        xq_out[2u * i + 1u] = xq[2u * lid + 1u];
        // Even blocks write their pair (CHUNK_WORDS is even: the odd one is staged here).
        if (b % 2u == 0u) {
            let kbp = (kb + 1u) & ~1u;
            let d0 = xd[lid];
            var d1 = vec2<f32>(0.0);
            if (b + 1u < kb) {
                d1 = xd[lid + 1u];
            }
            xq_out[params.d_base + (row * kbp + b) / 2u] = bitcast<vec4<u32>>(vec4<f32>(d0, d1));
        }
    }
}
