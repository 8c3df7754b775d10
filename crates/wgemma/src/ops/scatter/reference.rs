//! CPU reference for scatter along the last dim.

/// `dst[r, idx[r, i]] = src[r, i]` in source order (so the last duplicate wins), on a copy of
/// `dst` (`[rows, n]`); `idx` and `src` are `[rows, s]`. Indices `>= n` are dropped.
pub fn scatter_ref(dst: &[f32], n: usize, idx: &[u32], src: &[f32], s: usize) -> Vec<f32> {
    let mut out = dst.to_vec();
    for (r, (row_idx, row_src)) in idx.chunks(s).zip(src.chunks(s)).enumerate() {
        for (&j, &v) in row_idx.iter().zip(row_src) {
            if (j as usize) < n {
                out[r * n + j as usize] = v;
            }
        }
    }
    out
}
