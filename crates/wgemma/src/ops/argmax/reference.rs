//! CPU reference for argmax, and the total order on f32 that argmax and TopK share.

/// Total-order key of an f32: NaN (any payload, any sign) is the greatest, -0 == +0, and
/// otherwise the usual order (-inf < ... < +inf < NaN). Keys compare as plain u32; the
/// smallest real key (-inf's) is 0x007f_ffff, so 0 never occurs. The shaders use the same
/// bit formula.
pub fn order_key(x: f32) -> u32 {
    let bits = x.to_bits();
    if bits & 0x7fff_ffff > 0x7f80_0000 {
        u32::MAX
    } else if bits == 0x8000_0000 {
        0x8000_0000
    } else if bits & 0x8000_0000 != 0 {
        !bits
    } else {
        bits | 0x8000_0000
    }
}

/// Index of the greatest element of each row of `x` ([rows, n], row-major) under
/// [`order_key`]; equal keys: the lowest index (torch.argmax's first occurrence, and
/// torch's NaN-is-maximum rule).
pub fn argmax_ref(x: &[f32], n: usize) -> Vec<u32> {
    x.chunks(n)
        .map(|row| {
            let mut best = 0;
            for (i, &v) in row.iter().enumerate() {
                if order_key(v) > order_key(row[best]) {
                    best = i;
                }
            }
            best as u32
        })
        .collect()
}
