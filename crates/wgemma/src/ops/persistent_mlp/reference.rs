//! CPU reference of the persistent MLP: the norm prologue (`rmsnorm_ref` /
//! `rmsnorm_add_ref`), gate_up + GeGLU and the down projection (f64 sums of the exact
//! dequantised weights), each output with the tolerance its inputs' rounding allows.

use crate::harness::Check;
use crate::ops::geglu::gelu_tanh_ref;
use crate::ops::linear::{q4_linear_ref, tolerance, NormPrologueMode, Q4Host};
use crate::ops::rmsnorm::{rmsnorm_add_ref, rmsnorm_ref};

/// The inputs of one MLP step (one row of width `gate_up.k`).
pub struct MlpInputs<'a> {
    pub mode: NormPrologueMode,
    pub resid: &'a [f32],
    pub branch: &'a [f32],
    pub w_branch: &'a [f32],
    pub w_in: &'a [f32],
    pub eps: f32,
    pub out_scale: f32,
}

/// Reference outputs and their checks.
pub struct MlpReference {
    /// The updated residual (modes with an add; else the residual itself).
    pub resid_out: Vec<f32>,
    pub act: Vec<f32>,
    pub act_check: Check,
    pub out: Vec<f32>,
    pub out_check: Check,
}

fn max_abs(check: Check) -> f64 {
    match check {
        Check::Close { max_abs, .. } => f64::from(max_abs),
        _ => unreachable!("linear tolerances are Close checks"),
    }
}

/// `out = geglu(prologue(inputs) W_gu^T) W_down^T`. Tolerances: the linear one of each
/// projection, plus the GPU's x off by a few ulps (8 eps of each dot's magnitude), the
/// GeGLU's propagation (|gelu'| < 1.13) and tanh (4e-6 relative), and act's error carried
/// through W_down (its largest row sum of |w|).
pub fn persistent_mlp_ref(inputs: &MlpInputs, gate_up: &Q4Host, down: &Q4Host) -> MlpReference {
    let h = gate_up.k;
    let i = gate_up.n / 2;
    let MlpInputs {
        mode,
        resid,
        branch,
        w_branch,
        w_in,
        eps,
        out_scale,
    } = *inputs;
    let resid_out = match mode {
        NormPrologueMode::Norm => resid.to_vec(),
        _ => rmsnorm_add_ref(branch, h, Some(w_branch), resid, eps, 1.0, out_scale),
    };
    let x = match mode {
        NormPrologueMode::Add => resid_out.clone(),
        _ => rmsnorm_ref(&resid_out, h, Some(w_in), eps, 1.0, 1.0),
    };
    let (gu, bound) = q4_linear_ref(&x, 1, gate_up);
    let e = max_abs(tolerance(h, bound)) + 8.0 * f64::from(f32::EPSILON) * bound;
    let act: Vec<f32> = (0..i).map(|j| gelu_tanh_ref(gu[j]) * gu[i + j]).collect();
    let e_act = e * (2.13 * bound + e) + 4e-6 * bound * bound;
    let (out, bound_down) = q4_linear_ref(&act, 1, down);
    let mut row = vec![0.0f32; down.k];
    let row_abs = (0..down.n)
        .map(|n| {
            down.dequantize_row(n, &mut row);
            row.iter().map(|v| f64::from(v.abs())).sum::<f64>()
        })
        .fold(0.0f64, f64::max);
    let e_out = max_abs(tolerance(i, bound_down)) + e_act * row_abs;
    let close = |max_abs: f64| Check::Close {
        max_abs: max_abs as f32 + f32::MIN_POSITIVE,
        nmse: 1e-9,
    };
    MlpReference {
        resid_out,
        act,
        act_check: close(e_act),
        out,
        out_check: close(e_out),
    }
}
