//! The output head (HF's tied `lm_head` over the final norm's output, then
//! `final_logit_softcapping`): logits of every row or only the last, and the greedy token
//! of each logits row, which stays on the GPU.

use crate::error::Result;
use crate::gpu::{DType, GpuContext, Readback, Tensor};
use crate::model::config::ModelSpec;
use crate::model::plan_parts::{zeros, Head, LogitRows, Op};
use crate::model::weights::Weights;
use crate::ops::argmax::argmax;
use crate::ops::gather::{gather_rows, RowTable};
use crate::ops::softcap::softcap;

/// Plans the head over the final-norm output `hidden` (`[m, hidden]`).
pub(in crate::model) fn plan(
    ctx: &GpuContext,
    spec: &ModelSpec,
    weights: &Weights,
    hidden: Tensor,
    m: usize,
    logit_rows: LogitRows,
    ops: &mut Vec<Op>,
) -> Result<Head> {
    let c = &spec.config;
    let (hsz, vocab) = (c.hidden_size, c.vocab_size);
    let logit_m = if logit_rows == LogitRows::All { m } else { 1 };
    let head_in = if logit_m == m {
        hidden.clone()
    } else {
        let last = Tensor::from_u32(ctx, "last_row", &[1], &[(m - 1) as u32])?;
        let out = zeros(ctx, "hidden.last", &[1, hsz])?;
        let table = RowTable::from_tensor(hidden.clone())?;
        ops.push(Op::Kernels(gather_rows(ctx, &table, &last, &out)?.kernels));
        out
    };
    let logits = zeros(ctx, "logits", &[logit_m, vocab])?;
    ops.push(Op::Linear(weights.lm_head.linear(ctx, &head_in, &logits)?));
    if let Some(cap) = c.final_logit_softcapping {
        ops.push(Op::Kernel(softcap(ctx, &logits, &logits, cap as f32)?));
    }
    let next = Tensor::zeros(ctx, "next", &[logit_m], DType::U32)?;
    ops.push(Op::Kernels(argmax(ctx, &logits, &next)?));
    Ok(Head {
        next_readback: Readback::new(ctx, "next", next.byte_size()),
        logits_readback: Readback::new(ctx, "logits", logits.byte_size()),
        hidden_readback: Readback::new(ctx, "hidden", hidden.byte_size()),
        hidden,
        logits,
        next,
    })
}
