//! Format, route, guard and edge-case tests of the linear op (random shapes run through
//! `tests/ops.rs`).

use super::cases::CaseEpilogue;
use super::*;
use crate::harness::{assert_cases_pass, check, test_context, OpCase, Values};
use half::f16;
use proptest::prelude::*;

mod gemm;
mod int8;
mod matvec_variants;
mod registry;

fn f16_bits(v: f32) -> u32 {
    f16::from_f32(v).to_bits() as u32
}

// ---- the Q4 format on the host ----

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

// ---- routes and guards ----

fn caps() -> DeviceCaps {
    DeviceCaps {
        max_invocations_per_workgroup: 256,
        max_workgroup_size_x: 256,
        max_workgroup_storage: 16384,
        subgroups: false,
        min_subgroup_size: 32,
        max_subgroup_size: 32,
        shader_f16: false,
        coop_16x16_f16: false,
        int8_activations: false,
    }
}

fn choose(m: usize, k: usize, group: usize, caps: &DeviceCaps) -> Result<LinearRoute> {
    choose_q4_route(
        Q4Shape { m, k, group },
        caps,
        caps.subgroups,
        None,
        String::new,
    )
}

#[test]
fn route_choice_by_shape() {
    let c = caps();
    assert_eq!(choose(1, 1536, 32, &c).unwrap(), LinearRoute::Q4Gemv);
    assert_eq!(choose(1, 64, 16, &c).unwrap(), LinearRoute::Q4Gemv);
    assert_eq!(choose(3, 1536, 128, &c).unwrap(), LinearRoute::Q4LinearM3);
    for m in [2, 4, 5, 8, 9] {
        assert_eq!(
            choose(m, 1536, 32, &c).unwrap(),
            LinearRoute::Q4LinearSmallM,
            "M = {m}"
        );
    }
    for m in [10, 17, 128] {
        assert_eq!(
            choose(m, 1536, 32, &c).unwrap(),
            LinearRoute::Q4Gemm,
            "M = {m}"
        );
    }
    // K % 32 != 0 rules out the matvec routes.
    assert_eq!(choose(1, 40, 8, &c).unwrap(), LinearRoute::Q4Generic);
    assert_eq!(choose(3, 40, 8, &c).unwrap(), LinearRoute::Q4Gemm);
}

#[test]
fn route_choice_by_device_limits() {
    // Workgroup storage below the GEMM's 16 KiB: M = 5 falls back to the generic route.
    let small = DeviceCaps {
        max_workgroup_storage: 8192,
        ..caps()
    };
    assert_eq!(choose(5, 256, 32, &small).unwrap(), LinearRoute::Q4Generic);
    // The portable matvec needs 16 KiB too; the subgroup one none.
    assert_eq!(choose(1, 256, 32, &small).unwrap(), LinearRoute::Q4Generic);
    let tiny = DeviceCaps {
        max_workgroup_storage: 4096,
        ..caps()
    };
    assert_eq!(choose(1, 256, 32, &tiny).unwrap(), LinearRoute::Q4Generic);
    let tiny_sg = DeviceCaps {
        subgroups: true,
        ..tiny
    };
    assert_eq!(choose(1, 256, 32, &tiny_sg).unwrap(), LinearRoute::Q4Gemv);
    // 128 invocations: only the generic route (64) remains.
    let narrow = DeviceCaps {
        max_invocations_per_workgroup: 128,
        ..caps()
    };
    assert_eq!(choose(1, 256, 32, &narrow).unwrap(), LinearRoute::Q4Generic);
}

