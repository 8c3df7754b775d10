//! Route, chunking and guard tests of the ggml linear op (each format against its CPU
//! reference through the harness).

use super::cases::random_blocks;
use super::*;
use crate::gpu::DType;
use crate::harness::{assert_cases_pass, rng, test_context, OpCase};

#[test]
fn every_format_matches_its_reference_on_both_routes() {
    let cases = random_cases(&mut rng(7));
    assert_eq!(cases.len(), 2 * NATIVE_TYPES.len() + 2);
    assert_cases_pass(&cases, 0..2);
}

/// Rows whose byte count is not a multiple of 4 (Q6_K at K = 256: 210 bytes; Q8_0 at
/// K = 32: 34) split into chunks of 64 rows: both routes read each chunk from its start.
#[test]
fn chunked_weights_with_unaligned_rows_match_the_reference() {
    let mut cases: Vec<Box<dyn OpCase>> = Vec::new();
    for (ty, k) in [(GgmlType::Q6_K, 256), (GgmlType::Q8_0, 32)] {
        for m in [3, 12] {
            let mut case = GgmlLinearCase::new(ty, m, k, 200);
            case.max_binding = Some(64 * ty.bytes_of(k) as u64);
            cases.push(Box::new(case));
        }
    }
    assert_cases_pass(&cases, 0..1);
}

#[test]
fn guards_fail_closed_naming_what_failed() {
    let ctx = test_context();
    let err = GgmlWeight::zeros(ctx, GgmlType::Q4_0, 4, 32).unwrap_err();
    assert!(err.to_string().contains("Q4_0"), "{err}");
    let err = GgmlWeight::zeros(ctx, GgmlType::Q4_K, 4, 32).unwrap_err();
    assert!(
        err.to_string().contains("multiple of the block (256)"),
        "{err}"
    );
    let blocks = random_blocks(&mut rng(1), GgmlType::Q8_0, 4, 64);
    let w = GgmlWeight::upload(ctx, GgmlType::Q8_0, 4, 64, &blocks, None).unwrap();
    let x = Tensor::zeros(ctx, "x", &[9, 64], DType::F32).unwrap();
    let y = Tensor::zeros(ctx, "y", &[9, 4], DType::F32).unwrap();
    for route in [GgmlRoute::Matvec, GgmlRoute::MatvecInt8] {
        let err = ggml_linear_with(ctx, &x, &w, &y, Some(route)).unwrap_err();
        assert!(err.to_string().contains("M in 1..=8 (M = 9)"), "{err}");
    }
    assert!(ggml_linear(ctx, &x, &w, &y).is_ok());
    let bad_y = Tensor::zeros(ctx, "y", &[9, 5], DType::F32).unwrap();
    let err = ggml_linear(ctx, &x, &w, &bad_y).unwrap_err();
    assert!(err.to_string().contains("[9, 4]"), "{err}");
}

#[test]
fn rows_are_written_whole_and_on_words() {
    let ctx = test_context();
    let w = GgmlWeight::zeros(ctx, GgmlType::Q6_K, 8, 256).unwrap();
    let row = vec![0u8; 210];
    let err = w.write_rows(ctx, 1, &row).unwrap_err();
    assert!(err.to_string().contains("starting on a word"), "{err}");
    assert!(w
        .write_rows(ctx, 2, &[row.clone(), row.clone()].concat())
        .is_ok());
    assert!(w.write_rows(ctx, 0, &row[..100]).is_err());
    assert!(w.write_rows(ctx, 7, &[row.clone(), row].concat()).is_err());
}

/// `ops check` runs every format at E2B's shapes, M = 1, 3 and 8, and the chunked lm_head.
#[test]
fn the_check_cases_cover_e2b_shapes_and_rows() {
    let names: Vec<String> = check_cases().iter().map(|c| c.name()).collect();
    for ty in NATIVE_TYPES {
        for (k, n) in [
            (1536, 2048),
            (1536, 256),
            (1536, 12288),
            (6144, 1536),
            (2048, 1536),
        ] {
            for m in [1, 3, 8] {
                let want = format!("ggml_linear {ty:?} auto m={m} k={k} n={n}");
                assert!(names.contains(&want), "missing {want}");
            }
        }
    }
    let heads = names
        .iter()
        .filter(|n| n.contains("n=262144 chunk<=128MiB"));
    assert_eq!(heads.count(), 15);
    for m in [1, 3, 8] {
        let want = format!("ggml_linear Q8_0 matvec_int8 m={m} k=6144 n=1536");
        assert!(names.contains(&want), "missing {want}");
    }
    // `ops bench` times both Q8_0 matvecs on the same bytes.
    let bench: Vec<String> = bench_cases().iter().map(|c| c.name()).collect();
    for route in ["matvec", "matvec_int8"] {
        let want = format!("ggml_linear Q8_0 {route} m=1 k=1536 n=262144");
        assert!(bench.contains(&want), "missing {want}");
    }
}

/// The int8 matvec is chosen only where the context runs int8 activations (not lavapipe's
/// auto) and only for the types it has a kernel for.
#[test]
fn int8_route_is_chosen_only_for_q8_0_matvecs_on_int8_contexts() {
    let ctx = test_context();
    // lavapipe resolves auto to f32 activations: the f32 matvec.
    assert_eq!(ctx.activations(), crate::gpu::Activations::F32);
    assert_eq!(choose_route_on(ctx, 3, GgmlType::Q8_0), GgmlRoute::Matvec);
    assert_eq!(choose_route_on(ctx, 9, GgmlType::Q8_0), GgmlRoute::Gemm);
    // lavapipe's Vulkan 1.3 has the integer dot products: int8 on request.
    let int8 = crate::gpu::GpuContext::new_blocking(crate::gpu::ContextOptions {
        activations: crate::gpu::ActivationChoice::Int8,
        ..Default::default()
    })
    .unwrap();
    assert_eq!(
        choose_route_on(&int8, 3, GgmlType::Q8_0),
        GgmlRoute::MatvecInt8
    );
    assert_eq!(choose_route_on(&int8, 9, GgmlType::Q8_0), GgmlRoute::Gemm);
    assert_eq!(choose_route_on(&int8, 3, GgmlType::Q4_K), GgmlRoute::Matvec);
}
