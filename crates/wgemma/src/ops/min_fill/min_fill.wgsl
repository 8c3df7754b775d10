// min_fill: dst[i] = min(src) - 1 for every i. The MTP assistant's centroid head fills the
// logits of the tokens it did not select with HF's mask value `selected_logits.min() - 1`
// before scattering the selected logits over them.
// Rules: the min is over ALL of src (HF takes one min over the whole tensor); a NaN anywhere
// in src makes the fill NaN (torch.min propagates NaN); -inf gives -inf; the subtraction is
// one f32 operation (equal to HF's f64 `min.item() - 1.0` rounded back to f32).
// Inputs: src f32 [n_src], dst f32 [n_dst]. Geometry: workgroups of 256 threads, each filling
// a block of 256 * ITEMS dst elements (flat workgroup index wid.x + wid.y * nwg.x: the grid
// may be folded to 2-D). Each workgroup reduces src itself (src is small: 4096 selected
// logits for E2B), so the op is one dispatch with no scratch buffer.

struct Params {
    n_src: u32,
    n_dst: u32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> src: array<f32>;
@group(0) @binding(2) var<storage, read_write> dst: array<f32>;

const WG: u32 = 256u;
const ITEMS: u32 = 16u;

var<workgroup> red: array<f32, WG>;

fn is_nan(x: f32) -> bool {
    return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u;
}

// min with NaN propagation (WGSL's min leaves NaN unspecified).
fn nan_min(a: f32, b: f32) -> f32 {
    if (is_nan(a)) {
        return a;
    }
    if (is_nan(b)) {
        return b;
    }
    return min(a, b);
}

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    // Seeded with an element of src (the host guarantees n_src >= 1), not +inf: WGSL
    // forbids a constant expression that evaluates to inf (Tint, in browsers, rejects it).
    var m = src[0];
    for (var i = lid; i < params.n_src; i += WG) {
        m = nan_min(m, src[i]);
    }
    red[lid] = m;
    workgroupBarrier();
    for (var off = WG / 2u; off > 0u; off /= 2u) {
        if (lid < off) {
            red[lid] = nan_min(red[lid], red[lid + off]);
        }
        workgroupBarrier();
    }
    let fill = red[0] - 1.0;
    let base = (wid.x + wid.y * nwg.x) * WG * ITEMS;
    for (var j = 0u; j < ITEMS; j++) {
        let i = base + j * WG + lid;
        if (i < params.n_dst) {
            dst[i] = fill;
        }
    }
}
