//! The int8 family (matvecs and the prefill GEMM): route choice, exact integer sums on the
//! GPU, the GEMM's random cases, and the size of the activation rounding.

use super::super::cases::int8_gemm_cases;
use super::*;
use crate::gpu::{read_tensor_f32, run_kernels};
use crate::harness::{assert_cases_pass, assert_folded_case_passes, rng, Check};

fn int8_caps() -> DeviceCaps {
    DeviceCaps {
        subgroups: true,
        int8_activations: true,
        ..caps()
    }
}

/// From M = 10 (past the int8 matvec) the int8 GEMM takes every prefill it can, below the
/// tensor-core GEMM; the f32 and f16 GEMMs keep what it cannot (groups below 32, K tails,
/// a lower GEMM ceiling, f32 activations).
#[test]
fn int8_gemm_takes_prefill_rows_below_the_tensor_cores() {
    use LinearRoute::*;
    let c = int8_caps();
    for m in [10, 15, 16, 64, 512] {
        assert_eq!(choose(m, 1536, 32, &c).unwrap(), Q4GemmInt8, "M = {m}");
        assert_eq!(choose(m, 6144, 128, &c).unwrap(), Q4GemmInt8, "M = {m}");
    }
    let f16 = DeviceCaps {
        shader_f16: true,
        ..int8_caps()
    };
    assert_eq!(choose(64, 1536, 32, &f16).unwrap(), Q4GemmInt8);
    let coop = DeviceCaps {
        coop_16x16_f16: true,
        max_workgroup_storage: 49152,
        ..f16
    };
    assert_eq!(choose(64, 1536, 32, &coop).unwrap(), Q4GemmCoop);
    assert_eq!(choose(12, 1536, 32, &coop).unwrap(), Q4GemmInt8);
    assert_eq!(choose(64, 1536, 16, &c).unwrap(), Q4Gemm);
    assert_eq!(choose(64, 40, 8, &c).unwrap(), Q4Gemm);
    let ceiling = DeviceCaps {
        gemm_int8: false,
        ..f16
    };
    assert_eq!(choose(64, 1536, 32, &ceiling).unwrap(), Q4GemmF16);
    let e = choose_q4_route(
        Q4Shape {
            m: 64,
            k: 1536,
            group: 32,
        },
        &DeviceCaps {
            gemm_int8: false,
            ..caps()
        },
        false,
        Some(Q4GemmInt8),
        String::new,
    )
    .unwrap_err()
    .to_string();
    for want in [
        "q4_gemm_int8: int8 activations",
        "q4_gemm_int8: the GEMM ceiling allows the int8 GEMM",
    ] {
        assert!(e.contains(want), "missing `{want}` in {e}");
    }
}

#[test]
fn int8_gemm_matches_the_reference() {
    for seed in 0..2 {
        assert_cases_pass(&int8_gemm_cases(&mut rng(7100 + seed)), seed..seed + 1);
    }
}

/// More tiles than the folded context's 8 workgroups per dimension (of 64 in all), for the
/// GEMM (10 n-tiles) and the quantiser (one workgroup per row and 64 blocks: 40).
#[test]
fn int8_gemm_on_a_folded_grid() {
    let mut case = Q4LinearCase::new(40, 128 * 9 + 3, 96, 32, LinearRoute::Q4GemmInt8);
    case.force = true;
    assert_folded_case_passes(&case, 0..1);
}

#[test]
fn int8_route_takes_every_matvec_it_can() {
    let c = int8_caps();
    for m in 1..=9 {
        assert_eq!(choose(m, 1536, 32, &c).unwrap(), LinearRoute::Q4Q8Matvec);
        assert_eq!(choose(m, 1536, 128, &c).unwrap(), LinearRoute::Q4Q8Matvec);
    }
    // Groups below 32 (one scale per packed word) and K % 32 != 0 keep their f32 routes;
    // M >= 10 takes the int8 GEMM.
    assert_eq!(choose(1, 1536, 16, &c).unwrap(), LinearRoute::Q4Gemv);
    assert_eq!(choose(3, 40, 8, &c).unwrap(), LinearRoute::Q4Gemm);
    assert_eq!(choose(12, 1536, 32, &c).unwrap(), LinearRoute::Q4GemmInt8);
    // Too little workgroup memory for one chunk of 9 rows: the f32 matvec.
    let small = DeviceCaps {
        max_workgroup_storage: 8192,
        ..int8_caps()
    };
    assert_eq!(
        choose(1, 1536, 32, &small).unwrap(),
        LinearRoute::Q4Q8Matvec
    );
    assert_eq!(
        choose(9, 1536, 32, &small).unwrap(),
        LinearRoute::Q4LinearSmallM
    );
    // Forced on an f32 context, the guard says why.
    let e = choose_q4_route(
        Q4Shape {
            m: 1,
            k: 64,
            group: 32,
        },
        &caps(),
        false,
        Some(LinearRoute::Q4Q8Matvec),
        String::new,
    )
    .unwrap_err();
    assert!(
        e.to_string().contains("q4q8_matvec: int8 activations"),
        "{e}"
    );
}

