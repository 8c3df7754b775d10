use super::*;
use crate::gpu::{read_tensor_f32, read_tensor_u32, run_kernels};
use crate::harness::{assert_cases_pass, rng, test_context};
use crate::ops::topk::{topk, topk_ref, TopKRoute};
use rand::seq::SliceRandom;
use rand::Rng as _;

fn f32s(ctx: &GpuContext, shape: &[usize], v: &[f32]) -> Tensor {
    Tensor::from_f32(ctx, "f", shape, v).unwrap()
}

fn read(t: &Tensor) -> Vec<f32> {
    pollster::block_on(read_tensor_f32(test_context(), t)).unwrap()
}

#[test]
fn duplicates_last_write_wins_and_out_of_range_is_dropped() {
    let ctx = test_context();
    // Two rows of n = 5. Row 0: 3 is hit three times, 1 twice, 6 and 5 are out of range
    // (6 would land on row 1 without the bound check). Row 1: 0 twice.
    let idx = [3, 3, 1, 6, 3, 1, 5, 0, 4, 0, 2, 0, 0, 0];
    let src: Vec<f32> = (1..=14).map(|v| v as f32).collect();
    let dst_host = vec![-1.0f32; 10];
    let dst = f32s(ctx, &[2, 5], &dst_host);
    let idx_t = Tensor::from_u32(ctx, "idx", &[2, 7], &idx).unwrap();
    let src_t = f32s(ctx, &[2, 7], &src);
    let plan = scatter(ctx, &OpSet::with_mtp(), &dst, &idx_t, &src_t, None).unwrap();
    assert_eq!(plan.route, ScatterRoute::DuplicateSafe);
    assert_eq!(plan.kernels.len(), 3);
    run_kernels(ctx, &plan.kernels);
    let want = vec![-1.0, 6.0, -1.0, 5.0, -1.0, 14.0, -1.0, 11.0, -1.0, 9.0];
    assert_eq!(scatter_ref(&dst_host, 5, &idx, &src, 7), want);
    assert_eq!(read(&dst), want);
}

#[test]
fn safe_route_leaves_its_winner_buffer_zeroed_between_runs() {
    let ctx = test_context();
    let dst = f32s(ctx, &[4], &[0.0; 4]);
    let idx = Tensor::from_u32(ctx, "idx", &[2], &[2, 2]).unwrap();
    let src = f32s(ctx, &[2], &[10.0, 20.0]);
    let plan = scatter(ctx, &OpSet::plain(), &dst, &idx, &src, None).unwrap();
    run_kernels(ctx, &plan.kernels);
    assert_eq!(read(&dst), vec![0.0, 0.0, 20.0, 0.0]);
    // Same kernels, new indices: a stale winner (2 at slot 2) would block position 0's write.
    idx.write_bytes(ctx, bytemuck::cast_slice(&[2u32, 0]));
    src.write_bytes(ctx, bytemuck::cast_slice(&[30.0f32, 40.0]));
    run_kernels(ctx, &plan.kernels);
    assert_eq!(read(&dst), vec![40.0, 0.0, 30.0, 0.0]);
}

#[test]
fn routes_agree_on_certified_unique_indices() {
    let case = |route| ScatterCase {
        rows: 2,
        n: 3000,
        s: 2500,
        indices: ScatterIndices::CertifiedUnique,
        out_of_range: true,
        route: Some(route),
    };
    // Each case checks against the reference; same seed, same data for both routes.
    assert_cases_pass(
        &[
            Box::new(case(ScatterRoute::ParallelUnique)),
            Box::new(case(ScatterRoute::DuplicateSafe)),
        ],
        0..3,
    );
    // And directly: one input, both routes, identical bytes.
    let ctx = test_context();
    let mut r = rng(9);
    let n = 700;
    let mut ids: Vec<u32> = (0..n as u32 + 50).collect();
    ids.shuffle(&mut r);
    ids.truncate(600);
    let src_host: Vec<f32> = (0..600).map(|_| r.random_range(-1.0..1.0)).collect();
    let cert = UniqueIndices::verify_and_upload(ctx, "ids", &[600], &ids).unwrap();
    let src = f32s(ctx, &[600], &src_host);
    let mut outs = Vec::new();
    for route in [ScatterRoute::ParallelUnique, ScatterRoute::DuplicateSafe] {
        let dst = f32s(ctx, &[n], &vec![-5.0; n]);
        let plan = scatter_on_route(
            ctx,
            &OpSet::with_mtp(),
            &dst,
            cert.tensor(),
            &src,
            Some(&cert),
            route,
        )
        .unwrap();
        assert_eq!(plan.route, route);
        run_kernels(ctx, &plan.kernels);
        outs.push(read(&dst));
    }
    assert_eq!(outs[0], outs[1]);
    assert_eq!(
        outs[0],
        scatter_ref(&vec![-5.0; n], n, &ids, &src_host, 600)
    );
}

