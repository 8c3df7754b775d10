//! CPU reference for gather rows.

/// `out[i, :] = table[idx[i], :]` for a row-major `[rows, cols]` table; an index `>= rows`
/// gives a row of `T::default()` (zeros).
pub fn gather_rows_ref<T: Copy + Default>(table: &[T], cols: usize, idx: &[u32]) -> Vec<T> {
    let rows = table.len() / cols;
    let mut out = Vec::with_capacity(idx.len() * cols);
    for &i in idx {
        let i = i as usize;
        if i < rows {
            out.extend_from_slice(&table[i * cols..(i + 1) * cols]);
        } else {
            out.extend(std::iter::repeat_n(T::default(), cols));
        }
    }
    out
}
