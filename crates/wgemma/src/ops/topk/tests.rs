use super::*;
use crate::gpu::{read_tensor_bytes, read_tensor_u32, run_kernels};
use crate::harness::{assert_cases_pass, rng, test_context};

struct Run {
    route: TopKRoute,
    value_bits: Vec<u32>,
    indices: Vec<u32>,
}

fn run(x: &[f32], rows: usize, k: usize, route: Option<TopKRoute>) -> Run {
    let ctx = test_context();
    let n = x.len() / rows;
    let input = Tensor::from_f32(ctx, "x", &[rows, 1, n], x).unwrap();
    let values = Tensor::zeros(ctx, "v", &[rows, 1, k], DType::F32).unwrap();
    let indices = Tensor::zeros(ctx, "i", &[rows, 1, k], DType::U32).unwrap();
    let ops = OpSet::with_mtp();
    let plan = match route {
        Some(r) => topk_on_route(ctx, &ops, &input, &values, &indices, r).unwrap(),
        None => topk(ctx, &ops, &input, &values, &indices).unwrap(),
    };
    run_kernels(ctx, std::slice::from_ref(&plan.kernel));
    let bytes = pollster::block_on(read_tensor_bytes(ctx, &values)).unwrap();
    Run {
        route: plan.route,
        value_bits: bytemuck::pod_collect_to_vec(&bytes[..rows * k * 4]),
        indices: pollster::block_on(read_tensor_u32(ctx, &indices)).unwrap(),
    }
}

fn bits(x: &[f32]) -> Vec<u32> {
    x.iter().map(|v| v.to_bits()).collect()
}

/// 2048 values with every hard case: ties (also across +0 / -0), NaNs of several payloads
/// and signs, infinities, and more top-32 candidates tied at the cut than fit.
fn hard_2048() -> Vec<f32> {
    let mut x: Vec<f32> = (0..2048).map(|i| ((i * 37) % 11) as f32 - 5.0).collect();
    x[2047] = f32::NAN;
    x[5] = -f32::NAN;
    x[1000] = f32::from_bits(0x7fc0_1234);
    x[7] = f32::INFINITY;
    x[1500] = f32::INFINITY;
    x[3] = f32::NEG_INFINITY;
    x[100] = -0.0;
    x[101] = 0.0;
    x
}

#[test]
fn routes_are_bit_identical_on_the_fast_shape() {
    let mut r = rng(5);
    let mut inputs = vec![hard_2048()];
    for data in [TopKData::Uniform, TopKData::Ties, TopKData::Specials] {
        inputs.push(case_input(&mut r, 2048, data));
    }
    for x in inputs {
        let fast = run(&x, 1, 32, None);
        let generic = run(&x, 1, 32, Some(TopKRoute::Generic));
        assert_eq!(fast.route, TopKRoute::Fast2048To32);
        assert_eq!(generic.route, TopKRoute::Generic);
        assert_eq!(fast.indices, generic.indices);
        assert_eq!(fast.value_bits, generic.value_bits);
        let (rv, ri) = topk_ref(&x, 2048, 32);
        assert_eq!(fast.indices, ri);
        assert_eq!(fast.value_bits, bits(&rv));
    }
}

#[test]
fn nan_first_then_inf_and_ties_lower_index_first() {
    let x = hard_2048();
    for route in [TopKRoute::Fast2048To32, TopKRoute::Generic] {
        let got = run(&x, 1, 32, Some(route));
        // The NaNs (every payload and sign is the same greatest key) in index order, with
        // their payloads intact, then the infinities, then the 5.0s in index order.
        assert_eq!(&got.indices[..5], &[5, 1000, 2047, 7, 1500], "{route:?}");
        assert_eq!(got.value_bits[0], (-f32::NAN).to_bits());
        assert_eq!(got.value_bits[1], 0x7fc0_1234);
        assert_eq!(got.value_bits[3], f32::INFINITY.to_bits());
        let fives: Vec<u32> = (0..2048u32)
            .filter(|&i| x[i as usize] == 5.0)
            .take(27)
            .collect();
        assert_eq!(&got.indices[5..], &fives[..], "{route:?}");
        assert!(got.value_bits[5..].iter().all(|&b| b == 5.0f32.to_bits()));
    }
}

