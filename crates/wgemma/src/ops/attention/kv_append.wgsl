// KV cache append: copies the K and V rows of one forward into one chunk of a layer's cache.
// Row r of the step (r < rows = grid y, exact) has position p = positions[r] (u32 GPU buffer);
// its slot is p % slots for a sliding ring, p for a full cache (p >= slots is skipped: the host
// refuses such appends). The cache may be split along slots into chunks that each fit one
// storage binding; this kernel writes the rows whose slot is in [chunk_start, chunk_start +
// chunk_slots) and skips the others (one dispatch per chunk).
// Layouts: src [rows_alloc, kv_heads, D] f32 (vec4-read), cache chunk [sequences, kv_heads,
// chunk_slots, D]: one slot range per sequence of a model (Sequence). With sequences > 1 the
// positions buffer holds [positions of the rows, sequence of each row] (2 x rows u32), so the
// rows of one forward may belong to different sequences (continuous batching).
// Entry points (bindings 0 params, 1 positions, then):
//   append_kv: 2 K cache chunk (rw), 3 K rows, 4 V cache chunk (rw), 5 V rows.
//   append_v:  2 V cache chunk (rw), 3 V rows (K = V caches: keys are rebuilt from V).
// Grid: x = kv_heads, y = rows. Workgroup: 64 threads striding over the D/4 vec4s.

struct Params {
    kv_heads: u32,
    d4: u32,
    slots: u32,
    ring: u32,
    chunk_start: u32,
    chunk_slots: u32,
    sequences: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> positions: array<u32>;
@group(0) @binding(2) var<storage, read_write> cache_a: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> src_a: array<vec4<f32>>;
@group(0) @binding(4) var<storage, read_write> cache_b: array<vec4<f32>>;
@group(0) @binding(5) var<storage, read> src_b: array<vec4<f32>>;

const WG: u32 = 64u;

// vec4 index of the first row of row `r`'s sequence in the bound chunk (rows = grid y).
fn sequence_base(r: u32, rows: u32) -> u32 {
    if (params.sequences <= 1u) {
        return 0u;
    }
    let s = min(positions[rows + r], params.sequences - 1u);
    return s * params.kv_heads * params.chunk_slots * params.d4;
}

// The chunk-local slot of row `r`, or 0xffffffff when the row does not land in this chunk.
fn local_slot(r: u32) -> u32 {
    let p = positions[r];
    var slot = p;
    if (params.ring != 0u) {
        slot = p % params.slots;
    } else if (p >= params.slots) {
        return 0xffffffffu;
    }
    if (slot < params.chunk_start || slot - params.chunk_start >= params.chunk_slots) {
        return 0xffffffffu;
    }
    return slot - params.chunk_start;
}

@compute @workgroup_size(WG)
fn append_kv(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let slot = local_slot(wid.y);
    if (slot == 0xffffffffu) {
        return;
    }
    let d4 = params.d4;
    let src = (wid.y * params.kv_heads + wid.x) * d4;
    let dst = sequence_base(wid.y, nwg.y) + (wid.x * params.chunk_slots + slot) * d4;
    for (var i = lid; i < d4; i += WG) {
        cache_a[dst + i] = src_a[src + i];
        cache_b[dst + i] = src_b[src + i];
    }
}

@compute @workgroup_size(WG)
fn append_v(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let slot = local_slot(wid.y);
    if (slot == 0xffffffffu) {
        return;
    }
    let d4 = params.d4;
    let src = (wid.y * params.kv_heads + wid.x) * d4;
    let dst = sequence_base(wid.y, nwg.y) + (wid.x * params.chunk_slots + slot) * d4;
    for (var i = lid; i < d4; i += WG) {
        cache_a[dst + i] = src_a[src + i];
    }
}