#[test]
fn no_route_names_every_failed_guard() {
    let none = DeviceCaps {
        max_invocations_per_workgroup: 32,
        ..caps()
    };
    match choose(3, 40, 8, &none) {
        Err(Error::NoRoute { op, failed, .. }) => {
            assert_eq!(op, "q4_linear");
            let text = failed.join("\n");
            for want in [
                "q4_gemv: M == 1 (found 3)",
                "q4_gemv: K % 32 == 0",
                "q4_linear_m3: K % 32 == 0",
                "q4_gemm: device allows 256 invocations",
                "q4_generic: device allows 64 invocations",
            ] {
                assert!(text.contains(want), "missing `{want}` in:\n{text}");
            }
            assert!(!text.contains("q4_gemm: M >= 2"), "{text}");
        }
        other => panic!("expected NoRoute, got {other:?}"),
    }
    // A forced route reports only its own guards.
    let forced = choose_q4_route(
        Q4Shape {
            m: 3,
            k: 64,
            group: 32,
        },
        &caps(),
        false,
        Some(LinearRoute::Q4Gemv),
        || "shapes".into(),
    );
    match forced {
        Err(Error::NoRoute { failed, shapes, .. }) => {
            assert_eq!(failed, vec!["q4_gemv: M == 1 (found 3)".to_string()]);
            assert_eq!(shapes, "shapes");
        }
        other => panic!("expected NoRoute, got {other:?}"),
    }
    assert!(choose_q4_route(
        Q4Shape {
            m: 1,
            k: 64,
            group: 32
        },
        &caps(),
        false,
        Some(LinearRoute::DenseF32),
        String::new,
    )
    .is_err());
}

#[test]
fn matvec_grid_covers_every_row() {
    // 32 rows per workgroup (8 units x 4 rows): the lm_head needs 8192 workgroups.
    let ctx = test_context();
    let (_, w) = q4_weight(1000, 64, 32, None);
    let (x, y) = io(1, 64, 1000);
    let lin = q4_linear(ctx, &x, &w, &y).unwrap();
    assert_eq!(lin.kernels()[0].grid().count(), 1000u64.div_ceil(32));
}

// ---- on the device ----

fn q4_weight(n: usize, k: usize, group: usize, max_binding: Option<u64>) -> (Q4Host, Q4Weight) {
    let w: Vec<f32> = (0..n * k)
        .map(|i| ((i * 7919) % 23) as f32 - 11.0)
        .collect();
    let host = quantize_q4(&w, n, k, group).unwrap();
    let ctx = test_context();
    let dev = match max_binding {
        Some(b) => Q4Weight::upload_with_max_binding(ctx, &host, b).unwrap(),
        None => Q4Weight::upload(ctx, &host).unwrap(),
    };
    (host, dev)
}

fn io(m: usize, k: usize, n: usize) -> (Tensor, Tensor) {
    let ctx = test_context();
    (
        Tensor::zeros(ctx, "x", &[m, k], DType::F32).unwrap(),
        Tensor::zeros(ctx, "y", &[m, n], DType::F32).unwrap(),
    )
}

