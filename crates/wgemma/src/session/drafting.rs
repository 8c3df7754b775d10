//! A stream's own draft state ([`Drafting`]), its drafts' source included: what a
//! [`super::Stream`] carries for [`super::Session::step_rounds`] (`batch_spec.rs`). Its own
//! file, below `batch.rs` and `batch_spec.rs`, which both use it.

use super::OP;
use crate::error::{Error, Result};
use crate::generate::speculative::{check_session, DraftSchedule, DraftSource, SpeculativeOptions};
use crate::gpu::{DType, GpuContext, Step, Tensor};
use crate::model::assistant::Assistant;
use crate::model::forward::LogitRows;
use crate::model::state::KvState;

/// A stream's own draft state.
pub(super) struct Drafting {
    /// Drafts per round (the request's `draft_tokens`).
    pub(super) k: usize,
    /// The target's final-normed hidden state of the row that produced the seed, `[1,
    /// hidden]`.
    pub(super) hidden: Tensor,
    /// Last row written (R) and rows (M) of the stream's last target forward.
    pub(super) last_r: usize,
    pub(super) last_m: usize,
    pub(super) drafted: usize,
    pub(super) accepted: usize,
    /// The assistant's drafts, or (benchmarks) an oracle's.
    pub(super) source: DraftSource,
}

impl Drafting {
    /// The draft state of a stream just prefilled with `prompt_len` tokens (the prefill's
    /// last plan still holds its hidden states): checks that `k` fits the target's verify
    /// plans and sliding rings, and keeps the seed row's hidden state.
    pub(super) fn after_prefill(
        ctx: &GpuContext,
        target: &KvState,
        assistant: &Assistant,
        k: usize,
        prompt_len: usize,
    ) -> Result<Drafting> {
        let spec = SpeculativeOptions {
            draft_tokens: k,
            schedule: DraftSchedule::Fixed,
            ..SpeculativeOptions::default()
        };
        check_session(target, assistant, &spec)?;
        let m_last = (prompt_len - 1) % target.model().options.prefill_chunk + 1;
        let source = target
            .built_plan(m_last, LogitRows::Last)
            .and_then(|plan| plan.head.as_ref())
            .map(|head| head.hidden.clone())
            .ok_or_else(|| Error::invalid(OP, "hidden states of the prefill", "kept", "none"))?;
        let ht = *source.shape().last().unwrap_or(&0);
        let hidden = Tensor::zeros(ctx, "stream seed hidden", &[1, ht], DType::F32)?;
        let mut step = Step::new(ctx);
        copy_row(&mut step, &source, m_last - 1, &hidden);
        step.submit();
        Ok(Drafting {
            k,
            hidden,
            last_r: prompt_len - 1,
            last_m: prompt_len,
            drafted: 0,
            accepted: 0,
            source: DraftSource::Assistant,
        })
    }

    pub(super) fn set_source(&mut self, source: DraftSource) {
        self.source = source;
    }
}

/// Records the copy of row `row` of `from` (`[rows, hidden]` f32) into `to` (`[1, hidden]`).
pub(super) fn copy_row(step: &mut Step, from: &Tensor, row: usize, to: &Tensor) {
    let bytes = to.byte_size();
    step.encoder()
        .copy_buffer_to_buffer(from.buffer(), row as u64 * bytes, to.buffer(), 0, bytes);
}
