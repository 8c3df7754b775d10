//! The RMSNorm prologue of the Q4 matvecs against the norm kernel followed by the plain
//! matvec, and the prologues it refuses.

use super::*;

/// The norm-prologue matvec (each mode, M = 1 and 3, subgroup and portable reductions, f32
/// and int8 activations) equals the separate RMSNorm kernel followed by the plain matvec,
/// and its workgroup 0 writes the updated residual the add kernel would: bit for bit with
/// the portable reduction (its norms keep the RMSNorm kernels' tree), to rounding with the
/// subgroup one (its norms add subgroup totals: workgroup_sum_sg.wgsli). With int8
/// activations x of either way may round to the other side of a quantisation step.
#[test]
fn norm_prologue_equals_norm_kernel_then_matvec() {
    norm_prologue_against_kernels(Activations::F32, 1e-5);
    norm_prologue_against_kernels(Activations::Int8, 5e-3);
}

fn norm_prologue_against_kernels(activations: Activations, y_tolerance: f32) {
    use crate::gpu::{read_tensor_f32, run_kernels};
    use crate::ops::rmsnorm::{rmsnorm, rmsnorm_add, rmsnorm_add_norm, NextNorm};
    let ctx = test_context();
    let read = |t: &Tensor| -> Vec<f32> { pollster::block_on(read_tensor_f32(ctx, t)).unwrap() };
    let (n, eps, scale) = (96, 1e-6f32, 0.75f32);
    let vector = |seed: usize, len: usize| -> Vec<f32> {
        (0..len)
            .map(|i| (((i * 7 + seed * 13) % 29) as f32 - 14.0) * 0.05)
            .collect()
    };
    // K = 256 fits M = 3 and 5 in lavapipe's 32 KiB of workgroup memory; 1536 is E2B's
    // hidden. M = 5 runs the wide family's norm kernels, the others the decode family's.
    for (k, m) in [(256, 1), (256, 3), (256, 5), (1536, 1), (1536, 3)] {
        let (_, w) = q4_weight(n, k, 32, None);
        for portable in [false, true] {
            for mode in [
                NormPrologueMode::Norm,
                NormPrologueMode::AddNorm,
                NormPrologueMode::Add,
            ] {
                let t = |label: &str, data: Vec<f32>, shape: &[usize]| {
                    Tensor::from_f32(ctx, label, shape, &data).unwrap()
                };
                let resid = t("resid", vector(1, m * k), &[m, k]);
                let branch = t("branch", vector(2, m * k), &[m, k]);
                let w_branch = t("w_branch", vector(3, k), &[k]);
                let w_in = t("w_in", vector(4, k), &[k]);
                let resid_out = Tensor::zeros(ctx, "resid_out", &[m, k], DType::F32).unwrap();
                let y = Tensor::zeros(ctx, "y", &[m, n], DType::F32).unwrap();
                let adds = mode != NormPrologueMode::Norm;
                let prologue = NormPrologue {
                    mode,
                    resid: &resid,
                    branch: adds.then_some((&branch, &w_branch)),
                    w_in: (mode != NormPrologueMode::Add).then_some(&w_in),
                    eps,
                    out_scale: if adds { scale } else { 1.0 },
                    resid_out: adds.then_some(&resid_out),
                };
                let options = LinearOptions {
                    portable,
                    activations: Some(activations),
                    ..LinearOptions::default()
                };
                if !q4_norm_prologue_available(ctx, m, &w, Epilogue::None) {
                    continue;
                }
                let fused =
                    q4_linear_norm_with(ctx, &prologue, &w, &y, Epilogue::None, &options).unwrap();
                run_kernels(ctx, fused.kernels());
                let (y_fused, r_fused) = (read(&y), read(&resid_out));
                let subgroup_sums = fused.reduction() == Reduction::Subgroup;
                // The unfused way: the norm kernel (in place on a copy of the residual) and
                // the plain matvec on its output.
                let h = t("h", vector(1, m * k), &[m, k]);
                let x = Tensor::zeros(ctx, "x", &[m, k], DType::F32).unwrap();
                let norm = match mode {
                    NormPrologueMode::Norm => rmsnorm(ctx, &h, Some(&w_in), &x, eps),
                    NormPrologueMode::AddNorm => rmsnorm_add_norm(
                        ctx,
                        &branch,
                        Some(&w_branch),
                        &h,
                        scale,
                        NextNorm {
                            weight: &w_in,
                            out: &x,
                        },
                        eps,
                    ),
                    NormPrologueMode::Add => {
                        rmsnorm_add(ctx, &branch, Some(&w_branch), &h, &h, scale, eps)
                    }
                }
                .unwrap();
                let input = if mode == NormPrologueMode::Add {
                    &h
                } else {
                    &x
                };
                let plain = q4_linear_with(ctx, input, &w, &y, &options).unwrap();
                run_kernels(ctx, &[norm]);
                run_kernels(ctx, plain.kernels());
                let (y_plain, h_plain) = (read(&y), read(&h));
                let what = format!("{mode:?} M={m} portable={portable} {activations:?}");
                let int8 = activations == Activations::Int8;
                assert_eq!(fused.route() == LinearRoute::Q4Q8Matvec, int8, "{what}");
                assert_eq!(plain.route() == LinearRoute::Q4Q8Matvec, int8, "{what}");
                let diff = y_fused
                    .iter()
                    .zip(&y_plain)
                    .fold(0.0f32, |d, (a, b)| d.max((a - b).abs()));
                let scale_y = y_plain.iter().fold(1.0f32, |s, v| s.max(v.abs()));
                assert!(diff <= y_tolerance * scale_y, "{what}: y max |diff| {diff}");
                if adds {
                    if subgroup_sums {
                        let scale_r = h_plain.iter().fold(1.0f32, |s, v| s.max(v.abs()));
                        let dr = r_fused
                            .iter()
                            .zip(&h_plain)
                            .fold(0.0f32, |d, (a, b)| d.max((a - b).abs()));
                        assert!(dr <= 1e-6 * scale_r, "{what}: updated residual, {dr}");
                    } else {
                        assert_eq!(r_fused, h_plain, "{what}: updated residual");
                    }
                }
            }
        }
    }
}

