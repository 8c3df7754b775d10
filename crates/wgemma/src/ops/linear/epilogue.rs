//! The epilogues of the Q4 matvecs: what they write besides the plain product.

use crate::gpu::Tensor;

/// What a Q4 matvec writes besides the plain product: GeGLU fused into the projection
/// that feeds it, saving a dispatch and a round trip of the pre-activation.
#[derive(Debug, Clone, Copy)]
pub enum Epilogue<'a> {
    /// `y = x W^T`.
    None,
    /// W stacks `[gate; up]` (2I rows, gate first) and `y[m, j] = gelu_tanh(gate_j) * up_j`,
    /// y `[M, I]` (the MLP's gate_up projection + GeGLU).
    GegluPairs,
    /// `y[m, n] = gelu_tanh((x W^T)[m, n]) * other[m * stride + offset + n]` (the per-layer
    /// input gate times this layer's slice of the per-layer inputs).
    GeluMul {
        other: &'a Tensor,
        stride: usize,
        offset: usize,
    },
}

impl Epilogue<'_> {
    pub(super) fn code(&self) -> u64 {
        match self {
            Epilogue::None => 0,
            Epilogue::GegluPairs => 1,
            Epilogue::GeluMul { .. } => 2,
        }
    }
}