#[test]
fn plus_and_minus_zero_are_equal_and_keep_their_sign() {
    // Generic route, small row: -0 at 1, +0 at 2, -0 at 4: equal keys, so index order.
    let x = [-1.0, -0.0, 0.0, -2.0, -0.0, f32::NEG_INFINITY];
    let got = run(&x, 1, 6, Some(TopKRoute::Generic));
    assert_eq!(got.indices, vec![1, 2, 4, 0, 3, 5]);
    assert_eq!(got.value_bits[0], (-0.0f32).to_bits());
    assert_eq!(got.value_bits[1], 0.0f32.to_bits());
    assert_eq!(got.value_bits[2], (-0.0f32).to_bits());
    // Fast route: only zeros and negatives, so the cut falls inside the zeros.
    let mut y = vec![-3.0f32; 2048];
    for i in (0..2048).step_by(40) {
        y[i] = if i % 80 == 0 { -0.0 } else { 0.0 };
    }
    let fast = run(&y, 1, 32, None);
    assert_eq!(fast.route, TopKRoute::Fast2048To32);
    let zeros: Vec<u32> = (0..2048).step_by(40).take(32).collect();
    assert_eq!(fast.indices, zeros);
    assert_eq!(fast.value_bits, bits(&topk_ref(&y, 2048, 32).0));
    assert_eq!(fast.value_bits[0], (-0.0f32).to_bits());
    assert_eq!(fast.value_bits[1], 0.0f32.to_bits());
}

#[test]
fn generic_handles_several_rows_all_equal_and_full_sorts() {
    // Three rows; the middle one all equal (ranks come only from the index tie-break).
    let mut x = vec![0.5f32; 3 * 700];
    for (i, v) in x[..700].iter_mut().enumerate() {
        *v = (i % 13) as f32;
    }
    for (i, v) in x[1400..].iter_mut().enumerate() {
        *v = -((i % 7) as f32);
    }
    let got = run(&x, 3, 20, None);
    assert_eq!(got.route, TopKRoute::Generic);
    let (rv, ri) = topk_ref(&x, 700, 20);
    assert_eq!(got.indices, ri);
    assert_eq!(got.value_bits, bits(&rv));
    assert_eq!(&got.indices[20..40], &(0..20).collect::<Vec<u32>>()[..]);
    // k == n == 1 and a full sort of a row that is not a multiple of the tile.
    assert_eq!(run(&[f32::NAN], 1, 1, None).indices, vec![0]);
    let y: Vec<f32> = (0..300).map(|i| ((i * 7919) % 300) as f32).collect();
    assert_eq!(run(&y, 1, 300, None).indices, topk_ref(&y, 300, 300).1);
}

#[test]
fn route_choice_and_forced_route_guards() {
    let ctx = test_context();
    let ops = OpSet::with_mtp();
    let t = |shape: &[usize], dtype| Tensor::zeros(ctx, "t", shape, dtype).unwrap();
    let pick = |n: usize, rows: usize, k: usize| {
        let x = t(&[rows, 1, n], DType::F32);
        let (v, i) = (t(&[rows, 1, k], DType::F32), t(&[rows, 1, k], DType::U32));
        topk(ctx, &ops, &x, &v, &i).unwrap().route
    };
    assert_eq!(pick(2048, 1, 32), TopKRoute::Fast2048To32);
    assert_eq!(pick(2048, 1, 31), TopKRoute::Generic);
    assert_eq!(pick(2048, 2, 32), TopKRoute::Generic);
    assert_eq!(pick(2047, 1, 32), TopKRoute::Generic);
    assert_eq!(pick(4096, 1, 32), TopKRoute::Generic);

    let x = t(&[2, 1, 2000], DType::F32);
    let (v, i) = (t(&[2, 1, 16], DType::F32), t(&[2, 1, 16], DType::U32));
    match topk_on_route(ctx, &ops, &x, &v, &i, TopKRoute::Fast2048To32) {
        Err(Error::NoRoute { op, failed, .. }) => {
            assert_eq!(op, OP);
            assert_eq!(failed.len(), 2, "{failed:?}");
            assert!(failed[0].contains("one row of 2048"), "{failed:?}");
            assert!(failed[1].contains("k == 32"), "{failed:?}");
        }
        other => panic!("expected NoRoute, got {other:?}"),
    }
}

#[test]
fn plain_op_set_has_no_topk() {
    let ctx = test_context();
    let x = Tensor::zeros(ctx, "x", &[1, 1, 2048], DType::F32).unwrap();
    let v = Tensor::zeros(ctx, "v", &[1, 1, 32], DType::F32).unwrap();
    let i = Tensor::zeros(ctx, "i", &[1, 1, 32], DType::U32).unwrap();
    for route in [
        None,
        Some(TopKRoute::Fast2048To32),
        Some(TopKRoute::Generic),
    ] {
        let r = match route {
            None => topk(ctx, &OpSet::plain(), &x, &v, &i),
            Some(route) => topk_on_route(ctx, &OpSet::plain(), &x, &v, &i, route),
        };
        match r {
            Err(Error::NoRoute { op, failed, .. }) => {
                assert_eq!(op, OP);
                assert!(failed.iter().any(|f| f.contains("`plain`")), "{failed:?}");
            }
            other => panic!("expected NoRoute, got {other:?}"),
        }
    }
}

