//! Sizes of the int8 matvec family (`q4q8_matvec*`, [`super::LinearRoute::Q4Q8Matvec`]):
//! how much of K each workgroup stages as int8 at once, and the host side of its
//! quantisation (the CPU reference's rounding is the kernel's: `q4_matvec_q8_accumulate`).

use super::MatvecTuning;

/// Workgroup bytes per staged block of 32 activations of one row: 32 int8 values and the
/// block's (d, 8 sum q).
pub const BLOCK_BYTES: usize = 40;

/// At most this much workgroup memory holds staged activations: 16 KiB leaves room for
/// several 256-invocation workgroups per multiprocessor, and a longer row is staged in
/// chunks (a barrier pair each).
pub const STAGE_BYTES_MAX: usize = 16384;

/// The fewest bytes the family stages for `m` activation rows (one chunk of 32 blocks, the
/// widest slot stride the tuning table builds without a K split).
pub fn min_stage_bytes(m: usize) -> usize {
    32 * BLOCK_BYTES * m
}

/// Blocks of 32 staged per activation row and chunk for `m` rows of `k` with slots striding
/// `stride` words, within `storage_left` bytes of workgroup memory: all of K when it fits,
/// else the largest multiple of `stride` that fits; `None` when not even one stride fits.
pub fn chunk_words(m: usize, k: usize, stride: usize, storage_left: usize) -> Option<usize> {
    let words = k / 32;
    let fit = storage_left.min(STAGE_BYTES_MAX) / (BLOCK_BYTES * m.max(1));
    if words <= fit {
        return Some(words);
    }
    let chunk = fit / stride * stride;
    (chunk >= stride).then_some(chunk)
}

/// The int8 family's geometry for a chunk of `rows` rows of length `k`, from the adapter
/// table's `base`: wide outputs (>= 8192 rows: gate_up, the LM head) whose rows are not a
/// whole number of 32-lane strides (K = 1536: 48 words) take 16 lanes and 2 rows per quad,
/// so no lane idles in the last step and more workgroups stay resident: on the H100 the LM
/// head runs 1.4x faster at M = 3 and 3x at M = 8, level at M = 1. The rows per
/// workgroup (32) are unchanged.
pub fn tuning(base: MatvecTuning, rows: usize, k: usize) -> MatvecTuning {
    let words = k / 32;
    if rows >= 8192 && words % 32 != 0 && words % 16 == 0 && base.ksplit == 1 {
        MatvecTuning {
            rows: 2,
            lanes: 16,
            ..base
        }
    } else {
        base
    }
}

/// One activation row quantised as the kernels do, per block of 32: `d = max|x| * (1/127)`,
/// `q = round_ties_even(x * (127 / max|x|))` (0 for an all-zero block). Returns the values
/// `q * d` the integer dot products stand for.
pub fn quantize_row_q8(x: &[f32]) -> Vec<f32> {
    let mut out = Vec::with_capacity(x.len());
    for block in x.chunks(32) {
        let amax = block.iter().fold(0.0f32, |a, v| a.max(v.abs()));
        let inv_d = if amax > 0.0 { 127.0 / amax } else { 0.0 };
        let d = amax * (1.0f32 / 127.0);
        out.extend(
            block
                .iter()
                .map(|v| ((v * inv_d).round_ties_even() as f64 * d as f64) as f32),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_rows_fit_when_small_and_chunks_are_stride_multiples() {
        // K = 1536 (48 blocks) at M = 3: 5,760 bytes, one chunk.
        assert_eq!(chunk_words(3, 1536, 32, 1 << 20), Some(48));
        // K = 6144 at M = 8: 192 blocks x 320 bytes > 16 KiB: 51 fit, 32 is the multiple.
        assert_eq!(chunk_words(8, 6144, 32, 1 << 20), Some(32));
        // A device with 4 KiB left: 102 blocks at M = 1, K = 12288 (384): 96 = 3 x 32.
        assert_eq!(chunk_words(1, 12288, 32, 4096), Some(96));
        // Not one stride of 256 words fits at M = 9.
        assert_eq!(chunk_words(9, 12288, 256, 1 << 20), None);
    }

    #[test]
    fn wide_short_rows_take_16_lanes() {
        let base = MatvecTuning::BASE;
        let t = tuning(base, 262_144, 1536);
        assert_eq!((t.rows, t.lanes, t.ksplit), (2, 16, 1));
        assert_eq!(t.rows_per_workgroup(), base.rows_per_workgroup());
        // Narrow outputs, whole 32-lane strides (K = 2048: 64 words) and split rows keep
        // the table's geometry.
        assert_eq!(tuning(base, 2048, 1536), base);
        assert_eq!(tuning(base, 262_144, 2048), base);
        let split = MatvecTuning { ksplit: 2, ..base };
        assert_eq!(tuning(split, 262_144, 1536), split);
    }

    #[test]
    fn quantisation_rounds_ties_to_even_and_keeps_zero_blocks() {
        let mut x = vec![0.0f32; 64];
        x[0] = 127.0;
        x[1] = 2.5;
        x[2] = -3.5;
        x[3] = 0.49;
        let q = quantize_row_q8(&x);
        assert_eq!(&q[..4], &[127.0, 2.0, -4.0, 0.0]);
        assert!(q[32..].iter().all(|&v| v == 0.0));
    }
}
