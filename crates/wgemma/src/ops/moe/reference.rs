//! CPU references of the MoE ops, following HF `Gemma4TextRouter` (from the softmax on) and
//! `Gemma4TextExperts` (see the module docs for the documented differences).

use super::weight::ExpertHost;
use crate::ops::argmax::order_key;
use crate::ops::geglu::gelu_tanh_ref;

/// The router after its projection, per row of `scores` `[M, E]`: f32 softmax, the `top_k`
/// experts by score (order: [`order_key`] descending, ties lower index first), the chosen
/// probabilities renormalised to sum 1 (summed in rank order) and multiplied by
/// `per_expert_scale[e]`. Returns `(ids [M, top_k], weights [M, top_k])`; f32 arithmetic
/// in the kernel's order.
pub fn moe_route_ref(
    scores: &[f32],
    experts: usize,
    top_k: usize,
    per_expert_scale: &[f32],
) -> (Vec<u32>, Vec<f32>) {
    let (mut ids, mut weights) = (Vec::new(), Vec::new());
    for row in scores.chunks(experts) {
        let mut order: Vec<u32> = (0..experts as u32).collect();
        // Stable: equal keys keep the lower index first.
        order.sort_by_key(|&e| std::cmp::Reverse(order_key(row[e as usize])));
        let chosen = &order[..top_k];
        // The top score is the maximum (NaN when the row has one: then all weights are NaN
        // here, while the kernel's are unspecified).
        let mx = row[order[0] as usize];
        let total: f32 = row.iter().map(|&s| (s - mx).exp()).sum();
        let p = |e: u32| (row[e as usize] - mx).exp() / total;
        let psum: f32 = chosen.iter().map(|&e| p(e)).sum();
        for &e in chosen {
            ids.push(e);
            weights.push(p(e) / psum * per_expert_scale[e as usize]);
        }
    }
    (ids, weights)
}

/// What [`moe_expert_linear_ref`] returns: `y [slots, outputs]` and, per output, a bound on
/// the f32 error a correct kernel can make (summation in any order).
pub struct ExpertLinearRef {
    pub y: Vec<f32>,
    pub error_bound: Vec<f64>,
}

/// `sum_k x[k] w[k]` in f64 and `sum_k |x[k] w[k]|`.
fn dot(x: &[f32], w: &[f32]) -> (f64, f64) {
    x.iter().zip(w).fold((0.0, 0.0), |(s, a), (&xv, &wv)| {
        let p = xv as f64 * wv as f64;
        (s + p, a + p.abs())
    })
}

/// Worst-case f32 rounding of a `k`-term sum of products of magnitude `mag` (as
/// `ops::linear::tolerance`).
fn dot_error(k: usize, mag: f64) -> f64 {
    (k as f64 + 9.0) * f64::from(f32::EPSILON) / 2.0 * mag
}

/// The gathered-expert linear: for slot `s` (expert `ids[s]`), `x` row `s / x_div` (`x_div`
/// = top_k for a `[M, K]` x, 1 for `[M * top_k, K]`): `y[s] = W[e] x` or, with `geglu`,
/// `gelu_tanh(W[e, :I] x) * (W[e, I:] x)`. Ids `>= E` give zero rows.
pub fn moe_expert_linear_ref(
    x: &[f32],
    x_div: usize,
    ids: &[u32],
    w: &ExpertHost,
    geglu: bool,
) -> ExpertLinearRef {
    let (n, k) = (w.n, w.k);
    let outputs = if geglu { n / 2 } else { n };
    let mut y = vec![0.0f32; ids.len() * outputs];
    let mut error_bound = vec![0.0f64; ids.len() * outputs];
    let (mut row_a, mut row_b) = (vec![0.0f32; k], vec![0.0f32; k]);
    for (s, &e) in ids.iter().enumerate() {
        let e = e as usize;
        if e >= w.experts {
            continue;
        }
        let xr = &x[(s / x_div) * k..(s / x_div + 1) * k];
        for o in 0..outputs {
            w.expert_row(e, o, &mut row_a);
            let (g, gm) = dot(xr, &row_a);
            let i = s * outputs + o;
            if geglu {
                w.expert_row(e, outputs + o, &mut row_b);
                let (u, um) = dot(xr, &row_b);
                let act = gelu_tanh_ref(g as f32) as f64;
                y[i] = (act * u) as f32;
                // gelu' <= 1.13; plus a few ulp for tanh and the products.
                error_bound[i] = 1.2 * dot_error(k, gm) * u.abs()
                    + act.abs() * dot_error(k, um)
                    + 8.0 * f64::from(f32::EPSILON) * (act * u).abs();
            } else {
                y[i] = g as f32;
                error_bound[i] = dot_error(k, gm);
            }
        }
    }
    ExpertLinearRef { y, error_bound }
}

