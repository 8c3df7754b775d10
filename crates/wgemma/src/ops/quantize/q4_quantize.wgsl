// q4_quantize: f32 / f16 / bf16 weights -> the project's Q4 (ops/linear/quant.rs states the
// format), bit-identical to the CPU quantiser `quantize_q4`:
//   scale = f16(f32(max|w| / 7.0))            (f32 division, then f32 -> f16, both RNE)
//   q = clamp(round_ties_even(f32(w / f32(scale))), -8, 7), q = 0 when scale == 0
// Every step runs in integer arithmetic on the IEEE bit patterns, because WGSL's f32
// division is not correctly rounded (Vulkan allows 2.5 ulp) and drivers may flush
// subnormals; integer ops give the same bits on every adapter.
// Inputs: `src` u32 words holding the weights flat (f32: one per word; f16/bf16: two per
// word, even element in the low half), starting at element `src_offset`; the host has
// checked they are finite and that every scale fits f16.
// Outputs: scale element e (e < groups) covers weights [e*group, (e+1)*group) of the flat
// source; its nibbles go to `packed[packed_offset + e*group/8 ..]`, its f16 to half
// (e % 2) of `scales[scale_offset + e/2]` (an odd last element leaves the high half 0).
// Geometry: one invocation per scale word (two groups), workgroups of 64, flat index
// rebuilt from a grid that may be folded to 2-D.

struct Params {
    groups: u32,
    group: u32,
    // 0: f32, 1: f16, 2: bf16.
    dtype: u32,
    src_offset: u32,
    packed_offset: u32,
    scale_offset: u32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> src: array<u32>;
@group(0) @binding(2) var<storage, read_write> packed: array<u32>;
@group(0) @binding(3) var<storage, read_write> scales: array<u32>;

const WG: u32 = 64u;

// f16 bits -> f32 bits, exact (subnormal halves become normal floats).
fn f16_to_f32_bits(h: u32) -> u32 {
    let sign = (h & 0x8000u) << 16u;
    let e = (h >> 10u) & 31u;
    let m = h & 0x3ffu;
    if (e == 31u) {
        return sign | 0x7f800000u | (m << 13u);
    }
    if (e == 0u) {
        if (m == 0u) {
            return sign;
        }
        // m * 2^-24 with its leading one at bit p: exponent p - 24.
        let p = firstLeadingBit(m);
        return sign | ((p + 103u) << 23u) | ((m << (23u - p)) & 0x7fffffu);
    }
    return sign | ((e + 112u) << 23u) | (m << 13u);
}

// Bits of source element `i` (relative to src_offset) as an f32.
fn weight_bits(i: u32) -> u32 {
    let e = params.src_offset + i;
    if (params.dtype == 0u) {
        return src[e];
    }
    let half = (src[e / 2u] >> (16u * (e % 2u))) & 0xffffu;
    if (params.dtype == 1u) {
        return f16_to_f32_bits(half);
    }
    return half << 16u;
}

// Rounds `y` (with `sticky`: whether bits below y's last were dropped) to keep its top
// 24 bits, nearest even; returns the rounded value shifted back to y's scale. y < 2^31.
fn round24(y: u32, sticky: bool) -> u32 {
    let len = firstLeadingBit(y) + 1u;
    if (len <= 24u) {
        return y;
    }
    let drop = len - 24u;
    var z = y >> drop;
    let rem = y & ((1u << drop) - 1u);
    let half = 1u << (drop - 1u);
    if (rem > half || (rem == half && (sticky || (z & 1u) == 1u))) {
        z += 1u;
    }
    return z << drop;
}

// f16 bits of f16(f32(a / 7.0)) for a non-negative finite f32 `a` (as bits).
fn scale_bits(a: u32) -> u32 {
    let ea = a >> 23u;
    // Below 2^-100 the quotient is far under f16's smallest half-ulp (2^-25): zero.
    if (ea < 27u) {
        return 0u;
    }
    let n = (a & 0x7fffffu) | 0x800000u;
    // a / 7 = (n * 2^8 / 7) * 2^(ea - 158); n * 2^8 < 2^32.
    let y = round24((n << 8u) / 7u, ((n << 8u) % 7u) != 0u);
    // The f32 quotient: y (29-31 bits, 24 significant) times 2^(ea - 158).
    let len = firstLeadingBit(y) + 1u;
    // Unbiased exponent of the quotient: (len - 1) + ea - 158, as i32.
    let e = i32(len) - 1 + i32(ea) - 158;
    // Its 24-bit significand, leading one included.
    let sig = y >> (len - 24u);
    if (e > 15) {
        return 0x7c00u; // refused on the host before dispatch
    }
    if (e >= -14) {
        // Normal half: keep 11 of the 24 significant bits.
        var h = (u32(e + 15) << 10u) | ((sig >> 13u) & 0x3ffu);
        let r = sig & 0x1fffu;
        if (r > 0x1000u || (r == 0x1000u && (h & 1u) == 1u)) {
            h += 1u;
        }
        return h;
    }
    // Subnormal half: units of 2^-24; sig * 2^(e - 23) / 2^-24 = sig >> -(e + 1).
    let shift = u32(-(e + 1));
    if (shift > 24u) {
        return 0u;
    }
    var h = sig >> shift;
    let rem = sig & ((1u << shift) - 1u);
    let half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (h & 1u) == 1u)) {
        h += 1u;
    }
    return h;
}