#[test]
fn uncertified_or_duplicate_indices_never_reach_the_parallel_route() {
    let ctx = test_context();
    let mtp = OpSet::with_mtp();
    let ids = [4u32, 1, 3, 0];
    let dst = f32s(ctx, &[8], &[0.0; 8]);
    let src = f32s(ctx, &[4], &[1.0; 4]);
    let cert = UniqueIndices::verify_and_upload(ctx, "ids", &[4], &ids).unwrap();
    // A look-alike: same values, same shape, another buffer.
    let twin = Tensor::from_u32(ctx, "twin", &[4], &ids).unwrap();
    let view = cert.tensor().reshaped(&[1, 4]).unwrap();
    let dst2 = f32s(ctx, &[1, 8], &[0.0; 8]);
    let src2 = f32s(ctx, &[1, 4], &[1.0; 4]);

    let auto = |dst: &Tensor, idx: &Tensor, src: &Tensor, c: Option<&UniqueIndices>| {
        scatter(ctx, &mtp, dst, idx, src, c).unwrap().route
    };
    assert_eq!(
        auto(&dst, cert.tensor(), &src, Some(&cert)),
        ScatterRoute::ParallelUnique
    );
    assert_eq!(
        auto(&dst, cert.tensor(), &src, None),
        ScatterRoute::DuplicateSafe
    );
    assert_eq!(
        auto(&dst, &twin, &src, Some(&cert)),
        ScatterRoute::DuplicateSafe
    );
    assert_eq!(
        auto(&dst2, &view, &src2, Some(&cert)),
        ScatterRoute::DuplicateSafe
    );

    let forced = |idx: &Tensor, c: Option<&UniqueIndices>, expect: &str| match scatter_on_route(
        ctx,
        &mtp,
        &dst,
        idx,
        &src,
        c,
        ScatterRoute::ParallelUnique,
    ) {
        Err(Error::NoRoute { op, failed, .. }) => {
            assert_eq!(op, OP);
            assert!(failed.iter().any(|f| f.contains(expect)), "{failed:?}");
        }
        other => panic!("expected NoRoute, got {other:?}"),
    };
    forced(cert.tensor(), None, "none given");
    forced(&twin, Some(&cert), "another tensor");

    // Duplicates cannot be certified in the first place.
    for bad in [&[1u32, 2, 1][..], &[7, 7]] {
        let shape = [bad.len()];
        assert!(matches!(
            UniqueIndices::verify_and_upload(ctx, "dup", &shape, bad),
            Err(Error::Invalid { .. })
        ));
    }
    // Per row: the same value in two rows is fine, twice in one row is not.
    assert!(UniqueIndices::verify_and_upload(ctx, "rows", &[2, 2], &[0, 1, 1, 0]).is_ok());
    assert!(UniqueIndices::verify_and_upload(ctx, "rows", &[2, 2], &[0, 1, 1, 1]).is_err());
    // Not permutations: a repeat, a value out of range, a wrong length.
    for (table, rows, cols) in [
        (vec![0u32, 1, 2, 2], 2, 2),
        (vec![0, 1, 2, 4], 2, 2),
        (vec![0, 1, 2], 2, 2),
    ] {
        assert!(PermutationCertificate::verify_and_upload(ctx, "p", &table, rows, cols).is_err());
    }
}