/// Bad prologues are refused naming what is wrong: missing inputs for the mode, a residual
/// output that aliases the residual, wrong shapes.
#[test]
fn norm_prologue_bad_inputs_are_refused() {
    let ctx = test_context();
    let (k, n) = (64, 32);
    let (_, w) = q4_weight(n, k, 32, None);
    let z = |label: &str, shape: &[usize]| Tensor::zeros(ctx, label, shape, DType::F32).unwrap();
    let (resid, branch, wv, y) = (
        z("r", &[1, k]),
        z("b", &[1, k]),
        z("w", &[k]),
        z("y", &[1, n]),
    );
    let base = NormPrologue {
        mode: NormPrologueMode::AddNorm,
        resid: &resid,
        branch: Some((&branch, &wv)),
        w_in: Some(&wv),
        eps: 1e-6,
        out_scale: 1.0,
        resid_out: None,
    };
    let err = |p: NormPrologue| {
        q4_linear_norm(ctx, &p, &w, &y, Epilogue::None)
            .unwrap_err()
            .to_string()
    };
    let e = err(NormPrologue {
        branch: None,
        ..base
    });
    assert!(
        e.contains("branch true") && e.contains("branch false"),
        "{e}"
    );
    let e = err(NormPrologue {
        resid_out: Some(&resid),
        ..base
    });
    assert!(e.contains("distinct from resid"), "{e}");
    let short = z("short", &[k / 2]);
    let e = err(NormPrologue {
        w_in: Some(&short),
        ..base
    });
    assert!(e.contains("w_in") && e.contains(&format!("[{k}]")), "{e}");
    assert!(q4_linear_norm(ctx, &base, &w, &y, Epilogue::None).is_ok());
}