#[test]
fn device_builds_the_expected_route() {
    let ctx = test_context();
    let sub = ctx.has(wgpu::Features::SUBGROUP)
        && ctx.info.subgroup_min_size == 32
        && ctx.info.subgroup_max_size == 32;
    let (_, w) = q4_weight(9, 64, 32, None);
    // From 16 rows the fastest GEMM the device has (gemm_tests covers the choice).
    let caps = DeviceCaps::of(ctx);
    let prefill = match (caps.coop_16x16_f16, caps.shader_f16) {
        (true, _) => LinearRoute::Q4GemmCoop,
        (false, true) => LinearRoute::Q4GemmF16,
        (false, false) => LinearRoute::Q4Gemm,
    };
    // Every matvec takes the int8 family where the context runs int8 activations.
    let matvec = |route| {
        if caps.int8_activations {
            LinearRoute::Q4Q8Matvec
        } else {
            route
        }
    };
    for (m, route) in [
        (1, matvec(LinearRoute::Q4Gemv)),
        (3, matvec(LinearRoute::Q4LinearM3)),
        (2, matvec(LinearRoute::Q4LinearSmallM)),
        (4, matvec(LinearRoute::Q4LinearSmallM)),
        (15, LinearRoute::Q4Gemm),
        (17, prefill),
    ] {
        let (x, y) = io(m, 64, 9);
        let lin = q4_linear(ctx, &x, &w, &y).unwrap();
        assert_eq!(lin.route(), route, "M = {m}");
        assert_eq!(lin.kernels().len(), 1);
        let expect = match route {
            r if r.is_matvec() && sub => Reduction::Subgroup,
            r if r.is_matvec() => Reduction::Workgroup,
            _ => Reduction::NotApplicable,
        };
        assert_eq!(lin.reduction(), expect);
    }
    let (x, y) = io(1, 64, 9);
    let portable = LinearOptions {
        portable: true,
        activations: Some(Activations::F32),
        ..Default::default()
    };
    let lin = q4_linear_with(ctx, &x, &w, &y, &portable).unwrap();
    assert_eq!(lin.reduction(), Reduction::Workgroup);
    let (_, w8) = q4_weight(9, 40, 8, None);
    let (x, y) = io(1, 40, 9);
    assert_eq!(
        q4_linear(ctx, &x, &w8, &y).unwrap().route(),
        LinearRoute::Q4Generic
    );
    let forced = LinearOptions {
        route: Some(LinearRoute::Q4Gemv),
        activations: Some(Activations::F32),
        ..Default::default()
    };
    let e = q4_linear_with(ctx, &x, &w8, &y, &forced).unwrap_err();
    assert!(e.to_string().contains("q4_gemv: K % 32 == 0"), "{e}");
}

#[test]
fn bad_shapes_and_dtypes_are_invalid() {
    let ctx = test_context();
    let (_, w) = q4_weight(9, 64, 32, None);
    let (x, y) = io(2, 64, 9);
    let (x_bad_k, _) = io(2, 32, 9);
    let (_, y_bad_n) = io(2, 64, 8);
    let (_, y_bad_m) = io(3, 64, 9);
    let x_f16 = Tensor::zeros(ctx, "x", &[2, 64], DType::F16).unwrap();
    for (x, y, what) in [
        (&x_bad_k, &y, "shape of x"),
        (&x, &y_bad_n, "shape of y"),
        (&x, &y_bad_m, "shape of y"),
        (&x_f16, &y, "dtype of x"),
    ] {
        match q4_linear(ctx, x, &w, y) {
            Err(Error::Invalid { what: got, .. }) => assert!(got.starts_with(what), "{got}"),
            other => panic!("{what}: expected Invalid, got {other:?}"),
        }
    }
    let w_i32 = Tensor::zeros(ctx, "w", &[9, 64], DType::I32).unwrap();
    let w_3d = Tensor::zeros(ctx, "w", &[1, 9, 64], DType::F32).unwrap();
    assert!(dense_linear(ctx, &x, &w_i32, &y).is_err());
    assert!(dense_linear(ctx, &x, &w_3d, &y).is_err());
}

#[test]
fn upload_splits_rows_into_chunks() {
    let (host, w) = q4_weight(301, 64, 32, Some(64 * 32));
    let rows: Vec<_> = w.chunks().iter().map(|c| c.rows.clone()).collect();
    assert_eq!(rows, vec![0..64, 64..128, 128..192, 192..256, 256..301]);
    for c in w.chunks() {
        assert_eq!(c.packed.shape(), &[c.rows.len(), 8]);
        // 2 scales per row: a chunk of r rows holds r scale words.
        assert_eq!(c.scales.numel(), c.rows.len());
    }
    assert_eq!(w.bytes(), host.packed_bytes() + host.scale_bytes());
    let (x, y) = io(1, 64, 301);
    let lin = q4_linear(test_context(), &x, &w, &y).unwrap();
    assert_eq!(lin.kernels().len(), 5);
    // A row tile larger than the threshold cannot be planned.
    let e = Q4Weight::upload_with_max_binding(test_context(), &host, 64 * 32 - 4).unwrap_err();
    assert!(matches!(e, Error::Invalid { .. }), "{e}");
}