/// Integer activations with a +-127 in every block (d = 1) and weights of scale 1: every
/// term is an integer below 2^24, so the GPU's y equals the exact sum whatever its order.
/// A mistake in the nibble/byte pairing, the offset 8 sum or a chunk boundary changes it.
#[test]
fn integer_sums_are_exact() {
    let ctx = test_context();
    // M >= 10: the int8 GEMM (odd blocks per row at K = 96; partial tiles at M = 70).
    for (m, k, n, portable) in [
        (1, 1536, 40, false),
        (3, 1536, 33, true),
        (8, 6144, 17, false),
        (5, 12288, 9, true),
        (12, 1536, 40, false),
        (70, 96, 131, false),
        (20, 6144, 9, false),
    ] {
        let w: Vec<f32> = (0..n * k)
            .map(|i| {
                if i % 32 == 5 {
                    7.0
                } else {
                    ((i * 37) % 15) as f32 - 7.0
                }
            })
            .collect();
        let host = quantize_q4(&w, n, k, 32).unwrap();
        assert!((0..n).all(|r| (0..k / 32).all(|j| host.scale(r, j) == 1.0)));
        let x: Vec<f32> = (0..m * k)
            .map(|i| {
                if i % 32 == 11 {
                    -127.0
                } else {
                    ((i * 53) % 255) as f32 - 127.0
                }
            })
            .collect();
        let wt = Q4Weight::upload(ctx, &host).unwrap();
        let tx = Tensor::from_f32(ctx, "x", &[m, k], &x).unwrap();
        let ty = Tensor::zeros(ctx, "y", &[m, n], DType::F32).unwrap();
        let options = LinearOptions {
            portable,
            activations: Some(Activations::Int8),
            ..Default::default()
        };
        let lin = q4_linear_with(ctx, &tx, &wt, &ty, &options).unwrap();
        let route = if m <= 9 {
            LinearRoute::Q4Q8Matvec
        } else {
            LinearRoute::Q4GemmInt8
        };
        assert_eq!(lin.route(), route);
        run_kernels(ctx, lin.kernels());
        let y = pollster::block_on(read_tensor_f32(ctx, &ty)).unwrap();
        let exact: Vec<f32> = (0..m)
            .flat_map(|mi| {
                let (x, w) = (&x, &w);
                (0..n).map(move |r| {
                    (0..k)
                        .map(|kk| x[mi * k + kk] as i64 * w[r * k + kk] as i64)
                        .sum::<i64>() as f32
                })
            })
            .collect();
        assert_eq!(y, exact, "M = {m}, K = {k}, portable = {portable}");
    }
}

/// The int8 rounding of activations moves a Q4 product by well under 1% of its magnitude
/// (per block: half a step of max|x| / 127), and is zero for activations already on the
/// int8 grid.
#[test]
fn activation_rounding_is_small() {
    let (n, k) = (64, 1536);
    let w: Vec<f32> = (0..n * k)
        .map(|i| (((i * 7919) % 23) as f32 - 11.0) * 0.01)
        .collect();
    let host = quantize_q4(&w, n, k, 32).unwrap();
    let x: Vec<f32> = (0..k)
        .map(|i| ((i * 13 % 101) as f32 - 50.0) * 0.013)
        .collect();
    let (y32, bound) = q4_linear_ref(&x, 1, &host);
    let (y8, _) = q4q8_linear_ref(&x, 1, &host);
    let worst = y32
        .iter()
        .zip(&y8)
        .fold(0.0f64, |d, (a, b)| d.max((a - b).abs() as f64));
    assert!(worst > 0.0 && worst < 5e-3 * bound, "{worst} vs {bound}");
}

/// The int8 GEMM computes a row as the int8 matvec does: the same quantiser, the same
/// per-block integer sums and scale products, only the blocks summed in another order; so
/// 12 random rows through the GEMM and one at a time through the matvec agree within the
/// f32 rounding of a K-term sum (`tolerance`), far inside one int8 rounding step.
#[test]
fn int8_gemm_rows_equal_matvec_rows_up_to_sum_order() {
    let ctx = test_context();
    let (m, k, n) = (12, 1536, 40);
    let w: Vec<f32> = (0..n * k)
        .map(|i| (((i * 7919) % 23) as f32 - 11.0) * 0.01)
        .collect();
    let host = quantize_q4(&w, n, k, 32).unwrap();
    let wt = Q4Weight::upload(ctx, &host).unwrap();
    let x: Vec<f32> = (0..m * k)
        .map(|i| ((i * 7877 % 1009) as f32 - 504.0) * 0.0031)
        .collect();
    let options = LinearOptions {
        activations: Some(Activations::Int8),
        ..Default::default()
    };
    let run = |rows: &[f32]| {
        let mm = rows.len() / k;
        let tx = Tensor::from_f32(ctx, "x", &[mm, k], rows).unwrap();
        let ty = Tensor::zeros(ctx, "y", &[mm, n], DType::F32).unwrap();
        let lin = q4_linear_with(ctx, &tx, &wt, &ty, &options).unwrap();
        run_kernels(ctx, lin.kernels());
        let y = pollster::block_on(read_tensor_f32(ctx, &ty)).unwrap();
        (lin.route(), y)
    };
    let (route, gemm) = run(&x);
    assert_eq!(route, LinearRoute::Q4GemmInt8);
    let (_, bound) = q4q8_linear_ref(&x, m, &host);
    let Check::Close { max_abs, .. } = tolerance(k, bound) else {
        unreachable!("tolerance is a Close check")
    };
    for (r, row) in x.chunks(k).enumerate() {
        let (route, matvec) = run(row);
        assert_eq!(route, LinearRoute::Q4Q8Matvec);
        for (j, (a, b)) in gemm[r * n..(r + 1) * n].iter().zip(&matvec).enumerate() {
            assert!((a - b).abs() <= max_abs, "row {r}, output {j}: {a} vs {b}");
        }
    }
}
