use super::*;
use crate::gpu::{read_tensor_f32, run_kernels, ContextOptions};
use crate::harness::{assert_cases_pass, check, test_context, OpCase};

#[test]
fn both_layouts_match_reference() {
    let cases: Vec<Box<dyn OpCase>> = [(1, 1), (1, 255), (3, 257), (2, 1000)]
        .into_iter()
        .flat_map(|(m, i)| {
            [false, true].map(|f| Box::new(GegluCase::new(m, i, f)) as Box<dyn OpCase>)
        })
        .collect();
    assert_cases_pass(&cases, 0..2);
}

/// Saturated tails: gelu(50) = 50, gelu(-50) = -0, and no NaN from tanh overflow.
#[test]
fn large_gates_saturate_without_nan() {
    let mut case = GegluCase::new(2, 300, true);
    case.range = 200.0;
    assert_cases_pass(&[Box::new(case) as Box<dyn OpCase>], 0..1);
    let ctx = test_context();
    let g = [50.0f32, -50.0, 1e30, -1e30, 0.0];
    let tg = Tensor::from_f32(ctx, "g", &[5], &g).unwrap();
    let tu = Tensor::from_f32(ctx, "u", &[5], &[1.0; 5]).unwrap();
    let out = Tensor::zeros(ctx, "out", &[5], DType::F32).unwrap();
    run_kernels(ctx, &[geglu(ctx, &tg, &tu, &out).unwrap()]);
    let got = pollster::block_on(read_tensor_f32(ctx, &out)).unwrap();
    assert_eq!(&got[..2], &[50.0, 0.0]);
    assert!(got.iter().all(|v| !v.is_nan()), "{got:?}");
}

/// Values of torch.nn.functional.gelu(x, approximate="tanh"), on the GPU and the CPU
/// reference.
#[test]
fn gelu_tanh_matches_pytorch_values() {
    let table = [
        (1.0f32, 0.841_192f32),
        (-1.0, -0.158_808),
        (0.5, 0.345_714),
        (-3.0, -0.003_637_39),
        (2.5, 2.484_916),
    ];
    let ctx = test_context();
    let xs: Vec<f32> = table.iter().map(|t| t.0).collect();
    let tg = Tensor::from_f32(ctx, "g", &[xs.len()], &xs).unwrap();
    let tu = Tensor::from_f32(ctx, "u", &[xs.len()], &vec![1.0; xs.len()]).unwrap();
    let out = Tensor::zeros(ctx, "out", &[xs.len()], DType::F32).unwrap();
    run_kernels(ctx, &[geglu(ctx, &tg, &tu, &out).unwrap()]);
    let gpu = pollster::block_on(read_tensor_f32(ctx, &out)).unwrap();
    for ((x, want), got) in table.into_iter().zip(gpu) {
        let cpu = gelu_tanh_ref(x);
        assert!(
            (cpu - want).abs() < 2e-6,
            "cpu gelu_tanh({x}) = {cpu}, want {want}"
        );
        assert!(
            (got - want).abs() < 2e-6,
            "gpu gelu_tanh({x}) = {got}, want {want}"
        );
    }
}

#[test]
fn rejects_bad_inputs() {
    let ctx = test_context();
    let t = |s: &[usize], d| Tensor::zeros(ctx, "t", s, d).unwrap();
    let (g, u, o) = (
        t(&[2, 4], DType::F32),
        t(&[2, 4], DType::F32),
        t(&[2, 4], DType::F32),
    );
    let invalid = |r: Result<Kernel>, what: &str| match r {
        Err(Error::Invalid { what: w, .. }) => assert!(w.contains(what), "{w} !~ {what}"),
        other => panic!("expected Invalid({what}), got {other:?}"),
    };
    invalid(geglu(ctx, &g, &t(&[2, 3], DType::F32), &o), "up");
    invalid(geglu(ctx, &g, &u, &t(&[9], DType::F32)), "out");
    invalid(geglu(ctx, &t(&[8], DType::F16), &u, &o), "dtype of gate");
    invalid(geglu(ctx, &g, &u, &g), "buffer of out");
    invalid(
        geglu_fused(ctx, &t(&[2, 5], DType::F32), &o),
        "last dimension",
    );
    invalid(geglu_fused(ctx, &g, &t(&[2, 4], DType::F32)), "out");
}

#[test]
fn folded_grid_covers_every_element() {
    let ctx = GpuContext::new_blocking(ContextOptions {
        max_workgroups_per_dimension: Some(4),
        ..Default::default()
    })
    .unwrap();
    for fused in [false, true] {
        let case = GegluCase::new(3, 800, fused); // 10 workgroups -> 4 x 3
        let report = pollster::block_on(check(&ctx, &case, 1)).unwrap();
        assert!(report.pass(), "{report}");
    }
}

// The strided layout's guards.
#[test]
fn bad_layout_is_refused() {
    let ctx = crate::harness::test_context();
    let gate = Tensor::zeros(ctx, "gate", &[2, 4], DType::F32).unwrap();
    let up = Tensor::zeros(ctx, "up", &[2, 8], DType::F32).unwrap();
    let out = Tensor::zeros(ctx, "out", &[2, 4], DType::F32).unwrap();
    assert!(geglu_strided(ctx, &gate, &up, 8, 4, &out).is_ok());
    assert!(geglu_strided(ctx, &gate, &up, 8, 5, &out).is_err());
    assert!(geglu_strided(ctx, &gate, &up, 16, 0, &out).is_err());
}
