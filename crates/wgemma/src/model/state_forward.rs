//! The forwards of a [`KvState`]: prefill in chunks, single and batched forwards with a
//! readback, and the recording entry points speculative decoding and the pipelined decoder
//! build their steps from. Each reads the model's weights through the plans and writes the
//! state's caches, cursors and plans.

use super::forward::{ForwardPlan, LogitRows};
use super::kv::Sequence;
use super::state::KvState;
use super::target::{ForwardOutput, Want};
use crate::error::{Error, Result};
use crate::gpu::{GpuContext, Step};
use crate::ops::embedding::write_token_ids;

/// Writes the positions buffer of `plan` for rows at `(position, slot)`.
fn write_positions(
    ctx: &GpuContext,
    plan: &ForwardPlan,
    rows: &[(usize, usize)],
    sequences: usize,
) {
    let mut data: Vec<u32> = rows.iter().map(|&(p, _)| p as u32).collect();
    if sequences > 1 {
        data.extend(rows.iter().map(|&(_, s)| s as u32));
    }
    plan.positions.write_bytes(ctx, bytemuck::cast_slice(&data));
}

impl KvState {
    /// Records a forward of `plan`'s rows (M) at positions `len..len + M` into `step` as
    /// ONE compute pass (positions written through the queue, caches advanced), without
    /// submitting. The plan's token ids must be written (or copied earlier in the same
    /// step) by the caller; `plan` comes from this state's [`KvState::plan`].
    pub fn record_forward(
        &mut self,
        ctx: &GpuContext,
        step: &mut Step,
        plan: &ForwardPlan,
    ) -> Result<()> {
        let encode_start = web_time::Instant::now();
        let recorded = self.record_rows(ctx, step, plan);
        self.host_encode_seconds += encode_start.elapsed().as_secs_f64();
        recorded
    }

    pub(super) fn record_rows(
        &mut self,
        ctx: &GpuContext,
        step: &mut Step,
        plan: &ForwardPlan,
    ) -> Result<()> {
        self.planner.check_own(plan)?;
        let m = plan.m;
        let start = self.len();
        self.check_context(start + m, "context length (positions held + new tokens)")?;
        self.sequence.cursor.check_advance(m)?;
        let slot = self.sequence.slot;
        let rows: Vec<(usize, usize)> = (start..start + m).map(|p| (p, slot)).collect();
        write_positions(ctx, plan, &rows, self.model.options.sequences);
        self.sequence.cursor.advance(m)?;
        let kv_len = self.len();
        let mut recorded = Ok(());
        step.pass(|pass| recorded = plan.record(pass, kv_len));
        recorded
    }

    /// Records a forward of `plan`'s rows (M) whose positions the host does not know yet
    /// (pipelined speculative rounds: the previous round's accepted count is still on the
    /// GPU). The rows' positions are copied on the GPU from `positions` (u32, M of them
    /// from element `from`) into the plan's positions buffer; the first is at most
    /// `max_start`. The KV append and RoPE read positions from that buffer and the
    /// attention cuts each row's keys from it, so only the attention's grid comes from the
    /// host, planned for the longest case (`max_start + M` keys: an overestimate only costs
    /// speed). The active sequence's cursor does not move: the caller brings it up to date
    /// with [`KvState::account_rows`] once it knows where the rows went.
    pub fn record_forward_at_gpu_positions(
        &mut self,
        ctx: &GpuContext,
        step: &mut Step,
        plan: &ForwardPlan,
        positions: (&crate::gpu::Tensor, usize),
        max_start: usize,
    ) -> Result<()> {
        let encode_start = web_time::Instant::now();
        self.planner.check_own(plan)?;
        let m = plan.m;
        self.check_context(
            max_start + m,
            "context length (positions held + new tokens, at most)",
        )?;
        let (source, from) = positions;
        if source.dtype() != crate::gpu::DType::U32 || from + m > source.numel() {
            return Err(Error::invalid(
                "model",
                "GPU positions of a forward",
                format!("{m} u32 from element {from}"),
                format!("{:?} {:?}", source.dtype(), source.shape()),
            ));
        }
        // Ring sizes bound the rows of one forward, wherever it starts.
        self.sequence.cursor.check_advance(m)?;
        if self.model.options.sequences > 1 {
            // The slot half of the positions buffer: constant for the sequence.
            let slots = vec![self.sequence.slot as u32; m];
            ctx.queue.write_buffer(
                plan.positions.buffer(),
                (m * 4) as u64,
                bytemuck::cast_slice(&slots),
            );
        }
        step.encoder().copy_buffer_to_buffer(
            source.buffer(),
            (from * 4) as u64,
            plan.positions.buffer(),
            0,
            (m * 4) as u64,
        );
        let mut recorded = Ok(());
        step.pass(|pass| recorded = plan.record(pass, max_start + m));
        self.host_encode_seconds += encode_start.elapsed().as_secs_f64();
        recorded
    }