fn case(m: usize, n: usize, k: usize, group: usize, route: LinearRoute) -> Q4LinearCase {
    Q4LinearCase::new(m, n, k, group, route)
}

/// Every route on fixed shapes, both reductions, with and without a row split.
#[test]
fn every_route_matches_the_reference() {
    use LinearRoute::*;
    let mut cases: Vec<Box<dyn OpCase>> = Vec::new();
    for portable in [false, true] {
        for (m, route) in [(1, Q4Gemv), (3, Q4LinearM3)] {
            // K = 2048 splits K over units with 32 lanes (portable), 1024 with 8 (lavapipe).
            for (k, g) in [(96, 32), (256, 128), (64, 8), (1024, 64), (2048, 32)] {
                let mut c = case(m, 37, k, g, route);
                c.portable = portable;
                cases.push(Box::new(c));
            }
            let mut c = case(m, 200, 128, 64, route);
            c.portable = portable;
            c.max_binding = Some(64 * 64);
            cases.push(Box::new(c));
        }
    }
    for m in [2, 4, 5, 6, 7, 8, 9] {
        cases.push(Box::new(case(m, 71, 160, 32, Q4LinearSmallM)));
    }
    for m in [10, 17, 65] {
        // Forced from 16 rows, where a device with f16 takes the f16 GEMMs.
        let mut c = case(m, 71, 160, 32, Q4Gemm);
        c.force = m >= PREFILL_GEMM_MIN_ROWS;
        cases.push(Box::new(c));
    }
    let mut tail = case(3, 67, 40, 8, Q4Gemm);
    tail.force = true;
    cases.push(Box::new(tail));
    let mut split = case(10, 131, 96, 32, Q4Gemm);
    split.max_binding = Some(64 * 48);
    cases.push(Box::new(split));
    for m in [1, 3, 7] {
        let mut c = case(m, 33, 96, 32, Q4Generic);
        c.force = true;
        cases.push(Box::new(c));
    }
    let mut split = case(2, 150, 48, 16, Q4Generic);
    split.force = true;
    split.max_binding = Some(64 * 24);
    cases.push(Box::new(split));
    cases.push(Box::new(case(1, 45, 72, 24, Q4Generic)));
    for (m, k, n, f16) in [(1, 77, 19, false), (5, 300, 33, true), (3, 1, 1, false)] {
        cases.push(Box::new(DenseLinearCase { m, n, k, f16 }));
    }
    assert_cases_pass(&cases, 0..2);
}

/// Every matvec geometry (rows and lanes per quad, K split, K fixed at build time) on odd
/// shapes, with the three accumulator vectors (M = 1, 3, 9), row tails, K tails per lane,
/// the epilogues and a chunk split (the subgroup twin runs only where subgroups have 32
/// lanes: `wgemma ops check` on such a device).
#[test]
fn every_matvec_tuning_matches_the_reference() {
    use LinearRoute::*;
    let mut cases: Vec<Box<dyn OpCase>> = Vec::new();
    let mut i = 0usize;
    for lanes in [8, 16, 32] {
        for ksplit in [1, 2, 4] {
            for unroll in [false, true] {
                i += 1;
                let (m, route) = [(1, Q4Gemv), (3, Q4LinearM3), (9, Q4LinearSmallM)][i % 3];
                // K = 96 or 352 words/32: 3 or 11 words, not a multiple of any lane count.
                let k = [96, 352][i % 2];
                let mut c = case(m, 45, k, 32, route);
                c.tuning = Some(MatvecTuning {
                    rows: [4, 1, 2][(i / 2) % 3],
                    lanes,
                    ksplit,
                    unroll,
                });
                c.epilogue = [
                    CaseEpilogue::None,
                    CaseEpilogue::GeluMul,
                    CaseEpilogue::None,
                ][i % 3];
                if i % 5 == 0 {
                    c.max_binding = Some(64 * k as u64 / 2);
                    c.n = 77;
                }
                let pairs_ok = c.tuning.is_some_and(|t| t.invalid(m, true).is_none());
                if ksplit == 1 && lanes < 32 && pairs_ok {
                    let mut p = case(m, 2 * 23, k, 32, route);
                    p.epilogue = CaseEpilogue::GegluPairs;
                    p.tuning = c.tuning;
                    cases.push(Box::new(p));
                }
                cases.push(Box::new(c));
            }
        }
    }
    assert_cases_pass(&cases, 0..1);
}