#[test]
fn plain_op_set_refuses_the_certified_route() {
    let ctx = test_context();
    let plain = OpSet::plain();
    let cert = UniqueIndices::verify_and_upload(ctx, "ids", &[2], &[1, 0]).unwrap();
    let dst = f32s(ctx, &[4], &[0.0; 4]);
    let src = f32s(ctx, &[2], &[1.0, 2.0]);
    let expect_plain = |r: Result<Scatter>| match r {
        Err(Error::NoRoute { op, failed, .. }) => {
            assert_eq!(op, OP);
            assert!(failed.iter().any(|f| f.contains("`plain`")), "{failed:?}");
        }
        other => panic!("expected NoRoute, got {other:?}"),
    };
    expect_plain(scatter(ctx, &plain, &dst, cert.tensor(), &src, Some(&cert)));
    expect_plain(scatter_on_route(
        ctx,
        &plain,
        &dst,
        cert.tensor(),
        &src,
        Some(&cert),
        ScatterRoute::ParallelUnique,
    ));
    // The duplicate-safe scatter is for every session.
    let plan = scatter(ctx, &plain, &dst, cert.tensor(), &src, None).unwrap();
    assert_eq!(plan.route, ScatterRoute::DuplicateSafe);
}

#[test]
fn centroid_head_chain_takes_the_parallel_route() {
    // E2B shapes: 2048 centroid logits -> TopK 32 -> token_ordering [2048, 128] rows ->
    // 4096 ids -> scatter into a 262144 row prefilled with min(selected) - 1.
    let ctx = test_context();
    let mtp = OpSet::with_mtp();
    let mut r = rng(17);
    let (clusters, per, k) = (2048usize, 128usize, 32usize);
    let vocab = clusters * per;
    let mut ordering: Vec<u32> = (0..vocab as u32).collect();
    ordering.shuffle(&mut r);
    let perm =
        PermutationCertificate::verify_and_upload(ctx, "token_ordering", &ordering, clusters, per)
            .unwrap();
    let logits_host: Vec<f32> = (0..clusters).map(|_| r.random_range(-3.0..3.0)).collect();
    let logits = f32s(ctx, &[1, 1, clusters], &logits_host);
    let values = Tensor::zeros(ctx, "v", &[1, 1, k], DType::F32).unwrap();
    let top = Tensor::zeros(ctx, "top", &[1, 1, k], DType::U32).unwrap();
    let t = topk(ctx, &mtp, &logits, &values, &top).unwrap();
    assert_eq!(t.route, TopKRoute::Fast2048To32);
    let ids = Tensor::zeros(ctx, "ids", &[1, 1, k * per], DType::U32).unwrap();
    let (gather, cert) = perm.select_rows(ctx, &t.distinct, &ids).unwrap();
    assert!(cert.certifies(&ids));
    let selected: Vec<f32> = (0..k * per).map(|_| r.random_range(-20.0..20.0)).collect();
    let fill = selected.iter().cloned().fold(f32::INFINITY, f32::min) - 1.0;
    let src = f32s(ctx, &[1, 1, k * per], &selected);
    let dst = f32s(ctx, &[1, 1, vocab], &vec![fill; vocab]);
    let s = scatter(ctx, &mtp, &dst, &ids, &src, Some(&cert)).unwrap();
    assert_eq!(s.route, ScatterRoute::ParallelUnique);

    let mut kernels = vec![t.kernel];
    kernels.extend(gather);
    kernels.extend(s.kernels);
    run_kernels(ctx, &kernels);

    let (_, top_ref) = topk_ref(&logits_host, clusters, k);
    let ids_ref: Vec<u32> = top_ref
        .iter()
        .flat_map(|&c| ordering[c as usize * per..(c as usize + 1) * per].to_vec())
        .collect();
    let ids_gpu = pollster::block_on(read_tensor_u32(ctx, &ids)).unwrap();
    assert_eq!(ids_gpu, ids_ref);
    let want = scatter_ref(&vec![fill; vocab], vocab, &ids_ref, &selected, k * per);
    assert_eq!(read(&dst), want);
}

