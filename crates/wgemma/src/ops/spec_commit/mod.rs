//! The end of a greedy speculative round on the GPU (`spec_commit`).
//!
//! Speculative rounds are pipelined like plain decoding: round r + 1 is recorded and
//! submitted before the host reads round r. What round r + 1 needs from round r (the
//! accepted count n, the bonus token, the new committed length) is therefore computed on the
//! GPU, after the verify forward, by `spec_commit`, into a small state buffer
//! ([`STATE_LEN`] u32) that the next round reads through buffer copies (the seed token into
//! the verify's token ids and the assistant's token, the staged positions into the verify's
//! positions), plus the assistant's view buffers and its seed hidden state, written
//! directly. The state ends with the round's record (n, k, p, the verify's argmax rows and
//! the drafts), which the host reads one round late only to stream the tokens and keep its
//! own bookkeeping.
//!
//! State layout (u32 indices): [`STATE_SEED`] the next round's seed token,
//! [`STATE_POSITION`] its position P, [`STATE_POSITIONS`]`..+MAX_ROUND_ROWS` P, P + 1, ...
//! (the next verify's row positions), [`STATE_RECORD`]`..` `[n, k, p, next[0..=k] (9 slots),
//! d1..dk (8 slots)]`.

mod reference;

pub use reference::{accepted_ref, spec_commit_ref, CommitOutputs};

#[cfg(any(test, feature = "harness"))]
mod cases;
#[cfg(any(test, feature = "harness"))]
pub use cases::{random_cases, CommitCase};

use crate::error::{Error, Result};
use crate::gpu::{workgroups_for, DType, GpuContext, Kernel, KernelBuilder, Tensor};

const OP: &str = "spec_commit";
const WORKGROUP: u32 = 256;

/// Rows of the largest verify forward the kernels handle (k <= 8 drafts + the seed).
pub const MAX_ROUND_ROWS: usize = 9;
pub const STATE_SEED: usize = 0;
pub const STATE_POSITION: usize = 1;
pub const STATE_POSITIONS: usize = 2;
pub const STATE_RECORD: usize = STATE_POSITIONS + MAX_ROUND_ROWS;
/// Where the record's argmax rows and drafts start.
pub const RECORD_TOKENS: usize = STATE_RECORD + 3;
pub const RECORD_DRAFTS: usize = RECORD_TOKENS + MAX_ROUND_ROWS;
pub const STATE_LEN: usize = RECORD_DRAFTS + MAX_ROUND_ROWS - 1;

/// The constants of a round's commit kernel (fixed per verify plan).
#[derive(Debug, Clone, Copy, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C)]
pub struct CommitParams {
    /// k: drafts of the round (the verify has k + 1 rows).
    pub drafts: u32,
    /// H: the target's hidden size.
    pub hidden: u32,
    /// Where row n of the verify's hidden states goes in `seed_hidden`.
    pub hidden_offset: u32,
    /// W_target - 1 + (k + 1), saturated at u32::MAX (the first row the target's sliding
    /// layer returned to HF's assistant is R + 1 - this).
    pub window_rows: u32,
    /// The target sequence's KV slot (written after each view position).
    pub slot: u32,
    pub _pad: [u32; 3],
}

impl CommitParams {
    /// The parameters of a round of `drafts` drafts (`w_target`: usize::MAX without sliding
    /// layers).
    pub fn new(
        drafts: usize,
        hidden: usize,
        hidden_offset: usize,
        w_target: usize,
        slot: usize,
    ) -> Self {
        let window_rows = w_target.saturating_sub(1).saturating_add(drafts + 1);
        CommitParams {
            drafts: drafts as u32,
            hidden: hidden as u32,
            hidden_offset: hidden_offset as u32,
            window_rows: u32::try_from(window_rows).unwrap_or(u32::MAX),
            slot: slot as u32,
            _pad: [0; 3],
        }
    }
}

/// What the commit kernel reads and writes.
pub struct CommitBuffers<'a> {
    /// The verify's argmax per row, u32 `[>= k + 1]`.
    pub next: &'a Tensor,
    /// The verify's token ids (seed, drafts), u32 `[>= k + 1]`.
    pub ids: &'a Tensor,
    /// The verify's final-normed hidden states, f32 `[>= k + 1, H]`.
    pub hidden: &'a Tensor,
    /// The round state, u32 `[STATE_LEN]`.
    pub state: &'a Tensor,
    /// Where row n of `hidden` goes (at `hidden_offset`), f32.
    pub seed_hidden: &'a Tensor,
    /// The assistant's view: RoPE position, full and sliding ends, u32 `[2]` each.
    pub rope_position: &'a Tensor,
    pub full_end: &'a Tensor,
    pub sliding_end: &'a Tensor,
}

fn check(t: &Tensor, what: &str, dtype: DType, at_least: usize) -> Result<()> {
    if t.dtype() != dtype || t.numel() < at_least {
        return Err(Error::invalid(
            OP,
            what.to_string(),
            format!("{dtype:?} with >= {at_least} elements"),
            format!("{:?} {:?}", t.dtype(), t.shape()),
        ));
    }
    Ok(())
}

/// Plans the commit of a round (see the module docs).
pub fn spec_commit(
    ctx: &GpuContext,
    b: &CommitBuffers<'_>,
    params: CommitParams,
) -> Result<Kernel> {
    let (k, h) = (params.drafts as usize, params.hidden as usize);
    if k + 1 > MAX_ROUND_ROWS || h == 0 {
        return Err(Error::invalid(
            OP,
            "drafts and hidden size",
            format!("drafts <= {} and hidden >= 1", MAX_ROUND_ROWS - 1),
            format!("{k} and {h}"),
        ));
    }
    check(b.next, "verify argmax rows", DType::U32, k + 1)?;
    check(b.ids, "verify token ids", DType::U32, k + 1)?;
    check(b.hidden, "verify hidden states", DType::F32, (k + 1) * h)?;
    check(b.state, "round state", DType::U32, STATE_LEN)?;
    check(
        b.seed_hidden,
        "seed hidden",
        DType::F32,
        params.hidden_offset as usize + h,
    )?;
    for (t, what) in [
        (b.rope_position, "rope position"),
        (b.full_end, "full view end"),
        (b.sliding_end, "sliding view end"),
    ] {
        check(t, what, DType::U32, 2)?;
    }
    KernelBuilder::new(ctx, OP)
        .uniform(&params)
        .tensor(b.next)
        .tensor(b.ids)
        .tensor(b.hidden)
        .tensor(b.state)
        .tensor(b.seed_hidden)
        .tensor(b.rope_position)
        .tensor(b.full_end)
        .tensor(b.sliding_end)
        .build_1d(workgroups_for(h as u64, WORKGROUP))
}

#[cfg(test)]
mod tests;
