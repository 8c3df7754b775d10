use super::*;
use crate::gpu::{read_tensor_f32, run_kernels, ContextOptions};
use crate::harness::{assert_cases_pass, check, test_context, OpCase, Rng};
use rand::Rng as _;

fn next<'a>(weight: &'a Tensor, out: &'a Tensor) -> NextNorm<'a> {
    NextNorm { weight, out }
}

fn run_f32(ctx: &GpuContext, kernel: Kernel, out: &Tensor) -> Vec<f32> {
    run_kernels(ctx, &[kernel]);
    pollster::block_on(read_tensor_f32(ctx, out)).unwrap()
}

#[test]
fn routes_follow_aliasing() {
    let ctx = test_context();
    let t = |n| Tensor::zeros(ctx, "t", &[n], DType::F32).unwrap();
    let (x, r, o) = (t(4), t(4), t(4));
    assert_eq!(choose_route(&x, None, &o).unwrap(), RmsNormRoute::Norm);
    assert_eq!(
        choose_route(&x, None, &x).unwrap(),
        RmsNormRoute::NormInPlace
    );
    assert_eq!(choose_route(&x, Some(&r), &r).unwrap(), RmsNormRoute::Add);
    assert_eq!(
        choose_route(&x, Some(&r), &x).unwrap(),
        RmsNormRoute::AddInPlace
    );
    assert_eq!(choose_route(&x, Some(&r), &o).unwrap(), RmsNormRoute::AddTo);
    // x == residual but out separate: two read-only bindings of one buffer are fine.
    assert_eq!(choose_route(&x, Some(&x), &o).unwrap(), RmsNormRoute::AddTo);
    match choose_route(&x, Some(&x), &x) {
        Err(Error::NoRoute { op, failed, .. }) => {
            assert_eq!(op, "rmsnorm");
            assert_eq!(failed.len(), 4);
        }
        other => panic!("expected NoRoute, got {other:?}"),
    }
}

#[test]
fn every_route_matches_reference() {
    use CaseMode::*;
    let mut cases: Vec<Box<dyn OpCase>> = Vec::new();
    for mode in [Norm, NormInPlace, Add, AddInPlace, AddTo] {
        for weight in [true, false] {
            let mut case = RmsNormCase::new(3, 300, weight, mode);
            case.input_scale = 0.3;
            case.output_scale = 1.7;
            cases.push(Box::new(case));
        }
    }
    assert_cases_pass(&cases, 0..2);
}

#[test]
fn edge_shapes() {
    use CaseMode::*;
    let cases: Vec<Box<dyn OpCase>> = [(1, 1), (1, 64), (2, 255), (1, 256), (2, 257), (1, 5376)]
        .into_iter()
        .flat_map(|(rows, d)| {
            [
                Box::new(RmsNormCase::new(rows, d, true, Norm)) as Box<dyn OpCase>,
                Box::new(RmsNormCase::new(rows, d, false, Add)),
            ]
        })
        .collect();
    assert_cases_pass(&cases, 0..1);
}

