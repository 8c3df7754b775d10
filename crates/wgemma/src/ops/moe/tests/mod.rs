//! Route, guard and edge-case tests of the MoE router, combine and whole block, and the
//! helpers `linear.rs` shares (random shapes also run through `tests/integration/ops.rs`).

use super::*;
use crate::gpu::{read_tensor_f32, read_tensor_u32, run_kernels, ContextOptions};
use crate::harness::{assert_cases_pass, check, rng, test_context, OpCase};

mod linear;

pub(super) const Q4G32: ExpertFormat = ExpertFormat::Q4 { group: 32 };
pub(super) const FORMATS: [ExpertFormat; 4] = [
    ExpertFormat::F32,
    ExpertFormat::F16,
    Q4G32,
    ExpertFormat::Q4 { group: 64 },
];

pub(super) fn route_of(format: ExpertFormat) -> MoeLinearRoute {
    match format {
        ExpertFormat::F32 => MoeLinearRoute::DenseF32,
        ExpertFormat::F16 => MoeLinearRoute::DenseF16,
        ExpertFormat::Q4 { .. } => MoeLinearRoute::Q4Grouped,
    }
}

pub(super) fn boxed<C: OpCase + 'static>(c: C) -> Box<dyn OpCase> {
    Box::new(c)
}

pub(super) fn assert_invalid<T: std::fmt::Debug>(r: Result<T>, what: &str) {
    match r {
        Err(Error::Invalid { what: w, .. }) if w.contains(what) => {}
        other => panic!("expected Invalid about `{what}`, got {other:?}"),
    }
}

pub(super) fn assert_no_route<T: std::fmt::Debug>(r: Result<T>, guards: &[&str]) {
    match r {
        Err(Error::NoRoute { failed, .. }) => {
            for g in guards {
                assert!(
                    failed.iter().any(|f| f.contains(g)),
                    "no failed guard mentions `{g}`: {failed:?}"
                );
            }
        }
        other => panic!("expected NoRoute, got {other:?}"),
    }
}

pub(super) fn f32_tensor(shape: &[usize], data: &[f32]) -> Tensor {
    Tensor::from_f32(test_context(), "t", shape, data).unwrap()
}

pub(super) fn zeros(shape: &[usize], dtype: DType) -> Tensor {
    Tensor::zeros(test_context(), "t", shape, dtype).unwrap()
}

#[test]
fn random_cases_pass() {
    for seed in 0..3 {
        let cases = random_cases(&mut rng(7000 + seed));
        assert_cases_pass(&cases, seed..seed + 1);
    }
}

// ---- router ----

/// Runs the route kernel on `scores` and returns (ids, weights).
fn run_route(scores: &[f32], experts: usize, top_k: usize, pes: &[f32]) -> (Vec<u32>, Vec<f32>) {
    let ctx = test_context();
    let m = scores.len() / experts;
    let ts = f32_tensor(&[m, experts], scores);
    let tp = f32_tensor(&[experts], pes);
    let ids = zeros(&[m, top_k], DType::U32);
    let w = zeros(&[m, top_k], DType::F32);
    run_kernels(ctx, &[moe_route(ctx, &ts, &tp, &ids, &w).unwrap()]);
    (
        pollster::block_on(read_tensor_u32(ctx, &ids)).unwrap(),
        pollster::block_on(read_tensor_f32(ctx, &w)).unwrap(),
    )
}

/// HF `Gemma4TextRouter` from the softmax on, computed with torch 2.15 on CPU:
/// softmax(dtype=f32) -> topk(3) -> /= sum -> * per_expert_scale[idx].
#[test]
fn route_matches_torch_golden() {
    let scores = [
        0.5, -1.25, 2.0, 0.75, 1.5, -0.5, //
        3.0, -2.0, 0.25, 2.5, -1.0, 1.0,
    ];
    let pes = [1.0, 0.5, 2.0, 1.5, 0.75, 1.25];
    let torch_ids = [2, 4, 3, 0, 3, 5];
    // The f32 bits torch printed.
    let torch_w = [
        0x3f87_3b88u32,
        0x3e76_116c,
        0x3e68_77f9,
        0x3f12_f805,
        0x3f05_b62e,
        0x3dc6_e693,
    ]
    .map(f32::from_bits);
    let (ids, w) = run_route(&scores, 6, 3, &pes);
    assert_eq!(ids, torch_ids);
    for (g, t) in w.iter().zip(torch_w) {
        assert!(
            (g - t).abs() <= 2e-6 * t,
            "{w:?} vs {torch_ids:?} {torch_w:?}"
        );
    }
    let (rid, rw) = moe_route_ref(&scores, 6, 3, &pes);
    assert_eq!(rid, torch_ids);
    for (r, t) in rw.iter().zip(torch_w) {
        assert!((r - t).abs() <= 1e-6 * t, "{rw:?}");
    }
}