// round_ties_even(f32(|w| / s)) capped at 8, for |w| as f32 bits (finite) and a non-zero
// f16 scale s, given as its integer significand d and exponent: s = d * 2^s_exp.
fn magnitude(w: u32, d: u32, s_exp: i32) -> u32 {
    let ew = w >> 23u;
    // |w| subnormal (or zero): |w| / s < 2^-126 / 2^-24, rounds to 0.
    if (ew == 0u) {
        return 0u;
    }
    let n = (w & 0x7fffffu) | 0x800000u;
    // |w| / s = (n / d) * 2^k, n in [2^23, 2^24), d in [2^(ld-1), 2^ld).
    let k = i32(ew) - 150 - s_exp;
    let ld = i32(firstLeadingBit(d)) + 1;
    // |w| / s > 2^(23 - ld + k): at least 16 rounds to >= 8.
    if (23 - ld + k >= 4) {
        return 8u;
    }
    // |w| / s < 2^(25 - ld + k): below 1/4 rounds to 0.
    if (25 - ld + k <= -2) {
        return 0u;
    }
    // Fixed point with 26 fractional bits: y = floor(|w| / s * 2^26) < 2^31, from
    // n = q0 * d + r0; here 1 <= p <= 17 and r0 << p < 2^28.
    let p = u32(k + 26);
    let q0 = n / d;
    let r0 = n % d;
    let y = (q0 << p) + ((r0 << p) / d);
    let sticky = ((r0 << p) % d) != 0u;
    // y >= 2^23 here; f32 keeps 24 significant bits of the quotient (the quotient is at
    // least 1/8, a normal float), then rounds to an integer, ties to even.
    let f = round24(y, sticky);
    var i = f >> 26u;
    let frac = f & 0x3ffffffu;
    if (frac > 0x2000000u || (frac == 0x2000000u && (i & 1u) == 1u)) {
        i += 1u;
    }
    return min(i, 8u);
}

// Quantises scale element `g` into `packed`; returns its f16 scale bits.
fn quantize_group(g: u32) -> u32 {
    let first = g * params.group;
    var m = 0u;
    for (var i = 0u; i < params.group; i++) {
        m = max(m, weight_bits(first + i) & 0x7fffffffu);
    }
    let s = scale_bits(m);
    let s_e = (s >> 10u) & 31u;
    var d = s & 0x3ffu;
    var s_exp = -24;
    if (s_e != 0u) {
        d |= 0x400u;
        s_exp = i32(s_e) - 25;
    }
    let words = params.group / 8u;
    for (var w = 0u; w < words; w++) {
        var word = 0u;
        for (var j = 0u; j < 8u; j++) {
            let bits = weight_bits(first + w * 8u + j);
            var nibble = 8u;
            if (s != 0u) {
                let r = magnitude(bits & 0x7fffffffu, d, s_exp);
                if ((bits & 0x80000000u) != 0u) {
                    nibble = 8u - r;
                } else {
                    nibble = 8u + min(r, 7u);
                }
            }
            word |= nibble << (4u * j);
        }
        packed[params.packed_offset + g * words + w] = word;
    }
    return s;
}

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let word = (wid.x + wid.y * nwg.x) * WG + lid;
    let g = 2u * word;
    if (g >= params.groups) {
        return;
    }
    var pair = quantize_group(g);
    if (g + 1u < params.groups) {
        pair |= quantize_group(g + 1u) << 16u;
    }
    scales[params.scale_offset + word] = pair;
}
