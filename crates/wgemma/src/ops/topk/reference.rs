//! CPU reference for TopK: the same total order as argmax ([`order_key`]: NaN greatest,
//! -0 == +0) with the lower index first among equal keys.

use crate::ops::argmax::order_key;

/// The `k` greatest of each row of `x` ([rows, n]), sorted descending: (values, indices),
/// each [rows, k]. Values are the input's own elements (bits preserved).
pub fn topk_ref(x: &[f32], n: usize, k: usize) -> (Vec<f32>, Vec<u32>) {
    let (mut values, mut indices) = (Vec::new(), Vec::new());
    for row in x.chunks(n) {
        let mut order: Vec<u32> = (0..n as u32).collect();
        // Stable sort by descending key keeps equal keys in index order.
        order.sort_by_key(|&i| std::cmp::Reverse(order_key(row[i as usize])));
        for &i in &order[..k] {
            values.push(row[i as usize]);
            indices.push(i);
        }
    }
    (values, indices)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_ties_and_specials() {
        let x = [
            1.0,
            f32::NAN,
            -0.0,
            0.0,
            f32::INFINITY,
            1.0,
            f32::NEG_INFINITY,
        ];
        let (v, i) = topk_ref(&x, 7, 7);
        assert_eq!(i, vec![1, 4, 0, 5, 2, 3, 6]);
        assert!(v[0].is_nan());
        assert_eq!(v[4].to_bits(), (-0.0f32).to_bits());
        let (_, i) = topk_ref(&[3.0, 5.0, 5.0, 1.0, 2.0, 2.0], 3, 2);
        assert_eq!(i, vec![1, 2, 1, 2]);
    }
}
