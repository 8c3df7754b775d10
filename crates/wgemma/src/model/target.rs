//! The target model: what never changes once loaded (spec, options, weights, the GPU
//! resources every forward shares). The KV caches, the conversations in them and the
//! forward plans whose bind groups reference those caches live in a
//! [`KvState`](super::state::KvState), which runs the forwards (`state.rs`,
//! `state_forward.rs`).
//!
//! The split follows llama.cpp's model and context: one [`Model`] is uploaded once and never
//! mutated (`&self` everywhere), and a state made from it holds everything a forward writes.
//! The state keeps an `Arc<Model>` rather than taking `&Model` in each forward: every
//! forward, rollback and sequence swap keeps the one-object signature it had when the model
//! owned the caches (callers swap `&mut Model` for `&mut KvState` and nothing else), and a
//! state can never be run against another model's weights, which its plans bind. Several
//! states may share one model, each with caches of its own.

use super::config::ModelSpec;
use super::forward::Shared;
use super::weights::{WeightFormat, Weights};
use crate::error::{Error, Result};
use crate::gpu::GpuContext;
use crate::ops::attention::MAX_SEQUENCES;
use crate::weights::source::WeightSource;

pub use super::kv::Sequence;

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

/// A loaded Gemma 4 text decoder: its weights and the resources every forward shares.
/// Immutable once loaded; a [`KvState`](super::state::KvState) made from it holds the
/// caches and runs forwards.
pub struct Model {
    pub spec: ModelSpec,
    pub options: ModelOptions,
    weights: Weights,
    /// RoPE tables and the attention scratch. The scratch's contents are written and read
    /// within one forward's pass, and forwards reach the GPU one after another on the
    /// queue, so the states of this model share it instead of each allocating one.
    shared: Shared,
    /// Rows whose logits fit one buffer binding (rows x vocab f32): forwards that return
    /// every row's logits run in pieces of at most this many rows, so a large prefill chunk
    /// (which computes the last row's logits only) is not bounded by the vocabulary.
    max_logit_rows: usize,
}

impl Model {
    /// Uploads the weights of `ck`. The KV caches come with a
    /// [`KvState`](super::state::KvState) of this model.
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
        Ok(Model {
            spec,
            options,
            weights,
            shared,
            max_logit_rows,
        })
    }

    /// The weights on the GPU (the MTP assistant reads the embedding table and the k_norm
    /// of K = V layers).
    pub fn weights(&self) -> &Weights {
        &self.weights
    }

    /// The GPU resources every plan of this model shares (RoPE tables, attention scratch).
    pub(super) fn shared(&self) -> &Shared {
        &self.shared
    }

    /// Rows whose logits fit one buffer binding.
    pub(super) fn max_logit_rows(&self) -> usize {
        self.max_logit_rows
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

    /// The most rows one batched forward may hold (a plan's rows, and every row's logits
    /// within one buffer binding).
    pub fn max_batch_rows(&self) -> usize {
        self.options
            .prefill_chunk
            .max(self.options.max_verify_rows)
            .min(self.max_logit_rows)
    }
}