/// Hand-computed HF values: plain w (not 1 + w), eps inside the root, and the layer scalar
/// multiplying the residual sum (not only the norm).
#[test]
fn hf_semantics_by_hand() {
    let ctx = test_context();
    let x = Tensor::from_f32(ctx, "x", &[1, 4], &[1.0, 2.0, 3.0, 4.0]).unwrap();
    let w = Tensor::from_f32(ctx, "w", &[4], &[0.5, 1.0, 2.0, -1.0]).unwrap();
    let out = Tensor::zeros(ctx, "out", &[1, 4], DType::F32).unwrap();
    let inv = 1.0 / (7.5f64 + 1e-6).sqrt();
    let want: Vec<f64> = [0.5, 2.0, 6.0, -4.0].iter().map(|v| v * inv).collect();
    let got = run_f32(ctx, rmsnorm(ctx, &x, Some(&w), &out, EPS).unwrap(), &out);
    for (g, w) in got.iter().zip(&want) {
        assert!((*g as f64 - w).abs() < 1e-6, "{got:?} vs {want:?}");
    }
    // Zero weight gives zeros (a 1 + w convention would give x / rms).
    let zw = Tensor::from_f32(ctx, "zw", &[4], &[0.0; 4]).unwrap();
    let got = run_f32(ctx, rmsnorm(ctx, &x, Some(&zw), &out, EPS).unwrap(), &out);
    assert_eq!(got, vec![0.0; 4]);
    // (residual + norm) * layer_scalar.
    let r = Tensor::from_f32(ctx, "r", &[1, 4], &[10.0, 20.0, 30.0, 40.0]).unwrap();
    let k = rmsnorm_add(ctx, &x, Some(&w), &r, &r, 0.5, EPS).unwrap();
    let got = run_f32(ctx, k, &r);
    for (i, g) in got.iter().enumerate() {
        let want = (10.0 * (i + 1) as f64 + want[i]) * 0.5;
        assert!((*g as f64 - want).abs() < 1e-5, "{got:?}");
    }
}

#[test]
fn rejects_bad_inputs() {
    let ctx = test_context();
    let x = Tensor::zeros(ctx, "x", &[2, 8], DType::F32).unwrap();
    let out = Tensor::zeros(ctx, "out", &[2, 8], DType::F32).unwrap();
    let w7 = Tensor::zeros(ctx, "w7", &[7], DType::F32).unwrap();
    let w8h = Tensor::zeros(ctx, "w8h", &[8], DType::F16).unwrap();
    let xi = Tensor::zeros(ctx, "xi", &[2, 8], DType::I32).unwrap();
    let short = Tensor::zeros(ctx, "short", &[2, 7], DType::F32).unwrap();
    let empty = Tensor::zeros(ctx, "empty", &[2, 0], DType::F32).unwrap();
    let invalid = |r: Result<Kernel>, what: &str| match r {
        Err(Error::Invalid { what: w, .. }) => assert!(w.contains(what), "{w} !~ {what}"),
        other => panic!("expected Invalid({what}), got {other:?}"),
    };
    invalid(rmsnorm(ctx, &x, Some(&w7), &out, EPS), "weight");
    invalid(rmsnorm(ctx, &x, Some(&w8h), &out, EPS), "dtype of weight");
    invalid(rmsnorm(ctx, &xi, None, &out, EPS), "dtype of x");
    invalid(rmsnorm(ctx, &x, None, &short, EPS), "out");
    invalid(rmsnorm(ctx, &empty, None, &empty, EPS), "last dimension");
    invalid(rmsnorm(ctx, &x, None, &out, f32::NAN), "eps");
    invalid(rmsnorm(ctx, &x, None, &out, -1.0), "eps");
    invalid(
        rmsnorm_add(ctx, &x, None, &short, &out, 1.0, EPS),
        "residual",
    );
    invalid(
        rmsnorm_add(ctx, &x, None, &out, &out, f32::INFINITY, EPS),
        "output_scale",
    );
    let x8 = Tensor::zeros(ctx, "x8", &[8], DType::F32).unwrap();
    let w8 = Tensor::zeros(ctx, "w8", &[8], DType::F32).unwrap();
    invalid(rmsnorm(ctx, &x8, Some(&w8), &w8, EPS), "weight buffer");
}

/// Rows beyond the per-dimension workgroup limit fold to a 2-D grid; the shader must
/// rebuild the row index (a context with a tiny limit makes this cheap).
#[test]
fn folded_grid_covers_every_row() {
    static CTX: std::sync::OnceLock<GpuContext> = std::sync::OnceLock::new();
    let ctx = CTX.get_or_init(|| {
        GpuContext::new_blocking(ContextOptions {
            max_workgroups_per_dimension: Some(4),
            ..Default::default()
        })
        .unwrap()
    });
    for mode in [CaseMode::Norm, CaseMode::AddTo] {
        let case = RmsNormCase::new(13, 20, true, mode); // 13 rows -> 4 x 4
        let report = pollster::block_on(check(ctx, &case, 3)).unwrap();
        assert!(report.pass(), "{report}");
    }
}

