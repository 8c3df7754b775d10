//! [`KvState`]: what forwards of a [`Model`] write. The KV caches (every conversation's
//! slot side by side), the active [`Sequence`] and the free slots, the [`Planner`] of the
//! forward plans over those caches (their bind groups reference the caches and hold the
//! activations; a forward records a plan on a sequence), and the host time spent encoding. The forwards themselves are in
//! `state_forward.rs`; `target.rs` says why the state holds its model.
//!
//! A [`Sequence`] is one conversation: its slot (returned when the handle drops) and the
//! positions it holds. The state always has one active sequence, which `forward`, `len`,
//! `rollback`, the pipelined decoder and speculative decoding use;
//! [`KvState::swap_sequence`] makes another one active, and [`KvState::forward_batch`]
//! advances several sequences by one token each in ONE forward (continuous batching: the
//! attention reads each row's own slot).

use super::config::{KvSource, LayerKind, ModelSpec};
use super::forward::{ForwardPlan, LogitRows};
use super::kv::{ring_rows, FreeSlots, Sequence};
use super::plan_options::PlanOptions;
use super::planner::Planner;
use super::target::{Model, ModelOptions};
use crate::error::{Error, Result};
use crate::gpu::GpuContext;
use crate::ops::attention::{KvCache, KvCacheConfig, KvCursor, KvLayout};
use crate::weights::source::WeightSource;
use std::sync::{Arc, Mutex};

/// The KV caches of a [`Model`], the conversations in them and the forward plans over
/// them: the mutable half of a loaded model (see `target.rs`).
pub struct KvState {
    pub(super) model: Arc<Model>,
    pub(super) caches: Vec<Option<KvCache>>,
    /// The sequence forwards run on.
    pub(super) sequence: Sequence,
    free: Arc<FreeSlots>,
    /// The forward plans over these caches, and the options they are built with.
    pub(super) planner: Planner,
    pub(super) host_encode_seconds: f64,
}

impl KvState {
    /// Allocates the KV caches of `model` (`ModelOptions::sequences` slots of
    /// `max_context` positions each) with an empty active sequence in slot 0.
    pub fn new(ctx: &GpuContext, model: impl Into<Arc<Model>>) -> Result<KvState> {
        let model = model.into();
        let options = model.options;
        let max_rows = options.prefill_chunk.max(options.max_verify_rows);
        let caches = model
            .spec
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
        // One cursor stands for every cache: all advance together. Rings bound rollbacks by
        // the most rows one forward appends.
        let cursor = KvCursor::new(options.max_context, ring_rows(&caches));
        // Slot 0 is the state's own sequence; the others wait in the free list (popped from
        // the end: lowest slot first).
        let free = Arc::new(FreeSlots(Mutex::new(
            (1..options.sequences).rev().collect(),
        )));
        Ok(KvState {
            model,
            caches,
            sequence: Sequence {
                slot: 0,
                cursor,
                free: free.clone(),
            },
            free,
            planner: Planner::new(),
            host_encode_seconds: 0.0,
        })
    }

    /// Uploads the weights of `ck` ([`Model::load`]) and allocates one state of the model:
    /// a caller that runs one conversation space needs no handle on the model of its own.
    pub fn load(
        ctx: &GpuContext,
        ck: &dyn WeightSource,
        spec: ModelSpec,
        options: ModelOptions,
        progress: &mut dyn FnMut(usize, usize),
    ) -> Result<KvState> {
        KvState::new(ctx, Model::load(ctx, ck, spec, options, progress)?)
    }

    /// The model this state runs.
    pub fn model(&self) -> &Model {
        &self.model
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
                    self.model.options.sequences
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
    /// another state.
    pub fn swap_sequence(&mut self, seq: &mut Sequence) -> Result<()> {
        self.check_own(seq)?;
        std::mem::swap(&mut self.sequence, seq);
        Ok(())
    }

    /// The KV slot of the active sequence.
    pub fn sequence_slot(&self) -> usize {
        self.sequence.slot
    }

    pub(super) fn check_own(&self, seq: &Sequence) -> Result<()> {
        if Arc::ptr_eq(&seq.free, &self.free) {
            Ok(())
        } else {
            Err(Error::invalid(
                "model",
                "sequence",
                "one made by this KvState's new_sequence",
                format!("slot {} of another KvState", seq.slot),
            ))
        }
    }

    /// The plan of `m` rows with `rows` logits, built on first use. The recording entry
    /// points take it ([`KvState::record_forward`], [`KvState::record_batch`]), and
    /// speculative decoding needs its buffers (token ids, hidden rows, argmax ids) before
    /// recording.
    pub fn plan(
        &mut self,
        ctx: &GpuContext,
        m: usize,
        rows: LogitRows,
    ) -> Result<Arc<ForwardPlan>> {
        self.planner.plan(ctx, &self.model, &self.caches, m, rows)
    }

    /// How plans are built (see [`PlanOptions`]).
    pub fn plan_options(&self) -> PlanOptions {
        self.planner.options()
    }

    /// Plans from now on are built with `options`; drops the plans built so far when they
    /// change. Tests and `wgemma bench` compare the ways on one load.
    pub fn set_plan_options(&mut self, options: PlanOptions) {
        self.planner.set_options(options);
    }

    /// Plans held now (at most 16; the least recently used goes first).
    pub fn plan_count(&self) -> usize {
        self.planner.len()
    }

    /// A plan already built (e.g. the last prefill chunk's, whose `head.hidden` still holds
    /// the rows of that forward).
    pub fn built_plan(&self, m: usize, rows: LogitRows) -> Option<&ForwardPlan> {
        self.planner.built(m, rows)
    }

    /// Brings the active sequence's cursor up to date after a forward recorded with
    /// [`KvState::record_forward_at_gpu_positions`]: its `m` rows were written from
    /// position `start` (>= [`KvState::len`]: positions between were written by the forward
    /// before it), and the sequence keeps positions `< keep`. Runs the cursor's own checks
    /// (a sliding ring refuses a rollback past rows it overwrote), as a host-positioned
    /// forward and [`KvState::rollback`] would.
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

    /// Host time spent building and submitting forwards (not waiting), in seconds, since
    /// the state was made.
    pub fn host_encode_seconds(&self) -> f64 {
        self.host_encode_seconds
    }
}