/// The check can fail: a reference of another weight must not pass.
#[test]
fn wrong_reference_fails() {
    let ctx = test_context();
    let c = case(1, 33, 64, 32, LinearRoute::Q4Gemv);
    let mut prepared = c.prepare(ctx, &mut crate::harness::rng(1)).unwrap();
    crate::gpu::run_kernels(ctx, &prepared.kernels);
    // Flip the sign of one reference output.
    if let Values::F32(v) = &mut prepared.outputs[0].reference {
        v[5] = -v[5] + 1.0;
    }
    let got = pollster::block_on(crate::gpu::read_tensor_f32(
        ctx,
        &prepared.outputs[0].tensor,
    ))
    .unwrap();
    let cmp = crate::harness::compare(
        &Values::F32(got),
        &prepared.outputs[0].reference,
        prepared.outputs[0].check,
    );
    assert!(!cmp.passes(prepared.outputs[0].check), "{cmp}");
    // And the real case passes.
    assert!(pollster::block_on(check(ctx, &c, 1)).unwrap().pass());
}

/// E2B decode and verify shapes (lavapipe runs them in about a second).
#[test]
fn e2b_mlp_shapes() {
    let mut cases: Vec<Box<dyn OpCase>> = Vec::new();
    for (m, route) in [(1, LinearRoute::Q4Gemv), (3, LinearRoute::Q4LinearM3)] {
        let mut c = case(m, 6144, 1536, 32, route);
        c.weights = WeightData::RandomPacked;
        cases.push(Box::new(c));
    }
    let mut c = case(1, 1536, 6144, 32, LinearRoute::Q4Gemv);
    c.weights = WeightData::RandomPacked;
    cases.push(Box::new(c));
    assert_cases_pass(&cases, 0..1);
}

/// The E2B lm_head (192 MiB packed) split at lavapipe's 128 MiB binding limit, verify-shaped
/// (about 4 s on lavapipe).
#[test]
fn e2b_lm_head_splits_and_matches() {
    let mut c = case(3, 262_144, 1536, 32, LinearRoute::Q4LinearM3);
    c.weights = WeightData::RandomPacked;
    c.max_binding = Some(128 << 20);
    assert_cases_pass(&[Box::new(c) as Box<dyn OpCase>], 0..1);
}

#[test]
fn k_split_only_where_the_grid_is_small() {
    use super::{choose_tuning, AdapterProfile, Epilogue};
    // The table's one row: the geometry of before the table (32 lanes).
    // E2B: down_proj, o_proj and k/v_proj split; the wide projections and K = 256 do not.
    // 1536 rows: 48 workgroups unsplit; split while < 256 and >= 16 words per unit.
    let base = AdapterProfile::BASE;
    let split = |rows, k, e| {
        let t = choose_tuning(base, rows, k, e);
        assert_eq!((t.rows, t.lanes, t.unroll), (4, 32, false));
        t.ksplit
    };
    assert_eq!(split(1536, 6144, Epilogue::None), 8);
    assert_eq!(split(1536, 2048, Epilogue::None), 4);
    assert_eq!(split(1536, 4096, Epilogue::None), 8);
    assert_eq!(split(256, 1536, Epilogue::None), 2);
    assert_eq!(split(12288, 1536, Epilogue::None), 1);
    assert_eq!(split(1536, 256, Epilogue::None), 1);
    assert_eq!(split(24576, 1536, Epilogue::GegluPairs), 1);
    assert_eq!(split(16, 1536, Epilogue::GegluPairs), 1);
}

