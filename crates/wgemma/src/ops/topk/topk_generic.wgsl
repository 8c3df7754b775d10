// TopK generic route: x f32 [rows, n] (row-major, read as raw u32 bits), any n >= 1 and
// 1 <= k <= n -> values f32 [rows, k] (the input's own bits) and indices u32 [rows, k],
// each row sorted descending.
// Order: total order on floats through a key (NaN of any payload is the greatest,
// -0 == +0, -inf < ... < +inf < NaN); equal keys: the lower index first. The order is
// strict, so every element has a unique rank = the number of elements of its row ordered
// before it, and the element of rank r < k writes slot r. The result is bit-identical to
// the fast route's.
// Workgroup 256: one thread per element; workgroup g (flat: wid.x + wid.y * nwg.x, the grid
// may be folded) handles row g / tiles, elements (g % tiles) * 256 + lid; g beyond
// rows * tiles exits. The row is streamed through workgroup memory one tile of 256 keys at
// a time; a thread stops counting once its rank reaches k, and the workgroup stops
// streaming when none of its threads can still be in the top k.

struct Params {
    n: u32,
    k: u32,
    rows: u32,
    tiles: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> x: array<u32>;
@group(0) @binding(2) var<storage, read_write> values: array<u32>;
@group(0) @binding(3) var<storage, read_write> indices: array<u32>;

const WG: u32 = 256u;

var<workgroup> tile_keys: array<u32, WG>;
var<workgroup> alive: atomic<u32>;
var<workgroup> alive_count: u32;

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
    if (g >= params.rows * params.tiles) {
        return;
    }
    let row = g / params.tiles;
    let base = row * params.n;
    let e = (g % params.tiles) * WG + lid;
    let valid = e < params.n;
    var my_bits = 0u;
    var my_key = 0u;
    if (valid) {
        my_bits = x[base + e];
        my_key = order_key(my_bits);
    }
    var rank = 0u;
    for (var t = 0u; t < params.tiles; t++) {
        let src = t * WG + lid;
        if (src < params.n) {
            tile_keys[lid] = order_key(x[base + src]);
        }
        if (lid == 0u) {
            atomicStore(&alive, 0u);
        }
        workgroupBarrier();
        if (valid && rank < params.k) {
            let m = min(WG, params.n - t * WG);
            for (var j = 0u; j < m; j++) {
                let kj = tile_keys[j];
                let other = t * WG + j;
                if (kj > my_key || (kj == my_key && other < e)) {
                    rank += 1u;
                }
            }
            if (rank < params.k) {
                atomicAdd(&alive, 1u);
            }
        }
        workgroupBarrier();
        if (lid == 0u) {
            alive_count = atomicLoad(&alive);
        }
        if (workgroupUniformLoad(&alive_count) == 0u) {
            break;
        }
    }
    if (valid && rank < params.k) {
        values[row * params.k + rank] = my_bits;
        indices[row * params.k + rank] = e;
    }
}
