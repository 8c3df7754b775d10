//! Pipelined greedy decoding: step i + 1 is recorded and submitted before step i's token
//! is read back. The next step takes its token id straight from the previous step's
//! argmax buffer on the GPU (a buffer copy at the head of its command buffer), so the
//! host's encoding of one step overlaps the GPU's execution of the one before, and the
//! host only waits for the submission that holds the token it reads.
//!
//! When the caller stops (a stop token, or its callback says so) one step has run ahead;
//! it is rolled back, so the model ends exactly where plain step-by-step decoding would.

use super::forward::ForwardPlan;
use super::plan_parts::{Head, LogitRows};
use super::state::KvState;
use crate::error::{Error, Result};
use crate::gpu::{GpuContext, Readback, Step};
use crate::ops::embedding::write_token_ids;

/// Where the next step's token id comes from.
#[derive(Clone, Copy)]
enum TokenFeed {
    Host(u32),
    /// The previous decode step's argmax, already on the GPU.
    Gpu,
}

impl KvState {
    /// Greedy decoding after `first` (the token the prefill produced, not yet in the
    /// cache): feeds it, then each produced token, and returns up to `max_new` tokens.
    /// `on_token` sees each token as soon as it is read and returns `false` to stop (the
    /// token is kept). Token-identical to calling [`KvState::forward`] with one token at a
    /// time; faster because the GPU never waits for the host between steps.
    pub async fn decode_greedy(
        &mut self,
        ctx: &GpuContext,
        first: u32,
        max_new: usize,
        on_token: &mut dyn FnMut(u32) -> bool,
    ) -> Result<Vec<u32>> {
        let mut tokens = Vec::with_capacity(max_new);
        if max_new == 0 {
            return Ok(tokens);
        }
        let vocab = self.model.spec.config.vocab_size;
        if first as usize >= vocab {
            return Err(Error::invalid(
                "model",
                "token id to decode from",
                format!("< vocab size {vocab}"),
                first,
            ));
        }
        // One plan for every step: fetched once, held while the steps record on the
        // sequence.
        let plan = self.plan(ctx, 1, LogitRows::Last)?;
        let steps = DecodeStep {
            ctx,
            plan: &plan,
            head: plan.head_for("the next token")?,
        };
        // Two staging buffers: step i + 1 copies into one while step i's is being read.
        let readbacks = [
            Readback::new(ctx, "decode.next.0", 4),
            Readback::new(ctx, "decode.next.1", 4),
        ];
        let mut in_flight = std::collections::VecDeque::with_capacity(2);
        in_flight.push_back(self.submit_decode_step(
            &steps,
            TokenFeed::Host(first),
            &readbacks[0],
        )?);
        let mut submitted = 1;
        while let Some(submission) = in_flight.pop_front() {
            // Run ahead by one step while the context has room; a step that would not fit
            // is only an error if the caller turns out to need it (below).
            if submitted < max_new && self.len() < self.model.options.max_context {
                let readback = &readbacks[submitted % 2];
                in_flight.push_back(self.submit_decode_step(&steps, TokenFeed::Gpu, readback)?);
                submitted += 1;
            }
            let readback = &readbacks[tokens.len() % 2];
            let bytes = readback.read_bytes_of(ctx, Some(submission)).await?;
            let token = u32::from_le_bytes(bytes[..4].try_into().expect("4 bytes"));
            tokens.push(token);
            if !on_token(token) || tokens.len() == max_new {
                break;
            }
            if in_flight.is_empty() {
                // The context was full when we tried to run ahead: this step reports it.
                let readback = &readbacks[submitted % 2];
                in_flight.push_back(self.submit_decode_step(&steps, TokenFeed::Gpu, readback)?);
                submitted += 1;
            }
        }
        let ran_ahead = submitted - tokens.len();
        if ran_ahead > 0 {
            self.rollback(self.len() - ran_ahead)?;
        }
        Ok(tokens)
    }

    /// Records and submits one decode step of the M = 1 plan, its token from `feed`, its
    /// greedy token copied to `readback`.
    fn submit_decode_step(
        &mut self,
        steps: &DecodeStep<'_>,
        feed: TokenFeed,
        readback: &Readback,
    ) -> Result<wgpu::SubmissionIndex> {
        let encode_start = web_time::Instant::now();
        let DecodeStep { ctx, plan, head } = *steps;
        let mut step = Step::new(ctx);
        match feed {
            TokenFeed::Host(token) => {
                write_token_ids(ctx, &plan.ids, &[token], self.model.spec.config.vocab_size)?
            }
            TokenFeed::Gpu => {
                step.encoder()
                    .copy_buffer_to_buffer(head.next.buffer(), 0, plan.ids.buffer(), 0, 4)
            }
        }
        self.record_rows(ctx, &mut step, plan)?;
        step.copy_to_readback(&head.next, readback)?;
        let submission = step.submit();
        self.host_encode_seconds += encode_start.elapsed().as_secs_f64();
        Ok(submission)
    }
}

/// The M = 1 plan every decode step records, and its head.
#[derive(Clone, Copy)]
struct DecodeStep<'p> {
    ctx: &'p GpuContext,
    plan: &'p ForwardPlan,
    head: &'p Head,
}