/// The norm-prologue matvec (each mode, M = 1 and 3, subgroup and portable reductions, f32
/// and int8 activations) equals the separate RMSNorm kernel followed by the plain matvec,
/// and its workgroup 0 writes the updated residual the add kernel would: bit for bit with
/// the portable reduction (its norms keep the RMSNorm kernels' tree), to rounding with the
/// subgroup one (its norms add subgroup totals: workgroup_sum_sg.wgsli). With int8
/// activations x of either way may round to the other side of a quantisation step.
#[test]
fn norm_prologue_equals_norm_kernel_then_matvec() {
    norm_prologue_against_kernels(Activations::F32, 1e-5);
    norm_prologue_against_kernels(Activations::Int8, 5e-3);
}

fn norm_prologue_against_kernels(activations: Activations, y_tolerance: f32) {
    use crate::gpu::{read_tensor_f32, run_kernels};
    use crate::ops::rmsnorm::{rmsnorm, rmsnorm_add, rmsnorm_add_norm, NextNorm};
    let ctx = test_context();
    let read = |t: &Tensor| -> Vec<f32> { pollster::block_on(read_tensor_f32(ctx, t)).unwrap() };
    let (n, eps, scale) = (96, 1e-6f32, 0.75f32);
    let vector = |seed: usize, len: usize| -> Vec<f32> {
        (0..len)
            .map(|i| (((i * 7 + seed * 13) % 29) as f32 - 14.0) * 0.05)
            .collect()
    };
    // K = 256 fits M = 3 and 5 in lavapipe's 32 KiB of workgroup memory; 1536 is E2B's
    // hidden. M = 5 runs the wide family's norm kernels, the others the decode family's.
    for (k, m) in [(256, 1), (256, 3), (256, 5), (1536, 1), (1536, 3)] {
        let (_, w) = q4_weight(n, k, 32, None);
        for portable in [false, true] {
            for mode in [
                NormPrologueMode::Norm,
                NormPrologueMode::AddNorm,
                NormPrologueMode::Add,
            ] {
                let t = |label: &str, data: Vec<f32>, shape: &[usize]| {
                    Tensor::from_f32(ctx, label, shape, &data).unwrap()
                };
                let resid = t("resid", vector(1, m * k), &[m, k]);
                let branch = t("branch", vector(2, m * k), &[m, k]);
                let w_branch = t("w_branch", vector(3, k), &[k]);
                let w_in = t("w_in", vector(4, k), &[k]);
                let resid_out = Tensor::zeros(ctx, "resid_out", &[m, k], DType::F32).unwrap();
                let y = Tensor::zeros(ctx, "y", &[m, n], DType::F32).unwrap();
                let adds = mode != NormPrologueMode::Norm;
                let prologue = NormPrologue {
                    mode,
                    resid: &resid,
                    branch: adds.then_some((&branch, &w_branch)),
                    w_in: (mode != NormPrologueMode::Add).then_some(&w_in),
                    eps,
                    out_scale: if adds { scale } else { 1.0 },
                    resid_out: adds.then_some(&resid_out),
                };
                let options = LinearOptions {
                    portable,
                    activations: Some(activations),
                    ..LinearOptions::default()
                };
                if !q4_norm_prologue_available(ctx, m, &w, Epilogue::None) {
                    continue;
                }
                let fused =
                    q4_linear_norm_with(ctx, &prologue, &w, &y, Epilogue::None, &options).unwrap();
                run_kernels(ctx, fused.kernels());
                let (y_fused, r_fused) = (read(&y), read(&resid_out));
                let subgroup_sums = fused.reduction() == Reduction::Subgroup;
                // The unfused way: the norm kernel (in place on a copy of the residual) and
                // the plain matvec on its output.
                let h = t("h", vector(1, m * k), &[m, k]);
                let x = Tensor::zeros(ctx, "x", &[m, k], DType::F32).unwrap();
                let norm = match mode {
                    NormPrologueMode::Norm => rmsnorm(ctx, &h, Some(&w_in), &x, eps),
                    NormPrologueMode::AddNorm => rmsnorm_add_norm(
                        ctx,
                        &branch,
                        Some(&w_branch),
                        &h,
                        scale,
                        NextNorm {
                            weight: &w_in,
                            out: &x,
                        },
                        eps,
                    ),
                    NormPrologueMode::Add => {
                        rmsnorm_add(ctx, &branch, Some(&w_branch), &h, &h, scale, eps)
                    }
                }
                .unwrap();
                let input = if mode == NormPrologueMode::Add {
                    &h
                } else {
                    &x
                };
                let plain = q4_linear_with(ctx, input, &w, &y, &options).unwrap();
                run_kernels(ctx, &[norm]);
                run_kernels(ctx, plain.kernels());
                let (y_plain, h_plain) = (read(&y), read(&h));
                let what = format!("{mode:?} M={m} portable={portable} {activations:?}");
                let int8 = activations == Activations::Int8;
                assert_eq!(fused.route() == LinearRoute::Q4Q8Matvec, int8, "{what}");
                assert_eq!(plain.route() == LinearRoute::Q4Q8Matvec, int8, "{what}");
                let diff = y_fused
                    .iter()
                    .zip(&y_plain)
                    .fold(0.0f32, |d, (a, b)| d.max((a - b).abs()));
                let scale_y = y_plain.iter().fold(1.0f32, |s, v| s.max(v.abs()));
                assert!(diff <= y_tolerance * scale_y, "{what}: y max |diff| {diff}");
                if adds {
                    if subgroup_sums {
                        let scale_r = h_plain.iter().fold(1.0f32, |s, v| s.max(v.abs()));
                        let dr = r_fused
                            .iter()
                            .zip(&h_plain)
                            .fold(0.0f32, |d, (a, b)| d.max((a - b).abs()));
                        assert!(dr <= 1e-6 * scale_r, "{what}: updated residual, {dr}");
                    } else {
                        assert_eq!(r_fused, h_plain, "{what}: updated residual");
                    }
                }
            }
        }
    }
}

