//! The Q4 format on the host: quantisation, the nibble and scale layout, refused input, and
//! the round trip error (proptest).

use super::*;
use half::f16;
use proptest::prelude::*;

fn f16_bits(v: f32) -> u32 {
    f16::from_f32(v).to_bits() as u32
}

#[test]
fn quantize_known_values() {
    // One row, K = 32, group 32: max |w| = 7 gives scale 1, so q = round_ties_even(w).
    let mut w = vec![0.0f32; 32];
    w[..10].copy_from_slice(&[7.0, -7.0, 0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.49, -3.51]);
    let q = quantize_q4(&w, 1, 32, 32).unwrap();
    assert_eq!(q.scales, vec![f16_bits(1.0)]);
    let nibbles: Vec<u32> = (0..10).map(|k| q.nibble(0, k)).collect();
    // q:            7, -7, 0, 2, 2, -0, -2, -2, 3, -4   (+ 8)
    assert_eq!(nibbles, vec![15, 1, 8, 10, 10, 8, 6, 6, 11, 4]);
    assert!((10..32).all(|k| q.nibble(0, k) == 8));
    let d = dequantize_q4(&q);
    assert_eq!(
        &d[..10],
        &[7.0, -7.0, 0.0, 2.0, 2.0, 0.0, -2.0, -2.0, 3.0, -4.0]
    );
}

#[test]
fn quantize_scale_is_f16_of_max_over_7() {
    // max |w| = 1.0 -> 1/7 rounded to f16 (0.142822265625), not the f32 1/7.
    let w: Vec<f32> = (0..64)
        .map(|i| if i == 40 { -1.0 } else { 0.01 * (i % 7) as f32 })
        .collect();
    let q = quantize_q4(&w, 1, 64, 64).unwrap();
    let s = f16::from_f32(1.0f32 / 7.0);
    assert_eq!(s.to_f32(), 0.142_822_27);
    assert_eq!(q.scale(0, 0), s.to_f32());
    // -1 / 0.142822 = -7.0017 -> -7 -> nibble 1.
    assert_eq!(q.nibble(0, 40), 1);
}

#[test]
fn quantize_clamps_with_subnormal_scale() {
    // max |w| = 1e-6: the f16 scale is subnormal (2 * 2^-24 = 1.19e-7), so w / scale = 8.39
    // rounds to 8 and clamps to 7; -8.39 rounds to -8, which is in range.
    let mut w = vec![0.0f32; 32];
    w[0] = 1e-6;
    w[1] = -1e-6;
    let q = quantize_q4(&w, 1, 32, 32).unwrap();
    assert_eq!(q.scale(0, 0), 2.0 * 2f32.powi(-24));
    assert_eq!(q.nibble(0, 0), 15);
    assert_eq!(q.nibble(0, 1), 0);
}

#[test]
fn quantize_zero_group_has_zero_scale_and_nibble_8() {
    let mut w = vec![0.0f32; 64];
    w[40] = 7.0;
    let q = quantize_q4(&w, 1, 64, 32).unwrap();
    assert_eq!(q.scale(0, 0), 0.0);
    assert!((0..32).all(|k| q.nibble(0, k) == 8));
    assert_eq!(q.packed[0], 0x8888_8888);
    assert_eq!(dequantize_q4(&q)[40], 7.0);
}

#[test]
fn nibble_layout_even_k_in_low_nibble() {
    // q[k] = k % 15 - 7, max |w| = 7, scale 1: nibble[k] = k % 15 + 1.
    let w: Vec<f32> = (0..64).map(|k| (k % 15) as f32 - 7.0).collect();
    let q = quantize_q4(&w, 1, 64, 32).unwrap();
    // Word 0 holds k = 0..7 with k in bits 4k..4k+3: nibbles 1..8.
    assert_eq!(q.packed[0], 0x8765_4321);
    // Word 1: k = 8..15 -> nibbles 9, 10, .., 15, then k = 15 -> 1.
    assert_eq!(q.packed[1], 0x1FED_CBA9);
    assert_eq!(q.packed.len(), 8);
}

#[test]
fn scale_words_pack_two_per_u32_across_rows() {
    // 3 rows x 3 groups = 9 scales in 5 words; element e sits in the low half when even,
    // and rows share words (row 1 starts in the high half of word 1).
    let (n, k, g) = (3, 96, 32);
    let w: Vec<f32> = (0..n * k)
        .map(|i| {
            if i % g == 0 {
                7.0 * (1 + i / g) as f32
            } else {
                0.0
            }
        })
        .collect();
    let q = quantize_q4(&w, n, k, g).unwrap();
    let s = |e: usize| f16_bits((1 + e) as f32);
    assert_eq!(q.scales.len(), 5);
    for word in 0..4 {
        assert_eq!(q.scales[word], s(2 * word) | s(2 * word + 1) << 16);
    }
    assert_eq!(q.scales[4], s(8));
    assert_eq!(q.scale(1, 0), 4.0);
}

#[test]
fn quantize_rejects_bad_input() {
    let w = vec![0.5f32; 64];
    for (n, k, g) in [(1, 60, 30), (1, 64, 12), (1, 64, 0), (0, 64, 32)] {
        let e = quantize_q4(&w[..n * k], n, k, g).unwrap_err();
        assert!(
            matches!(e, Error::Invalid { op: "q4", .. }),
            "{n} {k} {g}: {e}"
        );
    }
    // K % group != 0 (K = 48, group 32).
    assert!(quantize_q4(&w[..48], 1, 48, 32).is_err());
    // Length mismatch, NaN, and a scale beyond f16.
    assert!(quantize_q4(&w[..63], 1, 64, 32).is_err());
    let mut bad = w.clone();
    bad[3] = f32::NAN;
    let e = quantize_q4(&bad, 1, 64, 32).unwrap_err().to_string();
    assert!(e.contains("weight [0, 3]"), "{e}");
    bad[3] = 1e6;
    assert!(quantize_q4(&bad, 1, 64, 32).is_err());
    assert!(Q4Host::from_parts(1, 64, 32, vec![0; 8], vec![0; 2]).is_err());
    assert!(Q4Host::from_parts(1, 64, 32, vec![0; 7], vec![0; 1]).is_err());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Away from f16 subnormals the round trip error is at most half a step.
    #[test]
    fn round_trip_error_within_half_scale(
        n in 1usize..4,
        gk in prop::sample::select(vec![(8usize, 1usize), (32, 1), (32, 3), (64, 2), (128, 1)]),
        exp in -3i32..4,
        seed in any::<u64>(),
    ) {
        let (g, groups) = gk;
        let k = g * groups;
        let mut rng = crate::harness::rng(seed);
        let mag = 10f32.powi(exp);
        let w: Vec<f32> = (0..n * k).map(|_| rand::Rng::random_range(&mut rng, -mag..mag)).collect();
        let q = quantize_q4(&w, n, k, g).unwrap();
        let d = dequantize_q4(&q);
        for (i, (&a, &b)) in w.iter().zip(&d).enumerate() {
            let s = q.scale(i / k, (i % k) / g);
            prop_assert!((a - b).abs() <= s * 0.5 * (1.0 + 1e-6), "w {a} deq {b} scale {s}");
            // The stored nibble is q + 8 with q in [-8, 7], and dequantises exactly.
            let nib = q.nibble(i / k, i % k);
            prop_assert_eq!(b, (nib as f32 - 8.0) * s);
        }
    }
}
