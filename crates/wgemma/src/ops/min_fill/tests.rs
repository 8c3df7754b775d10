use super::*;
use crate::gpu::{read_tensor_f32, run_kernels, ContextOptions};
use crate::harness::{assert_cases_pass, check, test_context, OpCase};

#[test]
fn matches_reference_over_sizes_and_specials() {
    let cases: Vec<Box<dyn OpCase>> = [(1, 1), (4096, 262_144), (257, 4097), (3, 65_537)]
        .into_iter()
        .flat_map(|(n_src, n_dst)| {
            [None, Some(f32::NAN), Some(f32::NEG_INFINITY)].map(|special| {
                Box::new(MinFillCase {
                    n_src,
                    n_dst,
                    special,
                }) as Box<dyn OpCase>
            })
        })
        .collect();
    assert_cases_pass(&cases, 0..2);
}

#[test]
fn known_values() {
    let ctx = test_context();
    let src = Tensor::from_f32(ctx, "s", &[4], &[3.5, -2.25, 7.0, -0.0]).unwrap();
    let dst = Tensor::zeros(ctx, "d", &[5000], DType::F32).unwrap();
    run_kernels(ctx, &[min_fill(ctx, &src, &dst).unwrap()]);
    let got = pollster::block_on(read_tensor_f32(ctx, &dst)).unwrap();
    assert!(got.iter().all(|&v| v == -3.25), "{:?}", &got[..4]);
}

#[test]
fn rejects_bad_inputs() {
    let ctx = test_context();
    let x = Tensor::zeros(ctx, "x", &[8], DType::F32).unwrap();
    let y = Tensor::zeros(ctx, "y", &[8], DType::F32).unwrap();
    let invalid = |r: Result<Kernel>, what: &str| match r {
        Err(Error::Invalid { what: w, .. }) => assert!(w.contains(what), "{w} !~ {what}"),
        other => panic!("expected Invalid({what}), got {other:?}"),
    };
    invalid(min_fill(ctx, &x, &x), "dst");
    let xi = Tensor::zeros(ctx, "xi", &[8], DType::U32).unwrap();
    invalid(min_fill(ctx, &xi, &y), "dtype of src");
    invalid(min_fill(ctx, &x, &xi), "dtype of dst");
    let empty = Tensor::zeros(ctx, "e", &[0], DType::F32).unwrap();
    invalid(min_fill(ctx, &empty, &y), "element counts");
}

#[test]
fn folded_grid_covers_every_element() {
    let ctx = GpuContext::new_blocking(ContextOptions {
        max_workgroups_per_dimension: Some(4),
        ..Default::default()
    })
    .unwrap();
    // 40000 / 4096 -> 10 workgroups -> a 4 x 3 grid.
    let case = MinFillCase {
        n_src: 100,
        n_dst: 40_000,
        special: None,
    };
    let report = pollster::block_on(check(&ctx, &case, 1)).unwrap();
    assert!(report.pass(), "{report}");
}
