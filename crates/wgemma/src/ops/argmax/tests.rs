use super::*;
use crate::gpu::{read_tensor_u32, run_kernels};
use crate::harness::{assert_cases_pass, test_context};

fn run(rows: usize, x: &[f32], items: u32) -> Vec<u32> {
    let ctx = test_context();
    let n = x.len() / rows;
    let input = Tensor::from_f32(ctx, "x", &[rows, n], x).unwrap();
    let out = Tensor::zeros(ctx, "out", &[rows], DType::U32).unwrap();
    run_kernels(ctx, &argmax_blocked(ctx, &input, &out, items).unwrap());
    pollster::block_on(read_tensor_u32(ctx, &out)).unwrap()
}

#[test]
fn ties_pick_the_first_occurrence_across_blocks() {
    // Equal maxima in several stage-1 blocks (block = 256 * 1 here) and threads.
    let mut x = vec![0.0f32; 5000];
    for i in [300, 301, 2047, 4999] {
        x[i] = 7.0;
    }
    assert_eq!(run(1, &x, 1), vec![300]);
    assert_eq!(run(1, &x, 8), vec![300]);
    // Two equal maxima in the same thread's slots of one block (5 and 5 + 256).
    x[5] = 9.0;
    x[5 + 256] = 9.0;
    x[5 + 512] = 9.0;
    assert_eq!(run(1, &x, 8), vec![5]);
    // A tie between +0 and -0: they are equal, the first wins.
    let mut z = vec![-1.0f32; 600];
    z[400] = -0.0;
    z[500] = 0.0;
    assert_eq!(run(1, &z, 1), vec![400]);
}

#[test]
fn nan_is_the_maximum_and_the_first_nan_wins() {
    let mut x = vec![1.0f32; 3000];
    x[10] = f32::INFINITY;
    x[2500] = f32::NAN;
    x[2900] = -f32::NAN;
    assert_eq!(run(1, &x, 1), vec![2500]);
    x[20] = f32::from_bits(0x7f80_0001); // a signalling-NaN payload
    assert_eq!(run(1, &x, 8), vec![20]);
    assert_eq!(argmax_ref(&x, 3000), vec![20]);
}

#[test]
fn infinities_and_all_negative_rows() {
    let x = [
        f32::NEG_INFINITY,
        f32::NEG_INFINITY,
        -5.0,
        f32::NEG_INFINITY,
        -3.0,
        -2.0,
        f32::NEG_INFINITY,
        f32::NEG_INFINITY,
    ];
    assert_eq!(run(4, &x, 8), vec![0, 0, 1, 0]);
}

#[test]
fn stage_two_loops_over_more_than_256_partials() {
    // Block = 256 elements, 100_000 / 256 = 391 partials per row.
    assert_cases_pass(
        &[
            Box::new(ArgmaxCase {
                items_per_thread: 1,
                ..ArgmaxCase::new(2, 100_000, true)
            }),
            Box::new(ArgmaxCase::new(1, 262_144, false)),
        ],
        0..2,
    );
}

#[test]
fn folded_grids_are_bound_checked() {
    // Stage 1: 9 rows x 7 blocks = 63 workgroups; stage 2: 9 rows; both fold above 8.
    crate::harness::assert_folded_case_passes(
        &ArgmaxCase {
            items_per_thread: 1,
            ..ArgmaxCase::new(9, 1700, true)
        },
        0..2,
    );
}

#[test]
fn random_cases_pass() {
    let mut rng = crate::harness::rng(11);
    for seed in 0..3 {
        assert_cases_pass(&random_cases(&mut rng), seed..seed + 1);
    }
}

#[test]
fn bad_inputs_are_refused() {
    let ctx = test_context();
    let x = Tensor::zeros(ctx, "x", &[2, 8], DType::F32).unwrap();
    let xi = Tensor::zeros(ctx, "x", &[2, 8], DType::I32).unwrap();
    let empty = Tensor::zeros(ctx, "e", &[2, 0], DType::F32).unwrap();
    let out = Tensor::zeros(ctx, "out", &[2], DType::U32).unwrap();
    let out_f = Tensor::zeros(ctx, "out", &[2], DType::F32).unwrap();
    let out3 = Tensor::zeros(ctx, "out", &[3], DType::U32).unwrap();
    for r in [
        argmax(ctx, &xi, &out),
        argmax(ctx, &x, &out_f),
        argmax(ctx, &x, &out3),
        argmax(ctx, &empty, &out),
    ] {
        assert!(matches!(r, Err(Error::Invalid { op: OP, .. })), "{r:?}");
    }
    assert!(argmax(ctx, &x, &out).is_ok());
}

// Tests of the CPU reference alone.
#[test]
fn order_key_is_a_total_order_with_nan_greatest_and_zeros_equal() {
    let ascending = [
        f32::NEG_INFINITY,
        f32::MIN,
        -1.0,
        -f32::MIN_POSITIVE,
        -1e-45, // negative subnormal
        0.0,
        1e-45,
        1.0,
        f32::MAX,
        f32::INFINITY,
        f32::NAN,
    ];
    for w in ascending.windows(2) {
        assert!(order_key(w[0]) < order_key(w[1]), "{} < {}", w[0], w[1]);
    }
    assert_eq!(order_key(-0.0), order_key(0.0));
    assert_eq!(order_key(-f32::NAN), order_key(f32::NAN));
    assert_eq!(order_key(f32::from_bits(0x7f80_0001)), u32::MAX);
    assert!(order_key(f32::NEG_INFINITY) > 0);
}

#[test]
fn argmax_ref_rules() {
    assert_eq!(argmax_ref(&[1.0, 3.0, 3.0, 2.0], 4), vec![1]);
    assert_eq!(argmax_ref(&[1.0, f32::NAN, 9.0, f32::NAN], 4), vec![1]);
    assert_eq!(argmax_ref(&[-0.0, 0.0], 2), vec![0]);
    assert_eq!(argmax_ref(&[0.0, -0.0, -1.0, f32::INFINITY], 2), vec![0, 1]);
}