/// Bad prologues are refused naming what is wrong: missing inputs for the mode, a residual
/// output that aliases the residual, wrong shapes.
#[test]
fn norm_prologue_bad_inputs_are_refused() {
    let ctx = test_context();
    let (k, n) = (64, 32);
    let (_, w) = q4_weight(n, k, 32, None);
    let z = |label: &str, shape: &[usize]| Tensor::zeros(ctx, label, shape, DType::F32).unwrap();
    let (resid, branch, wv, y) = (
        z("r", &[1, k]),
        z("b", &[1, k]),
        z("w", &[k]),
        z("y", &[1, n]),
    );
    let base = NormPrologue {
        mode: NormPrologueMode::AddNorm,
        resid: &resid,
        branch: Some((&branch, &wv)),
        w_in: Some(&wv),
        eps: 1e-6,
        out_scale: 1.0,
        resid_out: None,
    };
    let err = |p: NormPrologue| {
        q4_linear_norm(ctx, &p, &w, &y, Epilogue::None)
            .unwrap_err()
            .to_string()
    };
    let e = err(NormPrologue {
        branch: None,
        ..base
    });
    assert!(
        e.contains("branch true") && e.contains("branch false"),
        "{e}"
    );
    let e = err(NormPrologue {
        resid_out: Some(&resid),
        ..base
    });
    assert!(e.contains("distinct from resid"), "{e}");
    let short = z("short", &[k / 2]);
    let e = err(NormPrologue {
        w_in: Some(&short),
        ..base
    });
    assert!(e.contains("w_in") && e.contains(&format!("[{k}]")), "{e}");
    assert!(q4_linear_norm(ctx, &base, &w, &y, Epilogue::None).is_ok());
}
