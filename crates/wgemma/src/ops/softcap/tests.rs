use super::*;
use crate::gpu::{read_tensor_f32, run_kernels, ContextOptions};
use crate::harness::{assert_cases_pass, check, test_context, OpCase};

#[test]
fn both_routes_match_reference() {
    let cases: Vec<Box<dyn OpCase>> = [(1, 1), (1, 257), (3, 1000)]
        .into_iter()
        .flat_map(|(m, v)| {
            [false, true].map(|p| Box::new(SoftcapCase::new(m, v, p)) as Box<dyn OpCase>)
        })
        .collect();
    assert_cases_pass(&cases, 0..2);
}

#[test]
fn known_values_and_saturation() {
    let ctx = test_context();
    let x = [0.0f32, 30.0, -15.0, 1e4, -1e30, 3.0];
    let t = Tensor::from_f32(ctx, "x", &[x.len()], &x).unwrap();
    run_kernels(ctx, &[softcap(ctx, &t, &t, 30.0).unwrap()]);
    let got = pollster::block_on(read_tensor_f32(ctx, &t)).unwrap();
    let want = [0.0f32, 22.847_825, -13.863_515, 30.0, -30.0, 2.990_04];
    for (g, w) in got.iter().zip(want) {
        assert!((g - w).abs() < 1e-4, "{got:?} vs {want:?}");
    }
}

#[test]
fn rejects_bad_inputs() {
    let ctx = test_context();
    let x = Tensor::zeros(ctx, "x", &[8], DType::F32).unwrap();
    let invalid = |r: Result<Kernel>, what: &str| match r {
        Err(Error::Invalid { what: w, .. }) => assert!(w.contains(what), "{w} !~ {what}"),
        other => panic!("expected Invalid({what}), got {other:?}"),
    };
    invalid(softcap(ctx, &x, &x, 0.0), "cap");
    invalid(softcap(ctx, &x, &x, f32::NAN), "cap");
    let short = Tensor::zeros(ctx, "s", &[7], DType::F32).unwrap();
    invalid(softcap(ctx, &x, &short, 30.0), "out");
    let xi = Tensor::zeros(ctx, "xi", &[8], DType::I32).unwrap();
    invalid(softcap(ctx, &xi, &x, 30.0), "dtype of x");
}

#[test]
fn folded_grid_covers_every_element() {
    let ctx = GpuContext::new_blocking(ContextOptions {
        max_workgroups_per_dimension: Some(4),
        ..Default::default()
    })
    .unwrap();
    for in_place in [false, true] {
        let case = SoftcapCase::new(1, 2400, in_place); // 10 workgroups -> 4 x 3
        let report = pollster::block_on(check(&ctx, &case, 1)).unwrap();
        assert!(report.pass(), "{report}");
    }
}
