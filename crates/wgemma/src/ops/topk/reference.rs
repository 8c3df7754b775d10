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
