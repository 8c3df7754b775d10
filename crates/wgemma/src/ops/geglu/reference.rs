//! CPU reference for GeGLU with PyTorch's tanh-approximated GELU (`gelu_pytorch_tanh`).

/// `0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))` in f32, in PyTorch's order.
pub fn gelu_tanh_ref(x: f32) -> f32 {
    let k_beta = (std::f64::consts::SQRT_2 * std::f64::consts::FRAC_2_SQRT_PI * 0.5) as f32;
    let k_kappa = 0.044715f32;
    let inner = k_beta * (x + k_kappa * (x * x * x));
    0.5 * x * (1.0 + inner.tanh())
}

/// `gelu_tanh(gate) * up`, elementwise over two `[M, I]` tensors.
pub fn geglu_ref(gate: &[f32], up: &[f32]) -> Vec<f32> {
    gate.iter()
        .zip(up)
        .map(|(&g, &u)| gelu_tanh_ref(g) * u)
        .collect()
}

/// The same over one `[M, 2I]` tensor whose rows are `[gate(I) | up(I)]`.
pub fn geglu_fused_ref(gate_up: &[f32], inter: usize) -> Vec<f32> {
    gate_up
        .chunks(2 * inter)
        .flat_map(|row| geglu_ref(&row[..inter], &row[inter..]))
        .collect()
}

/// CPU reference of [`super::geglu_strided`].
pub fn geglu_strided_ref(
    gate: &[f32],
    up: &[f32],
    inter: usize,
    up_stride: usize,
    up_offset: usize,
) -> Vec<f32> {
    gate.iter()
        .enumerate()
        .map(|(i, &g)| {
            let (m, j) = (i / inter, i % inter);
            gelu_tanh_ref(g) * up[m * up_stride + up_offset + j]
        })
        .collect()
}