#[test]
fn select_rows_guards() {
    let ctx = test_context();
    let mtp = OpSet::with_mtp();
    let perm: Vec<u32> = (0..8).rev().collect();
    let cert = PermutationCertificate::verify_and_upload(ctx, "p", &perm, 4, 2).unwrap();
    // A TopK over 6 entries could select row 5 of a 4-row table: refused.
    let x = Tensor::zeros(ctx, "x", &[1, 6], DType::F32).unwrap();
    let v = Tensor::zeros(ctx, "v", &[1, 2], DType::F32).unwrap();
    let i = Tensor::zeros(ctx, "i", &[1, 2], DType::U32).unwrap();
    let wide = topk(ctx, &mtp, &x, &v, &i).unwrap();
    let ids = Tensor::zeros(ctx, "ids", &[1, 4], DType::U32).unwrap();
    assert!(matches!(
        cert.select_rows(ctx, &wide.distinct, &ids),
        Err(Error::Invalid { .. })
    ));
    // Wrong output shape or dtype.
    let x = Tensor::zeros(ctx, "x", &[1, 4], DType::F32).unwrap();
    let ok = topk(ctx, &mtp, &x, &v, &i).unwrap();
    for bad in [
        Tensor::zeros(ctx, "b", &[1, 5], DType::U32).unwrap(),
        Tensor::zeros(ctx, "b", &[2, 2], DType::U32).unwrap(),
        Tensor::zeros(ctx, "b", &[1, 4], DType::I32).unwrap(),
    ] {
        assert!(cert.select_rows(ctx, &ok.distinct, &bad).is_err());
    }
    assert!(cert.select_rows(ctx, &ok.distinct, &ids).is_ok());
}

#[test]
fn malformed_arguments_are_invalid() {
    let ctx = test_context();
    let ops = OpSet::with_mtp();
    let t = |shape: &[usize], dtype| Tensor::zeros(ctx, "t", shape, dtype).unwrap();
    let cases = [
        (
            t(&[2, 5], DType::I32),
            t(&[2, 3], DType::U32),
            t(&[2, 3], DType::F32),
        ),
        (
            t(&[2, 5], DType::F32),
            t(&[2, 3], DType::I32),
            t(&[2, 3], DType::F32),
        ),
        (
            t(&[2, 5], DType::F32),
            t(&[2, 3], DType::U32),
            t(&[2, 3], DType::U32),
        ),
        (
            t(&[2, 5], DType::F32),
            t(&[3, 3], DType::U32),
            t(&[3, 3], DType::F32),
        ),
        (
            t(&[2, 5], DType::F32),
            t(&[2, 3], DType::U32),
            t(&[2, 4], DType::F32),
        ),
        (
            t(&[2, 5], DType::F32),
            t(&[6], DType::U32),
            t(&[6], DType::F32),
        ),
        (
            t(&[2, 0], DType::F32),
            t(&[2, 3], DType::U32),
            t(&[2, 3], DType::F32),
        ),
        (
            t(&[2, 5], DType::F32),
            t(&[2, 0], DType::U32),
            t(&[2, 0], DType::F32),
        ),
    ];
    for (dst, idx, src) in &cases {
        let r = scatter(ctx, &ops, dst, idx, src, None);
        assert!(matches!(r, Err(Error::Invalid { op: OP, .. })), "{r:?}");
    }
}

#[test]
fn random_cases_pass() {
    let mut r = rng(41);
    for seed in 0..3 {
        assert_cases_pass(&random_cases(&mut r), seed..seed + 1);
    }
    assert_cases_pass(&bench_cases(), 0..1);
}

#[test]
fn folded_grids_are_bound_checked() {
    // 2 rows x 2500 sources = 20 workgroups -> folded above 8, on both routes.
    for (indices, route) in [
        (ScatterIndices::Duplicates, ScatterRoute::DuplicateSafe),
        (
            ScatterIndices::CertifiedUnique,
            ScatterRoute::ParallelUnique,
        ),
    ] {
        let case = ScatterCase {
            rows: 2,
            n: 3000,
            s: 2500,
            indices,
            out_of_range: true,
            route: Some(route),
        };
        crate::harness::assert_folded_case_passes(&case, 0..2);
    }
}

// Tests of the CPU reference alone.
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
