//! The target model: weights, KV caches and forward plans, and the forward entry point that
//! prefills in chunks, decodes, verifies and rolls back.
//!
//! `Model` holds what every conversation shares: the weights, the plans and the KV cache
//! buffers, which hold `ModelOptions::sequences` slots side by side. A [`Sequence`] is one
//! conversation: its slot (returned when the handle drops) and the positions it holds. The
//! model always has one active sequence, which `forward`, `len`, `rollback`, the pipelined
//! decoder and speculative decoding use; [`Model::swap_sequence`] makes another one active,
//! and [`Model::forward_batch`] advances several sequences by one token each in ONE forward
//! (continuous batching: the attention reads each row's own slot).

use super::config::{KvSource, LayerKind, ModelSpec};
use super::forward::{ForwardPlan, LogitRows, PlanShape, Shared};
use super::kv::{ring_rows, FreeSlots};
use super::plan_cache::PlanCache;
use super::plan_options::PlanOptions;
use super::weights::{WeightFormat, Weights};
use crate::error::{Error, Result};
use crate::gpu::{GpuContext, Step};
use crate::ops::attention::{KvCache, KvCacheConfig, KvCursor, KvLayout, MAX_SEQUENCES};
use crate::ops::embedding::write_token_ids;
use crate::weights::source::WeightSource;

pub use super::kv::Sequence;
use std::sync::{Arc, Mutex};

/// How to build a model.
#[derive(Debug, Clone, Copy)]
pub struct ModelOptions {
    pub format: WeightFormat,
    /// Positions the KV caches hold (prompt + generated tokens).
    pub max_context: usize,
    /// Rows per prefill forward.
    pub prefill_chunk: usize,
    /// Rows of the largest verify forward (speculative decoding: k + 1).
    pub max_verify_rows: usize,
    /// Sequences the KV caches hold side by side (each `max_context` positions): how many
    /// conversations a server keeps at once.
    pub sequences: usize,
}

impl Default for ModelOptions {
    fn default() -> Self {
        ModelOptions {
            format: WeightFormat::Q4 { group: 32 },
            max_context: 4096,
            prefill_chunk: 64,
            max_verify_rows: 9,
            sequences: 1,
        }
    }
}

/// What a forward should return.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Want {
    /// The greedy next token after the last row.
    NextToken,
    /// The last row's logits (and its greedy token).
    LastLogits,
    /// Every row's logits and greedy tokens.
    AllLogits,
    /// Every row's greedy token only (speculative verification: 4 bytes a row come back).
    AllNext,
}

/// The result of a forward.
#[derive(Debug, Clone, Default)]
pub struct ForwardOutput {
    /// Greedy next token of each row that has logits (one for NextToken/LastLogits).
    pub next: Vec<u32>,
    /// Row-major logits `[rows, vocab]` when asked for.
    pub logits: Vec<f32>,
}

/// A loaded Gemma 4 text decoder with its KV caches.
pub struct Model {
    pub spec: ModelSpec,
    pub options: ModelOptions,
    weights: Weights,
    caches: Vec<Option<KvCache>>,
    /// The sequence forwards run on.
    sequence: Sequence,
    free: Arc<FreeSlots>,
    shared: Shared,
    plans: PlanCache,
    /// How plans are built (the fusions they use); the plan cache holds plans of these.
    plan_options: PlanOptions,
    /// Rows whose logits fit one buffer binding (rows x vocab f32): forwards that return
    /// every row's logits run in pieces of at most this many rows, so a large prefill chunk
    /// (which computes the last row's logits only) is not bounded by the vocabulary.
    max_logit_rows: usize,
    host_encode_seconds: f64,
}