#[test]
fn malformed_inputs_are_invalid() {
    let ctx = test_context();
    let ops = OpSet::with_mtp();
    let t = |shape: &[usize], dtype| Tensor::zeros(ctx, "t", shape, dtype).unwrap();
    let x = t(&[2, 10], DType::F32);
    let cases = [
        (
            t(&[2, 10], DType::I32),
            t(&[2, 3], DType::F32),
            t(&[2, 3], DType::U32),
        ),
        (x.clone(), t(&[2, 3], DType::U32), t(&[2, 3], DType::U32)),
        (x.clone(), t(&[2, 3], DType::F32), t(&[2, 3], DType::I32)),
        (x.clone(), t(&[2, 0], DType::F32), t(&[2, 0], DType::U32)),
        (x.clone(), t(&[2, 11], DType::F32), t(&[2, 11], DType::U32)),
        (x.clone(), t(&[3, 3], DType::F32), t(&[3, 3], DType::U32)),
        (x.clone(), t(&[2, 3], DType::F32), t(&[2, 4], DType::U32)),
        (x.clone(), t(&[6], DType::F32), t(&[6], DType::U32)),
        (
            t(&[2, 0], DType::F32),
            t(&[2, 0], DType::F32),
            t(&[2, 0], DType::U32),
        ),
    ];
    for (x, v, i) in &cases {
        let r = topk(ctx, &ops, x, v, i);
        assert!(matches!(r, Err(Error::Invalid { op: OP, .. })), "{r:?}");
    }
}

#[test]
fn distinct_indices_token_names_the_indices_tensor() {
    let ctx = test_context();
    let x = Tensor::zeros(ctx, "x", &[1, 1, 2048], DType::F32).unwrap();
    let v = Tensor::zeros(ctx, "v", &[1, 1, 32], DType::F32).unwrap();
    let i = Tensor::zeros(ctx, "i", &[1, 1, 32], DType::U32).unwrap();
    let other = Tensor::zeros(ctx, "i2", &[1, 1, 32], DType::U32).unwrap();
    let plan = topk(ctx, &OpSet::with_mtp(), &x, &v, &i).unwrap();
    let d = &plan.distinct;
    assert!(d.certifies(&i));
    assert!(!d.certifies(&other));
    assert!(!d.certifies(&i.reshaped(&[32]).unwrap()));
    assert_eq!((d.rows(), d.k(), d.bound()), (1, 32, 2048));
}

#[test]
fn random_cases_pass() {
    let mut r = rng(21);
    for seed in 0..3 {
        assert_cases_pass(&random_cases(&mut r), seed..seed + 1);
    }
    assert_cases_pass(&bench_cases(), 0..1);
}

#[test]
fn fast_route_worst_case_candidates_and_thread_layouts() {
    // Element e belongs to thread e % 64. Thread t's elements all exceed thread t+1's: the
    // 32nd greatest thread maximum is thread 31's, so ~1000 elements are candidates.
    let blocks: Vec<f32> = (0..2048)
        .map(|e| -((e % 64) as f32) * 100.0 + (e / 64) as f32)
        .collect();
    // The same with thread order reversed, and the top 32 all in one thread.
    let reversed: Vec<f32> = (0..2048)
        .map(|e| ((e % 64) as f32) * 100.0 - (e / 64) as f32)
        .collect();
    let one_thread: Vec<f32> = (0..2048)
        .map(|e| {
            if e % 64 == 17 {
                1000.0 + e as f32
            } else {
                (e % 50) as f32
            }
        })
        .collect();
    // All equal: the threshold is decided by indices alone (candidates = exactly 32).
    let equal = vec![2.5f32; 2048];
    let descending: Vec<f32> = (0..2048).map(|e| -(e as f32)).collect();
    let ascending: Vec<f32> = (0..2048).map(|e| e as f32).collect();
    for x in [blocks, reversed, one_thread, equal, descending, ascending] {
        let fast = run(&x, 1, 32, None);
        assert_eq!(fast.route, TopKRoute::Fast2048To32);
        let (rv, ri) = topk_ref(&x, 2048, 32);
        assert_eq!(fast.indices, ri);
        assert_eq!(fast.value_bits, bits(&rv));
    }
}

#[test]
fn generic_folded_grid_is_bound_checked() {
    // 3 rows x 12 tiles = 36 workgroups -> folded above 8.
    let case = TopKCase {
        rows: 3,
        n: 3000,
        k: 40,
        route: Some(TopKRoute::Generic),
        data: TopKData::Specials,
    };
    crate::harness::assert_folded_case_passes(&case, 0..2);
}

// Tests of the CPU reference alone.
#[test]
fn order_ties_and_specials() {
    let x = [
        1.0,
        f32::NAN,
        -0.0,
        0.0,
        f32::INFINITY,
        1.0,
        f32::NEG_INFINITY,
    ];
    let (v, i) = topk_ref(&x, 7, 7);
    assert_eq!(i, vec![1, 4, 0, 5, 2, 3, 6]);
    assert!(v[0].is_nan());
    assert_eq!(v[4].to_bits(), (-0.0f32).to_bits());
    let (_, i) = topk_ref(&[3.0, 5.0, 5.0, 1.0, 2.0, 2.0], 3, 2);
    assert_eq!(i, vec![1, 2, 1, 2]);
}
