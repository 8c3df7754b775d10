//! Format, route, guard and edge-case tests of the linear op (random shapes run through
//! `tests/integration/ops.rs`).

use super::cases::CaseEpilogue;
use super::*;
use crate::harness::{assert_cases_pass, check, test_context, OpCase, Values};

mod gemm;
mod int8;
mod matvec_variants;
mod norm_prologue;
mod quant;
mod registry;
mod routes;

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
        gemm_int8: true,
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
    let int8_gemm = caps.int8_activations && caps.gemm_int8;
    let prefill = match (caps.coop_16x16_f16, int8_gemm, caps.shader_f16) {
        (true, _, _) => LinearRoute::Q4GemmCoop,
        (false, true, _) => LinearRoute::Q4GemmInt8,
        (false, false, true) => LinearRoute::Q4GemmF16,
        (false, false, false) => LinearRoute::Q4Gemm,
    };
    // Below 16 rows the f32 GEMM, or the int8 one where int8 activations run.
    let short_gemm = if int8_gemm {
        LinearRoute::Q4GemmInt8
    } else {
        LinearRoute::Q4Gemm
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
        (15, short_gemm),
        (17, prefill),
    ] {
        let (x, y) = io(m, 64, 9);
        let lin = q4_linear(ctx, &x, &w, &y).unwrap();
        assert_eq!(lin.route(), route, "M = {m}");
        // The int8 GEMM quantises x in a dispatch of its own.
        let kernels = 1 + usize::from(route == LinearRoute::Q4GemmInt8);
        assert_eq!(lin.kernels().len(), kernels);
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
