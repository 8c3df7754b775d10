//! CPU reference of the persistent decode tail: the four steps it runs, composed from the
//! linear, RMSNorm and GeGLU references (one activation row).

use crate::ops::geglu::{geglu_fused_ref, gelu_tanh_ref};
use crate::ops::linear::{q4_linear_ref, Q4Host};
use crate::ops::rmsnorm::{rmsnorm_add_ref, rmsnorm_ref};

/// The tail's inputs on the host (see `q4_tail_entry.wgsli` for the math).
pub struct TailHost<'a> {
    pub h: &'a [f32],
    pub attn_out: &'a [f32],
    pub w_post_attention: &'a [f32],
    pub w_pre_feedforward: &'a [f32],
    pub gate_up: &'a Q4Host,
    pub down: &'a Q4Host,
    pub w_post_feedforward: &'a [f32],
    /// Scale of the MLP's residual add (1 on layers with a per-layer input block).
    pub mlp_scale: f32,
    pub ple_gate: &'a Q4Host,
    pub ple_projection: &'a Q4Host,
    /// This layer's slice of the per-layer inputs starts here.
    pub ple_inputs: &'a [f32],
    pub ple_offset: usize,
    pub eps: f32,
}

/// What the tail writes: the residual after the attention block's add (h'), GeGLU of
/// gate_up, the residual after the MLP's add (h''), the gated per-layer input and the
/// per-layer projection.
pub struct TailOutputs {
    pub h_mid: Vec<f32>,
    pub act: Vec<f32>,
    pub h_out: Vec<f32>,
    pub gated: Vec<f32>,
    pub out: Vec<f32>,
}

pub fn persistent_tail_ref(t: &TailHost) -> TailOutputs {
    let d = t.h.len();
    let inter = t.down.k;
    let h_mid = rmsnorm_add_ref(
        t.attn_out,
        d,
        Some(t.w_post_attention),
        t.h,
        t.eps,
        1.0,
        1.0,
    );
    let x = rmsnorm_ref(&h_mid, d, Some(t.w_pre_feedforward), t.eps, 1.0, 1.0);
    let (gate_up, _) = q4_linear_ref(&x, 1, t.gate_up);
    let act = geglu_fused_ref(&gate_up, inter);
    let (mlp, _) = q4_linear_ref(&act, 1, t.down);
    let h_out = rmsnorm_add_ref(
        &mlp,
        d,
        Some(t.w_post_feedforward),
        &h_mid,
        t.eps,
        1.0,
        t.mlp_scale,
    );
    let (gate, _) = q4_linear_ref(&h_out, 1, t.ple_gate);
    let gated: Vec<f32> = gate
        .iter()
        .enumerate()
        .map(|(j, &g)| gelu_tanh_ref(g) * t.ple_inputs[t.ple_offset + j])
        .collect();
    let (out, _) = q4_linear_ref(&gated, 1, t.ple_projection);
    TailOutputs {
        h_mid,
        act,
        h_out,
        gated,
        out,
    }
}