#[test]
fn add_norm_equals_add_then_norm_bit_for_bit() {
    use rand::SeedableRng;
    let ctx = test_context();
    let mut rng = Rng::seed_from_u64(11);
    for (rows, d, weighted, scalar) in [
        (1, 1536, true, 1.0),
        (3, 300, false, 0.7),
        (2, 5376, true, 1.3),
    ] {
        let vals = |rng: &mut Rng, n: usize| -> Vec<f32> {
            (0..n).map(|_| rng.random_range(-2.0f32..2.0)).collect()
        };
        let (xv, hv, w1v, w2v) = (
            vals(&mut rng, rows * d),
            vals(&mut rng, rows * d),
            vals(&mut rng, d),
            vals(&mut rng, d),
        );
        let x = Tensor::from_f32(ctx, "x", &[rows, d], &xv).unwrap();
        let w1 = Tensor::from_f32(ctx, "w1", &[d], &w1v).unwrap();
        let w2 = Tensor::from_f32(ctx, "w2", &[d], &w2v).unwrap();
        let w1 = weighted.then_some(&w1);
        // Fused.
        let h_fused = Tensor::from_f32(ctx, "h", &[rows, d], &hv).unwrap();
        let y_fused = Tensor::zeros(ctx, "y", &[rows, d], DType::F32).unwrap();
        let fused =
            rmsnorm_add_norm(ctx, &x, w1, &h_fused, scalar, next(&w2, &y_fused), EPS).unwrap();
        run_kernels(ctx, &[fused]);
        // Two dispatches.
        let h_two = Tensor::from_f32(ctx, "h", &[rows, d], &hv).unwrap();
        let y_two = Tensor::zeros(ctx, "y", &[rows, d], DType::F32).unwrap();
        let add = rmsnorm_add(ctx, &x, w1, &h_two, &h_two, scalar, EPS).unwrap();
        let norm = rmsnorm(ctx, &h_two, Some(&w2), &y_two, EPS).unwrap();
        run_kernels(ctx, &[add, norm]);
        let read = |t: &Tensor| pollster::block_on(read_tensor_f32(ctx, t)).unwrap();
        assert_eq!(read(&h_fused), read(&h_two), "{rows}x{d}: residual");
        assert_eq!(read(&y_fused), read(&y_two), "{rows}x{d}: next norm");
        // And both match the CPU reference.
        let h_ref = rmsnorm_add_ref(&xv, d, w1.map(|_| w1v.as_slice()), &hv, EPS, 1.0, scalar);
        let y_ref = rmsnorm_ref(&h_ref, d, Some(&w2v), EPS, 1.0, 1.0);
        let got = read(&y_fused);
        let err = got
            .iter()
            .zip(&y_ref)
            .fold(0.0f32, |m, (a, b)| m.max((a - b).abs()));
        assert!(err < 1e-4, "{rows}x{d}: max err {err} vs reference");
    }
    // out aliasing the residual is refused.
    let t = Tensor::zeros(ctx, "t", &[1, 8], DType::F32).unwrap();
    let x = Tensor::zeros(ctx, "x", &[1, 8], DType::F32).unwrap();
    let w = Tensor::zeros(ctx, "w", &[8], DType::F32).unwrap();
    let err = rmsnorm_add_norm(ctx, &x, None, &t, 1.0, next(&w, &t), EPS).unwrap_err();
    assert!(
        err.to_string().contains("distinct from x and residual"),
        "{err}"
    );
    // x aliasing the residual (read while it is written) is refused.
    let out = Tensor::zeros(ctx, "out", &[1, 8], DType::F32).unwrap();
    let err = rmsnorm_add_norm(ctx, &t, None, &t, 1.0, next(&w, &out), EPS).unwrap_err();
    assert!(err.to_string().contains("distinct from residual"), "{err}");
}
