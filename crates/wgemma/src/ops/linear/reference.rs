//! CPU references: `y[m, n] = sum_k x[m, k] * W[n, k]` (HF `nn.Linear`, no bias),
//! accumulated in f64 from the exact f32 weights (Q4: dequantised first).
//!
//! Each also returns `max over (m, n) of sum_k |x[m, k] * W[n, k]|`, the magnitude the
//! tolerance is stated against (see `tolerance`, with the harness).

use super::quant::Q4Host;
#[cfg(any(test, feature = "harness"))]
use crate::harness::Check;

fn dot_rows(x: &[f32], m: usize, k: usize, row: &[f32], n: usize, nn: usize, y: &mut [f32]) -> f64 {
    let mut bound = 0.0f64;
    for mi in 0..m {
        let xr = &x[mi * k..(mi + 1) * k];
        let (mut s, mut a) = (0.0f64, 0.0f64);
        for (&xv, &wv) in xr.iter().zip(row) {
            let p = xv as f64 * wv as f64;
            s += p;
            a += p.abs();
        }
        y[mi * n + nn] = s as f32;
        bound = bound.max(a);
    }
    bound
}

/// Dense reference: `x` is `[m, k]`, `w` is `[n, k]`; returns `(y [m, n], magnitude)`.
pub fn linear_ref(x: &[f32], m: usize, k: usize, w: &[f32], n: usize) -> (Vec<f32>, f64) {
    let mut y = vec![0.0f32; m * n];
    let mut bound = 0.0f64;
    for nn in 0..n {
        bound = bound.max(dot_rows(x, m, k, &w[nn * k..(nn + 1) * k], n, nn, &mut y));
    }
    (y, bound)
}

/// Q4 reference: dequantises one row at a time (a 262144-row lm_head never exists in f32).
pub fn q4_linear_ref(x: &[f32], m: usize, q: &Q4Host) -> (Vec<f32>, f64) {
    q4_ref_rows(x, m, q, |_| {})
}

/// [`q4_linear_ref`] with `round` applied to each dequantised row, over the rows in
/// parallel where threads exist (the prefill benchmark shapes are 10^9-10^10 products).
fn q4_ref_rows(
    x: &[f32],
    m: usize,
    q: &Q4Host,
    round: impl Fn(&mut [f32]) + Sync,
) -> (Vec<f32>, f64) {
    let threads = if m * q.n * q.k < (1 << 24) {
        1
    } else {
        std::thread::available_parallelism().map_or(1, |t| t.get().min(16))
    };
    // Columns [lo, hi) of y for every row of x: (y [m, hi - lo], magnitude).
    let part = |lo: usize, hi: usize| {
        let mut y = vec![0.0f32; m * (hi - lo)];
        let mut row = vec![0.0f32; q.k];
        let mut bound = 0.0f64;
        for nn in lo..hi {
            q.dequantize_row(nn, &mut row);
            round(&mut row);
            bound = bound.max(dot_rows(x, m, q.k, &row, hi - lo, nn - lo, &mut y));
        }
        (y, bound)
    };
    if threads <= 1 {
        return part(0, q.n);
    }
    let per = q.n.div_ceil(threads);
    let parts: Vec<(usize, (Vec<f32>, f64))> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..q.n)
            .step_by(per)
            .map(|lo| {
                let hi = (lo + per).min(q.n);
                let part = &part;
                (lo, s.spawn(move || part(lo, hi)))
            })
            .collect();
        handles
            .into_iter()
            .map(|(lo, h)| (lo, h.join().expect("reference thread panicked")))
            .collect()
    });
    let mut y = vec![0.0f32; m * q.n];
    let mut bound = 0.0f64;
    for (lo, (py, pb)) in parts {
        let width = py.len() / m;
        for (mi, chunk) in py.chunks(width).enumerate() {
            y[mi * q.n + lo..mi * q.n + lo + width].copy_from_slice(chunk);
        }
        bound = bound.max(pb);
    }
    (y, bound)
}

/// Q4 reference of the int8 matvec route (`q4q8_matvec`): each activation row quantised
/// per block of 32 as the kernel does ([`super::int8::quantize_row_q8`]), then the exact
/// products and sums of [`q4_linear_ref`]. The kernel's integer sums are exact, so against
/// it the kernel differs only by its f32 scale products and accumulation.
pub fn q4q8_linear_ref(x: &[f32], m: usize, q: &Q4Host) -> (Vec<f32>, f64) {
    let x8: Vec<f32> = x
        .chunks(q.k)
        .flat_map(super::int8::quantize_row_q8)
        .collect();
    q4_ref_rows(&x8, m, q, |_| {})
}

/// Q4 reference of the f16 GEMM routes (`q4_gemm_f16`, `q4_gemm_coop`): x rounded to f16
/// and every dequantised weight rounded to f16 (nearest, ties to even), as the kernels stage
/// them; products and sums exact (f64). Against it the kernels differ only by their f32
/// accumulation, so `tolerance` applies unchanged.
pub fn q4_linear_ref_f16(x: &[f32], m: usize, q: &Q4Host) -> (Vec<f32>, f64) {
    let to_f16 = |v: &f32| half::f16::from_f32(*v).to_f32();
    let x16: Vec<f32> = x.iter().map(to_f16).collect();
    q4_ref_rows(&x16, m, q, |row| {
        row.iter_mut().for_each(|v| *v = to_f16(v))
    })
}

/// The comparison for a linear output over `k` terms with magnitude `bound`:
/// - max_abs: `(k + 9) * 2^-24 * bound`, the worst-case f32 rounding of a k-term sum of
///   products (any order, plus the f16 scale product and the reference's own rounding),
///   so it cannot fail on a correct kernel;
/// - nmse <= 1e-9: f32 rounding gives about `k * 2^-48` (1e-11 at k = 1536), while one
///   wrong weight in a small random case gives about `1 / (k * outputs)` (>> 1e-9), so this
///   is the sensitive check.
#[cfg(any(test, feature = "harness"))]
pub fn tolerance(k: usize, bound: f64) -> Check {
    Check::Close {
        max_abs: ((k as f64 + 9.0) * f64::from(f32::EPSILON) / 2.0 * bound) as f32
            + f32::MIN_POSITIVE,
        nmse: 1e-9,
    }
}