impl Model {
    /// Uploads the weights of `ck` and allocates the caches.
    pub fn load(
        ctx: &GpuContext,
        ck: &dyn WeightSource,
        spec: ModelSpec,
        options: ModelOptions,
        progress: &mut dyn FnMut(usize, usize),
    ) -> Result<Model> {
        if options.max_context == 0 || options.prefill_chunk == 0 || options.max_verify_rows == 0 {
            return Err(Error::invalid(
                "model",
                "context, prefill chunk and verify rows",
                ">= 1 each",
                format!("{:?}", options),
            ));
        }
        if options.sequences == 0 || options.sequences > MAX_SEQUENCES {
            return Err(Error::invalid(
                "model",
                "sequences (KV slots)",
                format!("1..={MAX_SEQUENCES}"),
                options.sequences,
            ));
        }
        let weights = Weights::load(ctx, ck, &spec, options.format, progress)?;
        let max_rows = options.prefill_chunk.max(options.max_verify_rows);
        let caches = spec
            .layers
            .iter()
            .map(|l| match l.kv {
                KvSource::Shared { .. } => Ok(None),
                KvSource::Own => {
                    let layout = match (l.kind, l.window) {
                        (LayerKind::Sliding, Some(window)) if window < options.max_context => {
                            KvLayout::Sliding { window, max_rows }
                        }
                        _ => KvLayout::Full {
                            max_len: options.max_context,
                        },
                    };
                    KvCache::new(
                        ctx,
                        &format!("kv.{}", l.index),
                        KvCacheConfig {
                            kv_heads: l.num_kv_heads,
                            head_dim: l.head_dim,
                            layout,
                            k_eq_v: l.k_eq_v,
                            max_binding_bytes: None,
                            sequences: options.sequences,
                        },
                    )
                    .map(Some)
                }
            })
            .collect::<Result<Vec<_>>>()?;
        let shared = Shared::new(ctx, &spec)?;
        let row_bytes = spec.config.vocab_size.max(1) as u64 * 4;
        let max_binding = ctx
            .limits
            .max_buffer_size
            .min(ctx.limits.max_storage_buffer_binding_size);
        let max_logit_rows = (max_binding / row_bytes) as usize;
        if max_logit_rows < options.max_verify_rows {
            return Err(Error::invalid(
                "model",
                format!(
                    "logits of a verify forward ({} rows x vocab_size {}, f32)",
                    options.max_verify_rows, spec.config.vocab_size
                ),
                format!("<= the device's largest storage binding, {max_binding} bytes"),
                options.max_verify_rows as u64 * row_bytes,
            ));
        }
        // One cursor stands for every cache: all advance together. Rings bound rollbacks by
        // the most rows one forward appends.
        let cursor = KvCursor::new(options.max_context, ring_rows(&caches));
        // Slot 0 is the model's own sequence; the others wait in the free list (popped from
        // the end: lowest slot first).
        let free = Arc::new(FreeSlots(Mutex::new(
            (1..options.sequences).rev().collect(),
        )));
        Ok(Model {
            spec,
            options,
            weights,
            caches,
            sequence: Sequence {
                slot: 0,
                cursor,
                free: free.clone(),
            },
            free,
            shared,
            plans: PlanCache::default(),
            plan_options: PlanOptions::default(),
            max_logit_rows,
            host_encode_seconds: 0.0,
        })
    }

    /// Positions the active sequence holds in the KV caches.
    pub fn len(&self) -> usize {
        self.sequence.len()
    }

    pub fn is_empty(&self) -> bool {
        self.sequence.is_empty()
    }

    /// Empties the active sequence (a new conversation in its slot).
    pub fn reset(&mut self) {
        self.sequence.reset();
    }

    /// Forgets positions `>= len` of the active sequence (rejected draft rows). On a sliding
    /// ring only the rows of the last forward can be taken back.
    pub fn rollback(&mut self, len: usize) -> Result<()> {
        self.sequence.rollback(len)
    }

    /// A new, empty sequence in a free KV slot, or an error when all
    /// `ModelOptions::sequences` slots are held (the slot comes back when it drops).
    pub fn new_sequence(&self) -> Result<Sequence> {
        let slot = self.free.take().ok_or_else(|| {
            Error::invalid(
                "model",
                "a free sequence slot",
                format!(
                    "one of {} (ModelOptions::sequences) not held by a Sequence",
                    self.options.sequences
                ),
                "all held",
            )
        })?;
        let mut cursor = self.sequence.cursor;
        cursor.reset();
        Ok(Sequence {
            slot,
            cursor,
            free: self.free.clone(),
        })
    }

