// Argmax stage 2: one workgroup per row reduces that row's `blocks` (key, index) pairs from
// stage 1 (partial: u32 [rows * blocks * 2]) and writes the winning index to out: u32 [rows].
// Same order as stage 1: greater key wins, equal keys: lower index wins. Workgroup 256; the
// row is the flat workgroup index wid.x + wid.y * num_workgroups.x (the grid may be folded);
// rows beyond params.rows exit.

struct Params {
    rows: u32,
    blocks: u32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> partial: array<u32>;
@group(0) @binding(2) var<storage, read_write> out: array<u32>;

const WG: u32 = 256u;

var<workgroup> best_key: array<u32, WG>;
var<workgroup> best_idx: array<u32, WG>;

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let row = wid.x + wid.y * nwg.x;
    if (row >= params.rows) {
        return;
    }
    var bk = 0u;
    var bi = 0xffffffffu;
    for (var b = lid; b < params.blocks; b += WG) {
        let p = (row * params.blocks + b) * 2u;
        let k = partial[p];
        let i = partial[p + 1u];
        if (k > bk || (k == bk && i < bi)) {
            bk = k;
            bi = i;
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
        out[row] = best_idx[0];
    }
}
