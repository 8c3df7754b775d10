// Argmax stage 1: each workgroup reduces one block of BLOCK = 256 * ITEMS elements of one
// row of x (f32 [rows, n], row-major, read as raw u32 bits) to its best (key, index) pair.
// Order: floats compared through a total-order key: NaN (any payload) is the greatest,
// -0 == +0, -inf < ... < +inf < NaN; equal keys: the lower index wins (torch.argmax's first
// occurrence). Output partial: u32 [rows * blocks * 2] as (key, index) pairs, block-major
// within a row. Workgroup 256; workgroup g (flat: wid.x + wid.y * num_workgroups.x, the grid
// may be folded) handles row g / blocks, block g % blocks; g >= rows * blocks exits.

struct Params {
    n: u32,
    rows: u32,
    blocks: u32,
    _pad: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> x: array<u32>;
@group(0) @binding(2) var<storage, read_write> partial: array<u32>;

const WG: u32 = 256u;
override ITEMS: u32 = 8u;

var<workgroup> best_key: array<u32, WG>;
var<workgroup> best_idx: array<u32, WG>;

// Total-order key of an f32 given by its bits (bit operations only: no float compare can
// be folded away by a compiler that assumes no NaN).
fn order_key(bits: u32) -> u32 {
    if ((bits & 0x7fffffffu) > 0x7f800000u) {
        return 0xffffffffu;
    }
    if (bits == 0x80000000u) {
        return 0x80000000u;
    }
    if ((bits & 0x80000000u) != 0u) {
        return ~bits;
    }
    return bits | 0x80000000u;
}

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let g = wid.x + wid.y * nwg.x;
    if (g >= params.rows * params.blocks) {
        return;
    }
    let row = g / params.blocks;
    let start = (g % params.blocks) * WG * ITEMS;
    let base = row * params.n;
    // Key 0 is below every real key (the smallest is -inf's 0x007fffff): "no element".
    var bk = 0u;
    var bi = 0xffffffffu;
    for (var j = 0u; j < ITEMS; j++) {
        let e = start + j * WG + lid;
        if (e < params.n) {
            let k = order_key(x[base + e]);
            // Indices grow along j, so strict > keeps the first occurrence.
            if (k > bk) {
                bk = k;
                bi = e;
            }
        }
    }
    best_key[lid] = bk;
    best_idx[lid] = bi;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        if (lid < s) {
            let ok = best_key[lid + s];
            let oi = best_idx[lid + s];
            if (ok > best_key[lid] || (ok == best_key[lid] && oi < best_idx[lid])) {
                best_key[lid] = ok;
                best_idx[lid] = oi;
            }
        }
        workgroupBarrier();
    }
    if (lid == 0u) {
        partial[g * 2u] = best_key[0];
        partial[g * 2u + 1u] = best_idx[0];
    }
}
