//! Route, guard and edge-case tests of the gathered-expert linear, the expert weights and
//! the down projection + combine.

use super::super::*;
use super::{assert_invalid, assert_no_route, boxed, f32_tensor, route_of, zeros, FORMATS, Q4G32};
use crate::gpu::{read_tensor_f32, run_kernels};
use crate::harness::{assert_cases_pass, rng, test_context};
use crate::ops::linear::quantize_q4;

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
    for down in [BlockDown::Combined, BlockDown::Separate] {
        let mut block = MoeBlockCase::new(3, 3, 6, 64, 64, Q4G32);
        block.split = Some(2);
        block.down = down;
        cases.push(boxed(block));
    }
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

// ---- down projection + combine ----

/// The fused route (M <= 4) and the separate one, every format, expert chunks (the fused
/// kernels of later chunks accumulate), x per slot and per token, out-of-range ids, and
/// top_k above the fused kernel's slot classes (K = 1024: 16 units, top-20: 2 slots each).
#[test]
fn down_combine_routes_chunks_and_wide_top_k() {
    use MoeCombineRoute::{Q4Fused, Separate};
    let mut cases = Vec::new();
    for format in FORMATS {
        let fused = matches!(format, ExpertFormat::Q4 { .. });
        for (m, split, per_token) in [(1, None, false), (4, Some(2), true), (3, Some(1), false)] {
            let route = if fused {
                Q4Fused
            } else {
                Separate(route_of(format))
            };
            let mut c = MoeDownCombineCase::new(m, 3, 7, 37, 64, format, route);
            c.split = split;
            c.x_per_token = per_token;
            c.invalid_slot = true;
            cases.push(boxed(c.clone()));
            if fused {
                c.route = Separate(MoeLinearRoute::Q4Generic);
                c.force = true;
                cases.push(boxed(c));
            }
        }
    }
    // M = 5: auto is the grouped linear + combine.
    let five = MoeDownCombineCase::new(5, 2, 6, 9, 64, Q4G32, Separate(MoeLinearRoute::Q4Grouped));
    cases.push(boxed(five));
    // K % 32 != 0: the generic linear + combine.
    let tail = MoeDownCombineCase::new(
        2,
        2,
        6,
        9,
        40,
        ExpertFormat::Q4 { group: 8 },
        Separate(MoeLinearRoute::Q4Generic),
    );
    cases.push(boxed(tail));
    let mut wide = MoeDownCombineCase::new(2, 20, 24, 10, 1024, Q4G32, Q4Fused);
    wide.split = Some(9);
    cases.push(boxed(wide));
    assert_cases_pass(&cases, 0..2);
    assert_eq!(fused_slot_classes(8, grouped_lanes(704)), 8);
    assert_eq!(fused_slot_classes(20, grouped_lanes(1024)), 16);
    assert_eq!(fused_slot_classes(3, 4), 4);
}

#[test]
fn down_combine_guards() {
    let ctx = test_context();
    let host = ExpertHost::from_f32(&vec![0.25; 4 * 6 * 64], 4, 6, 64, Q4G32).unwrap();
    let w = ExpertWeight::upload(ctx, &host).unwrap();
    let ids = |m| zeros(&[m, 2], DType::U32);
    let weights = |m| zeros(&[m, 2], DType::F32);
    let x = |m| zeros(&[2 * m, 64], DType::F32);
    let out = |m| zeros(&[m, 6], DType::F32);
    let build = |m, forced| {
        moe_expert_linear_combine(ctx, &x(m), &ids(m), &weights(m), &w, &out(m), forced)
    };
    assert_eq!(build(4, None).unwrap().route(), MoeCombineRoute::Q4Fused);
    assert_eq!(
        build(5, None).unwrap().route(),
        MoeCombineRoute::Separate(MoeLinearRoute::Q4Grouped)
    );
    assert_eq!(build(4, None).unwrap().kernels().len(), 1);
    assert_eq!(build(5, None).unwrap().kernels().len(), 2);
    assert_no_route(
        build(5, Some(MoeCombineRoute::Q4Fused)),
        &["q4_fused: M <= 4"],
    );
    let f16 = ExpertWeight::upload(
        ctx,
        &ExpertHost::from_f32(&vec![0.25; 4 * 6 * 40], 4, 6, 40, ExpertFormat::F16).unwrap(),
    )
    .unwrap();
    let x40 = zeros(&[2, 40], DType::F32);
    assert_no_route(
        moe_expert_linear_combine(
            ctx,
            &x40,
            &ids(1),
            &weights(1),
            &f16,
            &out(1),
            Some(MoeCombineRoute::Q4Fused),
        ),
        &["q4_fused: Q4 weight", "q4_fused: K % 32 == 0"],
    );
    let auto = moe_expert_linear_combine(ctx, &x40, &ids(1), &weights(1), &f16, &out(1), None);
    assert_eq!(
        auto.unwrap().route(),
        MoeCombineRoute::Separate(MoeLinearRoute::DenseF16)
    );
    let (i2, w2, x2, o2) = (ids(2), weights(2), x(2), out(2));
    let run = |x: &Tensor, w_: &Tensor, o: &Tensor| {
        moe_expert_linear_combine(ctx, x, &i2, w_, &w, o, None)
    };
    assert!(run(&x2, &w2, &o2).is_ok());
    assert_invalid(
        run(&x2, &zeros(&[2, 3], DType::F32), &o2),
        "shape of weights",
    );
    assert_invalid(
        run(&x2, &zeros(&[2, 2], DType::U32), &o2),
        "dtype of weights",
    );
    assert_invalid(run(&x2, &w2, &zeros(&[2, 7], DType::F32)), "shape of out");
    assert_invalid(run(&zeros(&[3, 64], DType::F32), &w2, &o2), "shape of x");
    let alias = x2.prefix_view(&[2, 6]).unwrap();
    assert_invalid(run(&x2, &w2, &alias), "buffer of out");
}
