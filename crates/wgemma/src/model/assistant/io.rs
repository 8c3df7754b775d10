//! The buffers a draft step reads and writes besides its layers' activations: its token,
//! its input row, its outputs, and the round's view of the target's K/V.

use crate::error::Result;
use crate::gpu::{DType, GpuContext, Tensor};

/// The one-row buffers a draft step reads and writes besides its layers' activations,
/// allocated once.
pub(super) struct DraftIo {
    /// The token the step embeds, u32 [1]; the step's argmax overwrites it with the draft.
    pub token: Tensor,
    /// concat(target_embed(token) * scale, h_prev) [1, 2 Ht].
    pub input: Tensor,
    /// Final norm output [1, Ha].
    pub hn: Tensor,
    /// post_projection output [1, Ht]: the next step's h_prev.
    pub h_out: Tensor,
    /// Draft logits [1, vocab].
    pub logits: Tensor,
    /// `[value, the target sequence's KV slot]` u32 each: the RoPE position P, and the
    /// ends of the full / sliding views (the attention reads the slot when the target's
    /// caches hold several sequences).
    pub rope_position: Tensor,
    pub full_end: Tensor,
    pub sliding_end: Tensor,
}

impl DraftIo {
    pub(super) fn new(ctx: &GpuContext, ha: usize, ht: usize, vocab: usize) -> Result<DraftIo> {
        let f32s = |label: &str, shape: &[usize]| Tensor::zeros(ctx, label, shape, DType::F32);
        let positions = |label: &str| Tensor::zeros(ctx, label, &[2], DType::U32);
        Ok(DraftIo {
            token: Tensor::zeros(ctx, "assistant.token", &[1], DType::U32)?,
            input: f32s("assistant.input", &[1, 2 * ht])?,
            hn: f32s("assistant.hn", &[1, ha])?,
            h_out: f32s("assistant.h_out", &[1, ht])?,
            logits: f32s("assistant.logits", &[1, vocab])?,
            rope_position: positions("assistant.rope_position")?,
            full_end: positions("assistant.full_position")?,
            sliding_end: positions("assistant.sliding_position")?,
        })
    }
}
