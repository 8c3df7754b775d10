// Gather rows of one chunk of a table of 4-byte words: out[i, :] = table[idx[i], :] for the
// output rows whose index falls in this chunk's rows [start, end). Serves f32, u32 and i32
// tables, and f16 tables with an even row length (two halves per word, rows word-aligned).
// Shapes: table chunk u32 [end - start, cols] (cols in words), idx u32 [n_idx],
// out u32 [n_idx, cols]. Out-of-range rule: an index >= total_rows is never read; its output
// row is written with zeros by the chunk kernel that has zero_oob = 1 (the last chunk), so
// with one kernel per chunk every output row is written exactly once.
// Workgroup 256, one output word per thread; flat workgroup index wid.x + wid.y * nwg.x (the
// grid may be folded), bound-checked against n_idx * cols.

struct Params {
    n_idx: u32,
    cols: u32,
    start: u32,
    end: u32,
    total_rows: u32,
    zero_oob: u32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> table: array<u32>;
@group(0) @binding(2) var<storage, read> idx: array<u32>;
@group(0) @binding(3) var<storage, read_write> out: array<u32>;

const WG: u32 = 256u;

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let e = (wid.x + wid.y * nwg.x) * WG + lid;
    if (e >= params.n_idx * params.cols) {
        return;
    }
    let i = e / params.cols;
    let col = e % params.cols;
    let r = idx[i];
    if (r >= params.start && r < params.end) {
        out[e] = table[(r - params.start) * params.cols + col];
    } else if (params.zero_oob != 0u && r >= params.total_rows) {
        out[e] = 0u;
    }
}