    fn validate_tokens(&self, tokens: &[u32]) -> Result<()> {
        let vocab = self.model.spec.config.vocab_size;
        if tokens.is_empty() {
            return Err(Error::invalid(
                "model",
                "tokens of a forward",
                "at least one",
                0,
            ));
        }
        if let Some((i, &t)) = tokens
            .iter()
            .enumerate()
            .find(|(_, &t)| t as usize >= vocab)
        {
            return Err(Error::invalid(
                "model",
                format!("token id at index {i}"),
                format!("< vocab size {vocab}"),
                t,
            ));
        }
        let end = self.len() + tokens.len();
        self.check_context(end, "context length (positions held + new tokens)")
    }

    /// Refuses a forward that would end at position `end` past the context (`what` names
    /// the length in the error).
    fn check_context(&self, end: usize, what: &str) -> Result<()> {
        let max_context = self.model.options.max_context;
        if end > max_context {
            return Err(Error::invalid(
                "model",
                what,
                format!("<= {max_context} (--context)"),
                end,
            ));
        }
        Ok(())
    }

    /// Runs `tokens` through the model at positions `len..len + tokens.len()` (prefill in
    /// chunks of `prefill_chunk` rows), appending them to the caches.
    pub async fn forward(
        &mut self,
        ctx: &GpuContext,
        tokens: &[u32],
        want: Want,
    ) -> Result<ForwardOutput> {
        self.validate_tokens(tokens)?;
        let chunk = match want {
            Want::AllLogits | Want::AllNext => self
                .model
                .options
                .prefill_chunk
                .min(self.model.max_logit_rows()),
            Want::NextToken | Want::LastLogits => self.model.options.prefill_chunk,
        };
        let mut out = ForwardOutput::default();
        let pieces: Vec<&[u32]> = tokens.chunks(chunk).collect();
        for (i, piece) in pieces.iter().enumerate() {
            let last = i + 1 == pieces.len();
            let rows = match (want, last) {
                (Want::AllLogits | Want::AllNext, _) => LogitRows::All,
                (_, true) => LogitRows::Last,
                (_, false) => LogitRows::None,
            };
            let piece_out = self
                .forward_rows(
                    ctx,
                    piece,
                    rows,
                    matches!(want, Want::LastLogits | Want::AllLogits),
                )
                .await?;
            out.next.extend(piece_out.next);
            out.logits.extend(piece_out.logits);
        }
        Ok(out)
    }

    /// One forward of `tokens.len()` rows (at most one plan's worth) in one pass, one submit
    /// and one wait.
    async fn forward_rows(
        &mut self,
        ctx: &GpuContext,
        tokens: &[u32],
        rows: LogitRows,
        read_logits: bool,
    ) -> Result<ForwardOutput> {
        let encode_start = web_time::Instant::now();
        let vocab = self.model.spec.config.vocab_size;
        let plan = self.plan(ctx, tokens.len(), rows)?;
        write_token_ids(ctx, &plan.ids, tokens, vocab)?;
        let mut step = Step::new(ctx);
        self.record_rows(ctx, &mut step, &plan)?;
        if let Some(head) = &plan.head {
            step.copy_to_readback(&head.next, &head.next_readback)?;
            if read_logits {
                step.copy_to_readback(&head.logits, &head.logits_readback)?;
            }
        }
        step.submit();
        self.host_encode_seconds += encode_start.elapsed().as_secs_f64();
        let mut out = ForwardOutput::default();
        if let Some(head) = &plan.head {
            out.next = head.next_readback.read_u32(ctx).await?;
            if read_logits {
                out.logits = head.logits_readback.read_f32(ctx).await?;
            }
        }
        Ok(out)
    }