    /// Makes `seq` the active sequence and leaves the one that was active in `seq`: plain
    /// and speculative generation then continue `seq`'s conversation. Refuses a sequence of
    /// another model.
    pub fn swap_sequence(&mut self, seq: &mut Sequence) -> Result<()> {
        self.check_own(seq)?;
        std::mem::swap(&mut self.sequence, seq);
        Ok(())
    }

    /// The KV slot of the active sequence.
    pub fn sequence_slot(&self) -> usize {
        self.sequence.slot
    }

    fn check_own(&self, seq: &Sequence) -> Result<()> {
        if Arc::ptr_eq(&seq.free, &self.free) {
            Ok(())
        } else {
            Err(Error::invalid(
                "model",
                "sequence",
                "one made by this model's new_sequence",
                format!("slot {} of another model", seq.slot),
            ))
        }
    }

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

    /// The plan of `m` rows with `rows` logits, built on first use. Speculative decoding
    /// records its draft passes and the verify forward into one step, so it needs a plan's
    /// buffers (token ids, hidden rows, argmax ids) before recording.
    pub fn plan(&mut self, ctx: &GpuContext, m: usize, rows: LogitRows) -> Result<&ForwardPlan> {
        let key = (m, rows);
        self.plans.clock += 1;
        let now = self.plans.clock;
        if let Some((_, used)) = self.plans.plans.get_mut(&key) {
            *used = now;
        } else {
            let plan = ForwardPlan::new(
                ctx,
                &self.spec,
                &self.weights,
                &self.caches,
                &self.shared,
                PlanShape {
                    m,
                    logit_rows: rows,
                    options: self.plan_options,
                },
            )?;
            self.plans.insert(key, plan, now);
        }
        Ok(&self.plans.plans[&key].0)
    }

    /// How plans are built (see [`PlanOptions`]).
    pub fn plan_options(&self) -> PlanOptions {
        self.plan_options
    }

    /// Plans from now on are built with `options`; drops the plans built so far when they
    /// change. Tests and `wgemma bench` compare the ways on one load.
    pub fn set_plan_options(&mut self, options: PlanOptions) {
        if self.plan_options != options {
            self.plan_options = options;
            self.plans.clear();
        }
    }

    /// Plans held now (at most 16; the least recently used goes first).
    pub fn plan_count(&self) -> usize {
        self.plans.len()
    }

    /// A plan already built (e.g. the last prefill chunk's, whose `head.hidden` still holds
    /// the rows of that forward).
    pub fn built_plan(&self, m: usize, rows: LogitRows) -> Option<&ForwardPlan> {
        self.plans.get((m, rows))
    }

    /// Records a forward of `m` rows at positions `len..len + m` into `step` as ONE compute
    /// pass (positions written through the queue, caches advanced), without submitting. The
    /// plan's token ids must be written (or copied earlier in the same step) by the caller;
    /// [`Model::plan`] must have built the plan.
    pub fn record_forward(
        &mut self,
        ctx: &GpuContext,
        step: &mut Step,
        m: usize,
        rows: LogitRows,
    ) -> Result<()> {
        let encode_start = web_time::Instant::now();
        let recorded = self.record_rows(ctx, step, m, rows);
        self.host_encode_seconds += encode_start.elapsed().as_secs_f64();
        recorded
    }

    pub(super) fn record_rows(
        &mut self,
        ctx: &GpuContext,
        step: &mut Step,
        m: usize,
        rows: LogitRows,
    ) -> Result<()> {
        let plan = self.plans.get((m, rows)).ok_or_else(|| {
            Error::invalid(
                "model",
                format!("plan of {m} rows ({rows:?} logits)"),
                "built by Model::plan",
                "none",
            )
        })?;
        let start = self.len();
        if start + m > self.options.max_context {
            return Err(Error::invalid(
                "model",
                "context length (positions held + new tokens)",
                format!("<= {} (--context)", self.options.max_context),
                start + m,
            ));
        }
        self.sequence.cursor.check_advance(m)?;
        let slot = self.sequence.slot;
        let rows: Vec<(usize, usize)> = (start..start + m).map(|p| (p, slot)).collect();
        Self::write_positions(ctx, plan, &rows, self.options.sequences);
        self.sequence.cursor.advance(m)?;
        let kv_len = self.len();
        let mut recorded = Ok(());
        step.pass(|pass| recorded = plan.record(pass, kv_len));
        recorded
    }

