//! Route, guard and edge-case tests of the MoE ops (random shapes also run through
//! `tests/ops.rs`).

use super::*;
use crate::gpu::{read_tensor_f32, read_tensor_u32, run_kernels, ContextOptions};
use crate::harness::{assert_cases_pass, check, rng, test_context, OpCase};
use crate::ops::linear::quantize_q4;

const Q4G32: ExpertFormat = ExpertFormat::Q4 { group: 32 };
const FORMATS: [ExpertFormat; 4] = [
    ExpertFormat::F32,
    ExpertFormat::F16,
    Q4G32,
    ExpertFormat::Q4 { group: 64 },
];

fn route_of(format: ExpertFormat) -> MoeLinearRoute {
    match format {
        ExpertFormat::F32 => MoeLinearRoute::DenseF32,
        ExpertFormat::F16 => MoeLinearRoute::DenseF16,
        ExpertFormat::Q4 { .. } => MoeLinearRoute::Q4Grouped,
    }
}

fn boxed<C: OpCase + 'static>(c: C) -> Box<dyn OpCase> {
    Box::new(c)
}

fn assert_invalid<T: std::fmt::Debug>(r: Result<T>, what: &str) {
    match r {
        Err(Error::Invalid { what: w, .. }) if w.contains(what) => {}
        other => panic!("expected Invalid about `{what}`, got {other:?}"),
    }
}

