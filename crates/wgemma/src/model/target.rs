//! The target model: weights, KV caches and forward plans, and the forward entry point that
//! prefills in chunks, decodes, verifies and rolls back.

use super::checkpoint::WeightSource;
use super::config::{KvSource, LayerKind, ModelSpec};
use super::forward::{ForwardPlan, LogitRows, PlanShape, Shared};
use super::weights::{WeightFormat, Weights};
use crate::error::{Error, Result};
use crate::gpu::{GpuContext, Step};
use crate::ops::attention::{KvCache, KvCacheConfig, KvLayout};
use crate::ops::embedding::write_token_ids;
use std::collections::HashMap;

/// Forwards of up to this many rows run their RMSNorms as matvec prologues by default:
/// decode steps. Measured on the H200 (BENCHMARKS.md), a verify forward of 3 rows was
/// slower with them (each workgroup normalises every row), so verify keeps the kernels.
pub const DEFAULT_NORM_PROLOGUE_ROWS: usize = 1;

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
}

impl Default for ModelOptions {
    fn default() -> Self {
        ModelOptions {
            format: WeightFormat::Q4 { group: 32 },
            max_context: 4096,
            prefill_chunk: 64,
            max_verify_rows: 9,
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
    shared: Shared,
    plans: HashMap<(usize, LogitRows), ForwardPlan>,
    /// Plans of at most this many rows fold the RMSNorms into matvec prologues where they
    /// can (0: never).
    norm_prologue_rows: usize,
    len: usize,
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
                        },
                    )
                    .map(Some)
                }
            })
            .collect::<Result<Vec<_>>>()?;
        let shared = Shared::new(ctx, &spec)?;
        Ok(Model {
            spec,
            options,
            weights,
            caches,
            shared,
            plans: HashMap::new(),
            norm_prologue_rows: DEFAULT_NORM_PROLOGUE_ROWS,
            len: 0,
            host_encode_seconds: 0.0,
        })
    }

    /// Positions in the KV caches.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Starts a new sequence.
    pub fn reset(&mut self) {
        self.caches.iter_mut().flatten().for_each(KvCache::reset);
        self.len = 0;
    }

    /// Forgets positions `>= len` (rejected draft rows).
    pub fn rollback(&mut self, len: usize) -> Result<()> {
        if len > self.len {
            return Err(Error::invalid(
                "model",
                "rollback length",
                format!("<= {}", self.len),
                len,
            ));
        }
        // Validate every cache first: a refusal must leave all of them where they were.
        for cache in self.caches.iter().flatten() {
            cache.check_rollback(len)?;
        }
        for cache in self.caches.iter_mut().flatten() {
            cache.rollback(len)?;
        }
        self.len = len;
        Ok(())
    }

    /// The plan of `m` rows with `rows` logits, built on first use. Speculative decoding
    /// records its draft passes and the verify forward into one step, so it needs a plan's
    /// buffers (token ids, hidden rows, argmax ids) before recording.
    pub fn plan(&mut self, ctx: &GpuContext, m: usize, rows: LogitRows) -> Result<&ForwardPlan> {
        let key = (m, rows);
        if !self.plans.contains_key(&key) {
            let plan = ForwardPlan::new(
                ctx,
                &self.spec,
                &self.weights,
                &self.caches,
                &self.shared,
                PlanShape {
                    m,
                    logit_rows: rows,
                    norm_prologues: m <= self.norm_prologue_rows,
                },
            )?;
            self.plans.insert(key, plan);
        }
        Ok(&self.plans[&key])
    }

    /// Rows up to which forwards run their RMSNorms as matvec prologues.
    pub fn norm_prologue_rows(&self) -> usize {
        self.norm_prologue_rows
    }

    /// Forwards of at most `max_rows` rows fold the RMSNorms into the matvecs that consume
    /// them (0: every norm is a kernel; default [`DEFAULT_NORM_PROLOGUE_ROWS`]). Tests and
    /// `wgemma bench` compare the ways. Drops the plans built so far.
    pub fn set_norm_prologue_rows(&mut self, max_rows: usize) {
        if self.norm_prologue_rows != max_rows {
            self.norm_prologue_rows = max_rows;
            self.plans.clear();
        }
    }

    /// A plan already built (e.g. the last prefill chunk's, whose `head.hidden` still holds
    /// the rows of that forward).
    pub fn built_plan(&self, m: usize, rows: LogitRows) -> Option<&ForwardPlan> {
        self.plans.get(&(m, rows))
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
        let plan = self.plans.get(&(m, rows)).ok_or_else(|| {
            Error::invalid(
                "model",
                format!("plan of {m} rows ({rows:?} logits)"),
                "built by Model::plan",
                "none",
            )
        })?;
        if self.len + m > self.options.max_context {
            return Err(Error::invalid(
                "model",
                "context length (positions held + new tokens)",
                format!("<= {} (--context)", self.options.max_context),
                self.len + m,
            ));
        }
        let start = self.len;
        let positions: Vec<u32> = (start..start + m).map(|p| p as u32).collect();
        plan.positions
            .write_bytes(ctx, bytemuck::cast_slice(&positions));
        for cache in self.caches.iter_mut().flatten() {
            cache.advance(m)?;
        }
        self.len += m;
        let kv_len = self.len;
        let mut recorded = Ok(());
        step.pass(|pass| recorded = plan.record(pass, kv_len));
        recorded
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
        let end = self.len + tokens.len();
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
        let chunk = self.options.prefill_chunk;
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
        let plan = &self.plans[&key];
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
}
