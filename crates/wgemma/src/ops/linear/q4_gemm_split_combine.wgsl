// q4_gemm_split_combine: y[m, y_offset + n] = the sum, in split order, of the SPLITS partial
// blocks q4_gemm_coop_split wrote for (m, n)'s 128 x 128 tile. One invocation per element
// of every tile (64 workgroups of 256 per tile), partials read coalesced; rows and columns
// past the matrix are not written. A dispatch of its own rather than the tile's last
// workgroup: that one workgroup's pass over SPLITS x 64 KiB of coherent loads took ~100 us
// on the H200 (BENCHMARKS.md, run pre-4).

struct Params {
    m: u32,
    n: u32,
    k: u32,
    groups: u32,
    y_stride: u32,
    y_offset: u32,
    _pad0: u32,
    _pad1: u32,
}

override SPLITS: u32 = 2u;

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> partials: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;

const WG: u32 = 256u;
const BM: u32 = 128u;
const BN: u32 = 128u;
const BLOCK: u32 = 16384u;

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let flat = wid.x + wid.y * nwg.x;
    let per_tile = BLOCK / WG;
    let tile = flat / per_tile;
    let n_tiles = (params.n + BN - 1u) / BN;
    if (tile >= n_tiles * ((params.m + BM - 1u) / BM)) {
        return;
    }
    let e = (flat % per_tile) * WG + lid;
    let m = (tile / n_tiles) * BM + e / BN;
    let n = (tile % n_tiles) * BN + e % BN;
    if (m < params.m && n < params.n) {
        let base = tile * SPLITS * BLOCK + e;
        var sum = 0.0;
        for (var j = 0u; j < SPLITS; j++) {
            sum += partials[base + j * BLOCK];
        }
        y[m * params.y_stride + params.y_offset + n] = sum;
    }
}