fn assert_no_route<T: std::fmt::Debug>(r: Result<T>, guards: &[&str]) {
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

fn f32_tensor(shape: &[usize], data: &[f32]) -> Tensor {
    Tensor::from_f32(test_context(), "t", shape, data).unwrap()
}

fn zeros(shape: &[usize], dtype: DType) -> Tensor {
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

// ---- gathered-expert linear ----

/// Up to 9 slots per expert (3 batches of the grouped route), both epilogues, x per token
/// and per slot, every format.
#[test]
fn slots_sharing_experts_in_batches() {
    let mut cases = Vec::new();
    for format in FORMATS {
        for (geglu, per_slot) in [(false, false), (true, false), (false, true), (true, true)] {
            let mut c = MoeLinearCase::new(9, 4, 4, 38, 64, format, route_of(format));
            c.pool = Some(4);
            c.x_per_slot = per_slot;
            if geglu {
                c.epilogue = MoeEpilogue::Geglu;
            }
            cases.push(boxed(c));
        }
    }
    assert_cases_pass(&cases, 0..2);
}

/// Ids need not come from the router: repeated experts within a row, out-of-range ids
/// (zero rows) and every route.
#[test]
fn arbitrary_ids_repeats_and_out_of_range() {
    let ctx = test_context();
    let (experts, n, k) = (5, 6, 64);
    let mut r = rng(11);
    let w: Vec<f32> = (0..experts * n * k)
        .map(|_| rand::Rng::random_range(&mut r, -0.5f32..0.5))
        .collect();
    let x: Vec<f32> = (0..3 * k)
        .map(|_| rand::Rng::random_range(&mut r, -1.0f32..1.0))
        .collect();
    let ids = [1u32, 1, 3, 3, 1, 1, 4, 9, 4];
    let tx = f32_tensor(&[3, k], &x);
    let tids = Tensor::from_u32(ctx, "ids", &[3, 3], &ids).unwrap();
    for format in FORMATS {
        let host = ExpertHost::from_f32(&w, experts, n, k, format).unwrap();
        let weight = ExpertWeight::upload(ctx, &host).unwrap();
        let mut routes = vec![route_of(format)];
        if format != ExpertFormat::F32 && format != ExpertFormat::F16 {
            routes.push(MoeLinearRoute::Q4Generic);
        }
        for route in routes {
            for epilogue in [MoeEpilogue::None, MoeEpilogue::Geglu] {
                let outputs = if epilogue == MoeEpilogue::Geglu {
                    n / 2
                } else {
                    n
                };
                let y = f32_tensor(&[9, outputs], &vec![f32::NAN; 9 * outputs]);
                let options = MoeLinearOptions {
                    route: Some(route),
                    epilogue,
                };
                let op = moe_expert_linear_with(ctx, &tx, &tids, &weight, &y, &options).unwrap();
                run_kernels(ctx, op.kernels());
                let got = pollster::block_on(read_tensor_f32(ctx, &y)).unwrap();
                let r = moe_expert_linear_ref(&x, 3, &ids, &host, epilogue == MoeEpilogue::Geglu);
                for (i, (g, want)) in got.iter().zip(&r.y).enumerate() {
                    assert!(
                        (g - want).abs() as f64 <= r.error_bound[i] + 1e-30,
                        "{route} {format:?} {epilogue:?} y[{i}] = {g}, want {want}"
                    );
                }
                // Slot 7 has expert 9 >= E: a zero row.
                assert!(got[7 * outputs..8 * outputs].iter().all(|&v| v == 0.0));
            }
        }
    }
}

/// Chunks of 1..3 whole experts (forced with a small binding limit), every format and
/// route, with an out-of-range id; N * K/g odd makes chunk scales start mid-word.
#[test]
fn expert_chunk_split_every_format() {
    let mut cases = Vec::new();
    for format in FORMATS {
        for split in [1, 3] {
            for geglu in [false, true] {
                let n = if geglu { 6 } else { 3 };
                let mut c = MoeLinearCase::new(3, 2, 7, n, 64, format, route_of(format));
                c.split = Some(split);
                c.invalid_slot = true;
                if geglu {
                    c.epilogue = MoeEpilogue::Geglu;
                }
                cases.push(boxed(c.clone()));
                if matches!(format, ExpertFormat::Q4 { .. }) {
                    c.route = MoeLinearRoute::Q4Generic;
                    c.force = true;
                    cases.push(boxed(c));
                }
            }
        }
    }
    let mut block = MoeBlockCase::new(3, 3, 6, 64, 64, Q4G32);
    block.split = Some(2);
    cases.push(boxed(block));
    assert_cases_pass(&cases, 0..2);
}

#[test]
fn chunks_hold_whole_experts() {
    let ctx = test_context();
    let w = vec![0.5f32; 7 * 3 * 32];
    let host = ExpertHost::from_f32(&w, 7, 3, 32, Q4G32).unwrap();
    let one = host.expert_binding_bytes();
    let weight = ExpertWeight::upload_with_max_binding(ctx, &host, 3 * one).unwrap();
    let ranges: Vec<_> = weight.chunks().iter().map(|c| c.experts.clone()).collect();
    assert_eq!(ranges, vec![0..3, 3..6, 6..7]);
    assert_eq!(ExpertWeight::upload(ctx, &host).unwrap().chunks().len(), 1);
    assert_invalid(
        ExpertWeight::upload_with_max_binding(ctx, &host, one - 1),
        "bytes of one expert",
    );
}

#[test]
fn linear_routes_and_guards() {
    let ctx = test_context();
    let caps = MoeDeviceCaps::of(ctx);
    let shape = |format, k, slots| MoeLinearShape { format, k, slots };
    let choose = |s| choose_moe_linear_route(s, &caps, None, String::new);
    assert_eq!(
        choose(shape(Q4G32, 64, 8)).unwrap(),
        MoeLinearRoute::Q4Grouped
    );
    assert_eq!(
        choose(shape(Q4G32, 40, 8)).unwrap(),
        MoeLinearRoute::Q4Generic
    );
    assert_eq!(
        choose(shape(Q4G32, 64, 1025)).unwrap(),
        MoeLinearRoute::Q4Generic
    );
    assert_eq!(
        choose(shape(ExpertFormat::F16, 40, 8)).unwrap(),
        MoeLinearRoute::DenseF16
    );
    assert_eq!(
        choose(shape(ExpertFormat::F32, 40, 8)).unwrap(),
        MoeLinearRoute::DenseF32
    );
    let forced = |r, s| choose_moe_linear_route(s, &caps, Some(r), String::new);
    assert_no_route(
        forced(MoeLinearRoute::Q4Grouped, shape(Q4G32, 40, 2000)),
        &[
            "q4_grouped: K % 32 == 0",
            "q4_grouped: slots M * top_k <= 1024",
        ],
    );
    assert_no_route(
        forced(MoeLinearRoute::DenseF32, shape(Q4G32, 64, 8)),
        &["dense_f32: f32 weight"],
    );
    assert_no_route(
        forced(MoeLinearRoute::Q4Generic, shape(ExpertFormat::F16, 64, 8)),
        &["q4_generic: Q4 weight"],
    );
    let tiny = MoeDeviceCaps {
        max_invocations_per_workgroup: 32,
        max_workgroup_size_x: 32,
        max_workgroup_storage: 1024,
    };
    let f = moe_linear_failed_guards(MoeLinearRoute::Q4Grouped, shape(Q4G32, 64, 8), &tiny);
    assert_eq!(f.len(), 2, "{f:?}");
    assert!(f[0].contains("256 invocations") && f[1].contains("workgroup storage"));
    assert_no_route(
        choose_moe_linear_route(shape(Q4G32, 64, 8), &tiny, None, String::new),
        &[
            "q4_grouped: device",
            "q4_generic: device",
            "dense_f32: f32 weight",
        ],
    );
    assert_eq!(grouped_lanes(2816), 32);
    assert_eq!(grouped_lanes(704), 8);
    assert_eq!(grouped_lanes(32), 4);
}

/// More than 1024 slots: the auto route is the generic one, and it is right.
#[test]
fn many_slots_take_the_generic_route() {
    let mut c = MoeLinearCase::new(257, 4, 6, 5, 64, Q4G32, MoeLinearRoute::Q4Generic);
    c.invalid_slot = true;
    assert_cases_pass(&[boxed(c)], 0..1);
}

#[test]
fn linear_shape_guards() {
    let ctx = test_context();
    let host = ExpertHost::from_f32(&vec![0.25; 4 * 6 * 64], 4, 6, 64, Q4G32).unwrap();
    let w = ExpertWeight::upload(ctx, &host).unwrap();
    let x = zeros(&[2, 64], DType::F32);
    let ids = zeros(&[2, 3], DType::U32);
    let y = zeros(&[6, 6], DType::F32);
    let run = |x: &Tensor, ids: &Tensor, y: &Tensor, epilogue| {
        let o = MoeLinearOptions {
            route: None,
            epilogue,
        };
        moe_expert_linear_with(ctx, x, ids, &w, y, &o)
    };
    assert!(run(&x, &ids, &y, MoeEpilogue::None).is_ok());
    assert!(run(&zeros(&[6, 64], DType::F32), &ids, &y, MoeEpilogue::None).is_ok());
    assert!(run(&x, &ids, &zeros(&[6, 3], DType::F32), MoeEpilogue::Geglu).is_ok());
    let e = MoeEpilogue::None;
    assert_invalid(run(&zeros(&[2, 32], DType::F32), &ids, &y, e), "shape of x");
    assert_invalid(run(&zeros(&[4, 64], DType::F32), &ids, &y, e), "shape of x");
    assert_invalid(run(&zeros(&[2, 64], DType::F16), &ids, &y, e), "dtype of x");
    assert_invalid(run(&x, &zeros(&[2, 3], DType::I32), &y, e), "dtype of ids");
    assert_invalid(run(&x, &zeros(&[6], DType::U32), &y, e), "shape of ids");
    assert_invalid(run(&x, &ids, &zeros(&[6, 5], DType::F32), e), "shape of y");
    assert_invalid(run(&x, &ids, &y, MoeEpilogue::Geglu), "shape of y");
    let alias = x.prefix_view(&[6, 6]).unwrap();
    assert_invalid(run(&x, &ids, &alias, e), "buffer of y");
    let odd = ExpertWeight::upload(
        ctx,
        &ExpertHost::from_f32(&vec![0.25; 4 * 5 * 64], 4, 5, 64, Q4G32).unwrap(),
    )
    .unwrap();
    let o = MoeLinearOptions {
        route: None,
        epilogue: MoeEpilogue::Geglu,
    };
    assert_invalid(
        moe_expert_linear_with(ctx, &x, &ids, &odd, &zeros(&[6, 2], DType::F32), &o),
        "rows per expert N",
    );
}

#[test]
fn expert_host_guards() {
    assert_invalid(ExpertHost::f32(vec![0.0; 10], 2, 3, 2), "elements");
    assert_invalid(ExpertHost::f32(vec![], 0, 3, 2), "shape [E, N, K]");
    let q = quantize_q4(&[0.5; 5 * 32], 5, 32, 32).unwrap();
    assert_invalid(ExpertHost::from_q4(q.clone(), 2), "Q4 rows");
    let h = ExpertHost::from_q4(q, 5).unwrap();
    assert_eq!((h.experts, h.n, h.k), (5, 1, 32));
    assert_eq!(h.expert_bytes(), 16 + 2);
    assert!(matches!(
        ExpertHost::from_f32(&[0.5; 64], 1, 2, 32, ExpertFormat::Q4 { group: 48 }),
        Err(Error::Invalid { .. })
    ));
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
        for fused in [true, false] {
            let mut c = MoeBlockCase::new(3, 4, 8, 64, 128, format);
            c.fused_geglu = fused;
            cases.push(boxed(c));
        }
    }
    assert_cases_pass(&cases, 0..2);
}

/// The real 26B-A4B expert shapes (H 2816, I 704, top-8) with 16 experts instead of 128:
/// the grouped route at 32 lanes (K = 2816) and 8 lanes (K = 704), M = 1 and 3.
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
    // Route: 13 rows; grouped linear: 26 slots x 1 tile.
    for format in [Q4G32, ExpertFormat::Q4 { group: 64 }] {
        cases.push(boxed(MoeBlockCase::new(13, 2, 5, 64, 64, format)));
    }
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
