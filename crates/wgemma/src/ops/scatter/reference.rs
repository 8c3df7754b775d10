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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_write_wins_and_out_of_range_is_dropped() {
        let got = scatter_ref(
            &[0.0; 8],
            4,
            &[1, 1, 9, 3, 0, 0],
            &[1., 2., 3., 4., 5., 6.],
            3,
        );
        assert_eq!(got, vec![0., 2., 0., 0., 6., 0., 0., 4.]);
    }
}