/// `out[m, h] = sum_j weights[m, j] * y[m * top_k + j, h]`, in slot order, f32.
pub fn moe_combine_ref(y: &[f32], weights: &[f32], top_k: usize, h: usize) -> Vec<f32> {
    let m = weights.len() / top_k;
    let mut out = vec![0.0f32; m * h];
    for (mi, row) in out.chunks_mut(h).enumerate() {
        for j in 0..top_k {
            let s = mi * top_k + j;
            let ys = &y[s * h..(s + 1) * h];
            row.iter_mut()
                .zip(ys)
                .for_each(|(o, &v)| *o += weights[s] * v);
        }
    }
    out
}

/// The whole expert block in f64 from the exact weights, for given routing: per token m,
/// `sum_j weights[m, j] * W_d[e] (gelu_tanh(W_gu[e, :I] x) * W_gu[e, I:] x)`, x = `x2[m]`.
/// Returns `(out [M, H], magnitude)`, the magnitude being the largest
/// `sum_j |weights[m, j]| * sum_i |W_d[e][h, i] a_i|`.
pub fn moe_experts_ref(
    x2: &[f32],
    ids: &[u32],
    weights: &[f32],
    top_k: usize,
    gate_up: &ExpertHost,
    down: &ExpertHost,
) -> (Vec<f32>, f64) {
    let (hidden, inter) = (gate_up.k, down.k);
    let m = ids.len() / top_k;
    let mut out = vec![0.0f32; m * hidden];
    let mut magnitude = 0.0f64;
    let (mut ga, mut ub, mut dr) = (
        vec![0.0f32; hidden],
        vec![0.0f32; hidden],
        vec![0.0f32; inter],
    );
    for mi in 0..m {
        let xr = &x2[mi * hidden..(mi + 1) * hidden];
        let mut acc = vec![0.0f64; hidden];
        let mut mag = vec![0.0f64; hidden];
        for j in 0..top_k {
            let s = mi * top_k + j;
            let e = ids[s] as usize;
            let a: Vec<f64> = (0..inter)
                .map(|i| {
                    gate_up.expert_row(e, i, &mut ga);
                    gate_up.expert_row(e, inter + i, &mut ub);
                    let g = dot(xr, &ga).0;
                    let u = dot(xr, &ub).0;
                    gelu_tanh_ref(g as f32) as f64 * u
                })
                .collect();
            for (h, (acc_h, mag_h)) in acc.iter_mut().zip(&mut mag).enumerate() {
                down.expert_row(e, h, &mut dr);
                let (v, vm) = dr.iter().zip(&a).fold((0.0, 0.0), |(v, vm), (&wv, &av)| {
                    (v + wv as f64 * av, vm + (wv as f64 * av).abs())
                });
                *acc_h += weights[s] as f64 * v;
                *mag_h += (weights[s] as f64).abs() * vm;
            }
        }
        for h in 0..hidden {
            out[mi * hidden + h] = acc[h] as f32;
            magnitude = magnitude.max(mag[h]);
        }
    }
    (out, magnitude)
}