/// Ties: lower expert first (torch.topk's CPU order among ties is unspecified, see the
/// module docs). NaN ranks first, -0 == +0, -inf last; equal scores get equal weights.
#[test]
fn route_ties_lower_index_first() {
    let pes = [1.0, 2.0, 0.5, 1.5, 0.25];
    let (ids, w) = run_route(&[1.0, 3.0, 3.0, 2.0, 3.0], 5, 4, &pes);
    assert_eq!(ids, [1, 2, 4, 3]);
    let (rid, rw) = moe_route_ref(&[1.0, 3.0, 3.0, 2.0, 3.0], 5, 4, &pes);
    assert_eq!(ids, rid);
    for (g, r) in w.iter().zip(&rw) {
        assert!((g - r).abs() <= 1e-6, "{w:?} vs {rw:?}");
    }
    // w_j / pes[e_j] is the renormalised probability: equal for tied scores.
    let p: Vec<f32> = ids
        .iter()
        .zip(&w)
        .map(|(&e, &v)| v / pes[e as usize])
        .collect();
    assert!(
        (p[0] - p[1]).abs() < 1e-7 && (p[1] - p[2]).abs() < 1e-7,
        "{p:?}"
    );
    // All equal: the first k experts, weights pes / k.
    let (ids, w) = run_route(&[0.7; 5], 5, 3, &pes);
    assert_eq!(ids, [0, 1, 2]);
    for (j, v) in w.iter().enumerate() {
        assert!((v - pes[j] / 3.0).abs() < 1e-6, "{w:?}");
    }
    // The order keys: NaN first, then 0.0 / -0.0 / 0.0 in index order, -inf last.
    let row = [0.0, -0.0, f32::NAN, f32::NEG_INFINITY, 0.0];
    let (ids, _) = run_route(&row, 5, 5, &pes);
    assert_eq!(ids, [2, 0, 1, 4, 3]);
    assert_eq!(moe_route_ref(&row, 5, 5, &pes).0, ids);
}

/// Many rows of heavily tied scores against the reference (ids exact).
#[test]
fn route_tie_cases_and_a4b_shape() {
    let mut cases: Vec<Box<dyn OpCase>> = Vec::new();
    for (m, e, k) in [
        (5, 16, 4),
        (3, 128, 8),
        (2, 2048, 64),
        (1, 1, 1),
        (13, 70, 64),
    ] {
        for ties in [false, true] {
            cases.push(boxed(MoeRouteCase {
                m,
                experts: e,
                top_k: k,
                ties,
            }));
        }
    }
    assert_cases_pass(&cases, 0..2);
}

#[test]
fn route_guards_fail_closed() {
    let ctx = test_context();
    let scores = zeros(&[2, 8], DType::F32);
    let pes = zeros(&[8], DType::F32);
    let ids = zeros(&[2, 9], DType::U32);
    let w = zeros(&[2, 9], DType::F32);
    assert_no_route(
        moe_route(ctx, &scores, &pes, &ids, &w),
        &["top_k <= min(E, 64)"],
    );
    let big = zeros(&[1, 2049], DType::F32);
    let big_pes = zeros(&[2049], DType::F32);
    let (ids65, w65) = (zeros(&[1, 65], DType::U32), zeros(&[1, 65], DType::F32));
    assert_no_route(
        moe_route(ctx, &big, &big_pes, &ids65, &w65),
        &["E <= 2048", "top_k <= min(E, 64)"],
    );
    let ids = zeros(&[2, 4], DType::U32);
    let w = zeros(&[2, 4], DType::F32);
    let i32_ids = zeros(&[2, 4], DType::I32);
    assert_invalid(moe_route(ctx, &scores, &pes, &i32_ids, &w), "dtype of ids");
    assert_invalid(
        moe_route(ctx, &scores, &pes, &ids, &zeros(&[2, 3], DType::F32)),
        "shape of weights",
    );
    assert_invalid(
        moe_route(ctx, &scores, &zeros(&[7], DType::F32), &ids, &w),
        "shape of per_expert_scale",
    );
    assert_invalid(
        moe_route(ctx, &scores, &pes, &zeros(&[3, 4], DType::U32), &w),
        "shapes of scores",
    );
    let alias = scores.prefix_view(&[2, 4]).unwrap();
    assert_invalid(
        moe_route(ctx, &scores, &pes, &ids, &alias),
        "buffer of weights",
    );
    assert!(moe_route(ctx, &scores, &pes, &ids, &w).is_ok());
}

// ---- combine and the block ----