    /// Records a forward of `m` rows whose positions the host does not know yet (pipelined
    /// speculative rounds: the previous round's accepted count is still on the GPU). The
    /// rows' positions are copied on the GPU from `positions` (u32, `m` of them from element
    /// `from`) into the plan's positions buffer; the first is at most `max_start`. The KV
    /// append and RoPE read positions from that buffer and the attention cuts each row's
    /// keys from it, so only the attention's grid comes from the host, planned for the
    /// longest case (`max_start + m` keys: an overestimate only costs speed). The active
    /// sequence's cursor does not move: the caller brings it up to date with
    /// [`Model::account_rows`] once it knows where the rows went.
    pub fn record_forward_at_gpu_positions(
        &mut self,
        ctx: &GpuContext,
        step: &mut Step,
        m: usize,
        rows: LogitRows,
        positions: (&crate::gpu::Tensor, usize),
        max_start: usize,
    ) -> Result<()> {
        let encode_start = web_time::Instant::now();
        let plan = self.plans.get((m, rows)).ok_or_else(|| {
            Error::invalid(
                "model",
                format!("plan of {m} rows ({rows:?} logits)"),
                "built by Model::plan",
                "none",
            )
        })?;
        if max_start + m > self.options.max_context {
            return Err(Error::invalid(
                "model",
                "context length (positions held + new tokens, at most)",
                format!("<= {} (--context)", self.options.max_context),
                max_start + m,
            ));
        }
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
        if self.options.sequences > 1 {
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

    /// Brings the active sequence's cursor up to date after a forward recorded with
    /// [`Model::record_forward_at_gpu_positions`]: its `m` rows were written from position
    /// `start` (>= [`Model::len`]: positions between were written by the forward before it),
    /// and the sequence keeps positions `< keep`. Runs the cursor's own checks (a sliding
    /// ring refuses a rollback past rows it overwrote), as a host-positioned forward and
    /// [`Model::rollback`] would.
    pub fn account_rows(&mut self, start: usize, m: usize, keep: usize) -> Result<()> {
        let len = self.len();
        if start < len {
            return Err(Error::invalid(
                "model",
                "start of the rows to account",
                format!(">= {len} (positions held)"),
                start,
            ));
        }
        let cursor = &mut self.sequence.cursor;
        if start > len {
            cursor.advance(start - len)?;
        }
        cursor.advance(m)?;
        cursor.rollback(keep)
    }

    /// The most rows one forward may write on the sliding rings (None without rings).
    pub fn ring_rows(&self) -> Option<usize> {
        ring_rows(&self.caches)
    }

    /// The KV cache of `layer` (None for KV-shared layers and out-of-range indices).
    pub fn kv_cache(&self, layer: usize) -> Option<&KvCache> {
        self.caches.get(layer).and_then(Option::as_ref)
    }

    /// The weights on the GPU (the MTP assistant reads the embedding table and the k_norm
    /// of K = V layers).
    pub fn weights(&self) -> &Weights {
        &self.weights
    }

    /// Bytes of the weights on the GPU.
    pub fn weight_bytes(&self) -> u64 {
        self.weights.bytes()
    }

    /// Weight bytes one decode step reads: everything but the embedding tables, of which
    /// only one row each is read.
    pub fn decode_weight_bytes(&self) -> u64 {
        self.weights.bytes() - self.weights.table_bytes()
    }

    /// Host time spent building and submitting forwards (not waiting), in seconds, since
    /// the model was loaded.
    pub fn host_encode_seconds(&self) -> f64 {
        self.host_encode_seconds
    }

    pub(super) fn add_host_encode_seconds(&mut self, seconds: f64) {
        self.host_encode_seconds += seconds;
    }

    fn validate_tokens(&self, tokens: &[u32]) -> Result<()> {
        let vocab = self.spec.config.vocab_size;
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
        if end > self.options.max_context {
            return Err(Error::invalid(
                "model",
                "context length (positions held + new tokens)",
                format!("<= {} (--context)", self.options.max_context),
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
            Want::AllLogits | Want::AllNext => self.options.prefill_chunk.min(self.max_logit_rows),
            Want::NextToken | Want::LastLogits => self.options.prefill_chunk,
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
        let m = tokens.len();
        let key = (m, rows);
        let vocab = self.spec.config.vocab_size;
        let plan = self.plan(ctx, m, rows)?;
        write_token_ids(ctx, &plan.ids, tokens, vocab)?;
        let mut step = Step::new(ctx);
        self.record_rows(ctx, &mut step, m, rows)?;
        let plan = self.plans.get(key).expect("built above");
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
        let limit = self.max_batch_rows();
        if m == 0 || m > limit {
            return Err(Error::invalid(
                "model",
                "sequences in one batched forward",
                format!("1..={limit} (the prefill chunk or verify rows)"),
                m,
            ));
        }
        let vocab = self.spec.config.vocab_size;
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
        self.plan(ctx, m, LogitRows::All)?;
        let plan = self.plans.get((m, LogitRows::All)).expect("built above");
        let tokens: Vec<u32> = rows.iter().map(|(_, t)| *t).collect();
        write_token_ids(ctx, &plan.ids, &tokens, vocab)?;
        let mut step = Step::new(ctx);
        // record_batch books its own encode time.
        let mut encode_s = encode_start.elapsed().as_secs_f64();
        {
            let mut spans: Vec<(&mut Sequence, usize)> =
                rows.iter_mut().map(|(s, _)| (&mut **s, 1)).collect();
            self.record_batch(ctx, &mut step, &mut spans)?;
        }
        let encode_start = web_time::Instant::now();
        let plan = self.plans.get((m, LogitRows::All)).expect("built above");
        let read_logits = want == Want::AllLogits;
        let head = plan
            .head
            .as_ref()
            .ok_or_else(|| Error::invalid("model", "plan head", "logits for every row", "none"))?;
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

    /// The most rows one batched forward may hold (a plan's rows, and every row's logits
    /// within one buffer binding).
    pub fn max_batch_rows(&self) -> usize {
        self.options
            .prefill_chunk
            .max(self.options.max_verify_rows)
            .min(self.max_logit_rows)
    }

    /// Records ONE forward over several sequences into `step`, without submitting: span i
    /// is `spans[i].1` rows at sequence i's next positions (its KV slot and positions; a
    /// speculative verify of [seed, d1..dk] is k + 1 rows of one sequence), rows in span
    /// order. The plan of M = (all rows) with every row's logits must be built
    /// ([`Model::plan`]) and its token ids written (or copied earlier in the step) by the
    /// caller. Each sequence advances by its rows (roll rejected ones back with
    /// [`Sequence::rollback`]). The attention plans its grid for the longest sequence;
    /// shorter rows see fewer keys (each row's keys are cut from its own position).
    pub fn record_batch(
        &mut self,
        ctx: &GpuContext,
        step: &mut Step,
        spans: &mut [(&mut Sequence, usize)],
    ) -> Result<()> {
        let m: usize = spans.iter().map(|(_, n)| n).sum();
        let limit = self.max_batch_rows();
        if m == 0 || m > limit {
            return Err(Error::invalid(
                "model",
                "rows of one batched forward",
                format!("1..={limit} (the prefill chunk or verify rows)"),
                m,
            ));
        }
        let plan = self.plans.get((m, LogitRows::All)).ok_or_else(|| {
            Error::invalid(
                "model",
                format!("plan of {m} rows (all logits)"),
                "built by Model::plan",
                "none",
            )
        })?;
        for (i, (seq, n)) in spans.iter().enumerate() {
            self.check_own(seq)?;
            if *n == 0 || seq.len() + n > self.options.max_context {
                return Err(Error::invalid(
                    "model",
                    format!("context length of batch span {i} (positions held + its rows)"),
                    format!("1 row or more, <= {} (--context)", self.options.max_context),
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
        Self::write_positions(ctx, plan, &placed, self.options.sequences);
        let mut longest = 1;
        for (seq, n) in spans.iter_mut() {
            seq.cursor.advance(*n)?;
            longest = longest.max(seq.len());
        }
        // A plan needs at least `m` positions.
        let kv_len = longest.max(m).min(self.options.max_context);
        let mut recorded = Ok(());
        step.pass(|pass| recorded = plan.record(pass, kv_len));
        self.host_encode_seconds += encode_start.elapsed().as_secs_f64();
        recorded
    }
}
