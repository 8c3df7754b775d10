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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_key_is_a_total_order_with_nan_greatest_and_zeros_equal() {
        let ascending = [
            f32::NEG_INFINITY,
            f32::MIN,
            -1.0,
            -f32::MIN_POSITIVE,
            -1e-45, // negative subnormal
            0.0,
            1e-45,
            1.0,
            f32::MAX,
            f32::INFINITY,
            f32::NAN,
        ];
        for w in ascending.windows(2) {
            assert!(order_key(w[0]) < order_key(w[1]), "{} < {}", w[0], w[1]);
        }
        assert_eq!(order_key(-0.0), order_key(0.0));
        assert_eq!(order_key(-f32::NAN), order_key(f32::NAN));
        assert_eq!(order_key(f32::from_bits(0x7f80_0001)), u32::MAX);
        assert!(order_key(f32::NEG_INFINITY) > 0);
    }

    #[test]
    fn argmax_ref_rules() {
        assert_eq!(argmax_ref(&[1.0, 3.0, 3.0, 2.0], 4), vec![1]);
        assert_eq!(argmax_ref(&[1.0, f32::NAN, 9.0, f32::NAN], 4), vec![1]);
        assert_eq!(argmax_ref(&[-0.0, 0.0], 2), vec![0]);
        assert_eq!(argmax_ref(&[0.0, -0.0, -1.0, f32::INFINITY], 2), vec![0, 1]);
    }
}