#[test]
fn combine_cases_and_guards() {
    let cases: Vec<Box<dyn OpCase>> = [(1, 8, 2816), (3, 8, 2816), (5, 1, 1), (2, 3, 300)]
        .into_iter()
        .map(|(m, top_k, h)| boxed(MoeCombineCase { m, top_k, h }))
        .collect();
    assert_cases_pass(&cases, 0..2);
    let ctx = test_context();
    let y = zeros(&[6, 16], DType::F32);
    let w = zeros(&[2, 3], DType::F32);
    let out = zeros(&[2, 16], DType::F32);
    assert!(moe_combine(ctx, &y, &w, &out).is_ok());
    assert_invalid(
        moe_combine(ctx, &zeros(&[5, 16], DType::F32), &w, &out),
        "shape of y",
    );
    assert_invalid(
        moe_combine(ctx, &y, &w, &zeros(&[3, 16], DType::F32)),
        "shape of out",
    );
    assert_invalid(
        moe_combine(ctx, &y, &zeros(&[6], DType::F32), &out),
        "shape of weights",
    );
    let alias = y.prefix_view(&[2, 16]).unwrap();
    assert_invalid(moe_combine(ctx, &y, &w, &alias), "buffer of out");
}

/// Router -> gate_up (+ GeGLU, fused or separate) -> down -> combine against the f64 expert
/// block, every format.
#[test]
fn block_matches_reference_every_format() {
    let mut cases = Vec::new();
    for format in FORMATS {
        for (fused, down) in [(true, BlockDown::Combined), (false, BlockDown::Separate)] {
            let mut c = MoeBlockCase::new(3, 4, 8, 64, 128, format);
            c.fused_geglu = fused;
            c.down = down;
            cases.push(boxed(c));
        }
    }
    assert_cases_pass(&cases, 0..2);
}

/// The real 26B-A4B expert shapes (H 2816, I 704, top-8) with 16 experts instead of 128:
/// the grouped route at 32 lanes (K = 2816) and 8 lanes (K = 704) and the fused down +
/// combine, M = 1 and 3.
#[test]
fn a4b_shapes_with_16_experts() {
    let mut cases = Vec::new();
    for m in [1, 3] {
        let mut gu = MoeLinearCase::new(m, 8, 16, 1408, 2816, Q4G32, MoeLinearRoute::Q4Grouped);
        gu.epilogue = MoeEpilogue::Geglu;
        gu.packed = true;
        cases.push(boxed(gu));
        let mut down = MoeLinearCase::new(m, 8, 16, 2816, 704, Q4G32, MoeLinearRoute::Q4Grouped);
        down.x_per_slot = true;
        down.packed = true;
        cases.push(boxed(down));
        let fused = MoeCombineRoute::Q4Fused;
        let mut dc = MoeDownCombineCase::new(m, 8, 16, 2816, 704, Q4G32, fused);
        dc.packed = true;
        cases.push(boxed(dc));
    }
    assert_cases_pass(&cases, 0..1);
}

#[test]
#[ignore = "~17 s on lavapipe (128-expert weights, 2 chunks each); a4b_shapes_with_16_experts covers the same routes"]
fn bench_cases_pass() {
    assert_cases_pass(&bench_cases(), 0..1);
}

/// Grids beyond the per-dimension limit fold to 2-D; every MoE shader must rebuild its
/// flat workgroup index (a context with a limit of 8 makes this cheap: each case below
/// launches 9..=64 workgroups per kernel).
#[test]
fn folded_grids() {
    static CTX: std::sync::OnceLock<GpuContext> = std::sync::OnceLock::new();
    let ctx = CTX.get_or_init(|| {
        GpuContext::new_blocking(ContextOptions {
            max_workgroups_per_dimension: Some(8),
            ..Default::default()
        })
        .unwrap()
    });
    let mut cases: Vec<Box<dyn OpCase>> = Vec::new();
    // Route: 13 rows; grouped linear: 26 slots x 1 tile (down and combine separate: M > 4).
    for format in [Q4G32, ExpertFormat::Q4 { group: 64 }] {
        cases.push(boxed(MoeBlockCase::new(13, 2, 5, 64, 64, format)));
    }
    // Fused down + combine: 4 tokens x 3 tiles of 8 rows (K = 704: 8 lanes, top-8).
    cases.push(boxed(MoeDownCombineCase::new(
        4,
        8,
        9,
        20,
        704,
        Q4G32,
        MoeCombineRoute::Q4Fused,
    )));
    // Dense: 6 slots x 8 outputs; generic: 6 slots x 100 outputs / 64.
    for format in [ExpertFormat::F32, ExpertFormat::F16] {
        for (n, epilogue) in [(8, MoeEpilogue::None), (16, MoeEpilogue::Geglu)] {
            let mut c = MoeLinearCase::new(3, 2, 5, n, 64, format, route_of(format));
            c.epilogue = epilogue;
            cases.push(boxed(c));
        }
    }
    let mut c = MoeLinearCase::new(3, 2, 6, 100, 64, Q4G32, MoeLinearRoute::Q4Generic);
    c.force = true;
    cases.push(boxed(c));
    // Combine: 7 x 400 outputs / 256.
    cases.push(boxed(MoeCombineCase {
        m: 7,
        top_k: 3,
        h: 400,
    }));
    for case in &cases {
        let report = pollster::block_on(check(ctx, case.as_ref(), 5)).unwrap();
        assert!(report.pass(), "{report}");
    }
}
