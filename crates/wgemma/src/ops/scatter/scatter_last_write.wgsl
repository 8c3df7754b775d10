// Scatter along the last dim, duplicate-safe (aten.scatter.src with a defined rule: among
// source elements of one row with the same index, the LAST in source order wins):
// dst[r, idx[r, i]] = src[r, i]. Shapes: idx u32 [rows, s], src f32 [rows, s],
// dst f32 [rows, n] (already holding values: only the indexed elements change).
// Out-of-range rule: an index >= n is dropped (no read, no write).
// Three entries, dispatched in order in one pass, one thread per source element (flat
// workgroup index wid.x + wid.y * nwg.x, the grid may be folded, bound-checked):
//   claim:   atomicMax(winner[r, idx], i + 1)      -> the last source position per target
//   apply:   the source whose i + 1 is the winner writes dst
//   release: winner[r, idx] = 0                    -> winner is all zeros again
// winner: u32 [rows, n], zero before claim (wgpu zero-fills it at creation and release
// restores it, touching only the claimed elements).

struct Params {
    rows: u32,
    n: u32,
    s: u32,
    _pad: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> idx: array<u32>;
@group(0) @binding(2) var<storage, read_write> winner: array<atomic<u32>>;
@group(0) @binding(3) var<storage, read> src: array<f32>;
@group(0) @binding(4) var<storage, read_write> dst: array<f32>;

const WG: u32 = 256u;

// (winner slot, source position) of this thread's element, or slot 0xffffffff when the
// thread is past the end or its index is out of range.
fn slot_of(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) -> vec2<u32> {
    let e = (wid.x + wid.y * nwg.x) * WG + lid;
    if (e >= params.rows * params.s) {
        return vec2<u32>(0xffffffffu, 0u);
    }
    let j = idx[e];
    if (j >= params.n) {
        return vec2<u32>(0xffffffffu, 0u);
    }
    return vec2<u32>((e / params.s) * params.n + j, e);
}

@compute @workgroup_size(WG)
fn claim(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let t = slot_of(wid, nwg, lid);
    if (t.x != 0xffffffffu) {
        atomicMax(&winner[t.x], t.y % params.s + 1u);
    }
}

@compute @workgroup_size(WG)
fn apply(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let t = slot_of(wid, nwg, lid);
    if (t.x != 0xffffffffu && atomicLoad(&winner[t.x]) == t.y % params.s + 1u) {
        dst[t.x] = src[t.y];
    }
}

@compute @workgroup_size(WG)
fn release(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let t = slot_of(wid, nwg, lid);
    if (t.x != 0xffffffffu) {
        atomicStore(&winner[t.x], 0u);
    }
}