    /// Advances each sequence of `rows` by its token in ONE forward of `rows.len()` rows
    /// (continuous batching): row i embeds `rows[i].1` at sequence i's next position and
    /// attends over sequence i's own KV slot. `want` is [`Want::AllNext`] (each row's greedy
    /// token) or [`Want::AllLogits`] (and every row's logits, for sampling). The active
    /// sequence is not touched; pass it in by swapping it out first. Greedy tokens equal
    /// those of the same sequences run one at a time (up to the reduction order of a
    /// `rows.len()`-row forward, the same as a verify forward's).
    pub async fn forward_batch(
        &mut self,
        ctx: &GpuContext,
        rows: &mut [(&mut Sequence, u32)],
        want: Want,
    ) -> Result<ForwardOutput> {
        let m = rows.len();
        if !matches!(want, Want::AllNext | Want::AllLogits) {
            return Err(Error::invalid(
                "model",
                "want of a batched forward",
                "AllNext or AllLogits (one result per sequence)",
                format!("{want:?}"),
            ));
        }
        let limit = self.model.max_batch_rows();
        if m == 0 || m > limit {
            return Err(Error::invalid(
                "model",
                "sequences in one batched forward",
                format!("1..={limit} (the prefill chunk or verify rows)"),
                m,
            ));
        }
        let vocab = self.model.spec.config.vocab_size;
        for (i, (_, token)) in rows.iter().enumerate() {
            if *token as usize >= vocab {
                return Err(Error::invalid(
                    "model",
                    format!("token of batch row {i}"),
                    format!("< vocab size {vocab}"),
                    *token,
                ));
            }
        }
        let encode_start = web_time::Instant::now();
        let plan = self.plan(ctx, m, LogitRows::All)?;
        let head = plan.head_for("every row")?;
        let tokens: Vec<u32> = rows.iter().map(|(_, t)| *t).collect();
        write_token_ids(ctx, &plan.ids, &tokens, vocab)?;
        let mut step = Step::new(ctx);
        // record_batch books its own encode time.
        let mut encode_s = encode_start.elapsed().as_secs_f64();
        {
            let mut spans: Vec<(&mut Sequence, usize)> =
                rows.iter_mut().map(|(s, _)| (&mut **s, 1)).collect();
            self.record_batch(ctx, &mut step, &plan, &mut spans)?;
        }
        let encode_start = web_time::Instant::now();
        let read_logits = want == Want::AllLogits;
        step.copy_to_readback(&head.next, &head.next_readback)?;
        if read_logits {
            step.copy_to_readback(&head.logits, &head.logits_readback)?;
        }
        step.submit();
        encode_s += encode_start.elapsed().as_secs_f64();
        self.host_encode_seconds += encode_s;
        let mut out = ForwardOutput {
            next: head.next_readback.read_u32(ctx).await?,
            logits: Vec::new(),
        };
        if read_logits {
            out.logits = head.logits_readback.read_f32(ctx).await?;
        }
        Ok(out)
    }

    /// Records ONE forward over several sequences into `step`, without submitting: span i
    /// is `spans[i].1` rows at sequence i's next positions (its KV slot and positions; a
    /// speculative verify of [seed, d1..dk] is k + 1 rows of one sequence), rows in span
    /// order. `plan` is this state's plan of M = (all rows) with every row's logits
    /// ([`KvState::plan`]), its token ids written (or copied earlier in the step) by the
    /// caller. Each sequence advances by its rows (roll rejected ones back with
    /// [`Sequence::rollback`]). The attention plans its grid for the longest sequence;
    /// shorter rows see fewer keys (each row's keys are cut from its own position).
    pub fn record_batch(
        &mut self,
        ctx: &GpuContext,
        step: &mut Step,
        plan: &ForwardPlan,
        spans: &mut [(&mut Sequence, usize)],
    ) -> Result<()> {
        let m: usize = spans.iter().map(|(_, n)| n).sum();
        let limit = self.model.max_batch_rows();
        if m == 0 || m > limit {
            return Err(Error::invalid(
                "model",
                "rows of one batched forward",
                format!("1..={limit} (the prefill chunk or verify rows)"),
                m,
            ));
        }
        self.planner.check_own(plan)?;
        if (plan.m, plan.logit_rows) != (m, LogitRows::All) {
            return Err(Error::invalid(
                "model",
                "plan of a batched forward",
                format!("{m} rows, every row's logits"),
                format!("{} rows, {:?} logits", plan.m, plan.logit_rows),
            ));
        }
        for (i, (seq, n)) in spans.iter().enumerate() {
            self.check_own(seq)?;
            if *n == 0 || seq.len() + n > self.model.options.max_context {
                return Err(Error::invalid(
                    "model",
                    format!("context length of batch span {i} (positions held + its rows)"),
                    format!(
                        "1 row or more, <= {} (--context)",
                        self.model.options.max_context
                    ),
                    format!("{} + {n}", seq.len()),
                ));
            }
            seq.cursor.check_advance(*n)?;
        }
        let encode_start = web_time::Instant::now();
        let placed: Vec<(usize, usize)> = spans
            .iter()
            .flat_map(|(s, n)| (s.len()..s.len() + n).map(|p| (p, s.slot)))
            .collect();
        write_positions(ctx, plan, &placed, self.model.options.sequences);
        let mut longest = 1;
        for (seq, n) in spans.iter_mut() {
            seq.cursor.advance(*n)?;
            longest = longest.max(seq.len());
        }
        // A plan needs at least `m` positions.
        let kv_len = longest.max(m).min(self.model.options.max_context);
        let mut recorded = Ok(());
        step.pass(|pass| recorded = plan.record(pass, kv_len));
        self.host_encode_seconds += encode_start.elapsed().as_secs_f64();
        recorded
    }
}
