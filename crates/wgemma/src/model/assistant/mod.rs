//! The Gemma 4 MTP assistant (HF `Gemma4AssistantForCausalLM`, `gemma4_assistant`): a small
//! decoder whose layers are all Q-only, attending to the TARGET's K/V.
//!
//! One draft step at the round's constant position P (HF
//! `SinglePositionMultiTokenCandidateGenerator`):
//!
//! ```text
//! x      = concat(target_embed(tok) * target_embed_scale, h_prev)      [1, 2 Ht]
//! h      = pre_projection(x)                                           [1, Ha]
//! h      = layers(h)   (Q-only attention over the target's last KV-owning sliding / full
//!                       layer, RoPE at P; MLP; layer_scalar: the target's decoder layer)
//! hn     = norm(h)
//! h_prev = post_projection(hn)                                         [1, Ht] (next step)
//! logits = lm_head(hn)                                  dense tied head (26B / 31B), or
//!        = centroids(hn) -> TopK -> token_ordering rows -> lm_head rows . hn -> scatter
//!          into a row filled with min(selected) - 1                    centroid head (E2B/E4B)
//! tok    = argmax(logits)                                              (stays on the GPU)
//! ```
//!
//! Every kernel is built once at load, for ONE row; a step is ONE compute pass, and the
//! concatenation costs no dispatch: the embedding writes the first half of `x` and buffer
//! copies between passes put h_prev in the second half (the target's hidden row for the
//! first step of a round, `post_projection`'s output for the next ones).
//!
//! The K/V view. HF hands the assistant the target's store-layer K/V as the last target
//! forward returned them, cut to the current length; its masks are bidirectional (sliding:
//! `|q - kv| <= W`, flipped to count from the end). [`DraftView::hf`] reproduces the rows
//! that leaves visible (full: `0..=min(R, P)`, which after a rejection includes the rejected
//! draft's K/V at P; sliding: the `W + 1` rows ending at E); the attention kernels take the
//! END of the range as their "position"
//! ([`Attention::with_window`](crate::ops::attention::Attention::with_window)). The rows are
//! still in the target's caches: rollback is bookkeeping only, so rejected rows stay until
//! the next forward overwrites them, which happens after the drafts.
//!
//! The centroid head's certificate: `token_ordering` is verified at load to be a permutation
//! of `0..vocab`; that certifies the selected ids as pairwise distinct, which is what the
//! parallel scatter route needs. A `token_ordering` that is NOT a permutation is REFUSED
//! at load (an error naming the first bad entry): HF's own result would then depend on
//! torch's unspecified order of duplicate scatter writes, so there is no reference
//! behaviour to fall back to.

mod config;
mod draft_costs;
mod head;
mod io;
mod step;
mod view;
mod weights;

pub use config::{parse_assistant_config, AssistantHead, AssistantOptions, AssistantSpec};
pub use draft_costs::DraftCosts;
pub use head::{lm_head_rows_layout, HeadRoutes, LM_HEAD_ROWS, TOKEN_ORDERING};
pub use view::DraftView;
pub use weights::tensors as assistant_tensors;

use super::blocks::{KindView, ViewKv};
use super::config::{KvSource, LayerKind, LayerSpec, ModelSpec};
use super::plan_parts::{rope_config, KeyLens, Op};
use super::state::KvState;
use crate::error::{Error, Result};
use crate::gpu::{DType, GpuContext, Readback, Step, Tensor};
use crate::ops::attention::KeyFromValue;
use crate::ops::opset::OpSet;
use crate::weights::source::{Scope, WeightSource};
use config::OP;
use io::DraftIo;
use step::{plan_step, StepSource};
use weights::AssistantWeights;

/// The target's store layer of `kind`: the last layer of that kind owning its K/V (HF
/// `kv_sharing_modes` "store"; what the target hands the assistant).
pub fn store_layer(target: &ModelSpec, kind: LayerKind) -> Option<usize> {
    target
        .layers
        .iter()
        .filter(|l| l.kind == kind && l.kv == KvSource::Own)
        .map(|l| l.index)
        .next_back()
}

/// The assistant's buffers that start a draft round, for a round started on the GPU.
pub struct GpuRoundBuffers<'a> {
    /// The token the first draft step embeds (the seed), u32 `[1]`.
    pub token: &'a Tensor,
    /// The first step's input `[embedding * scale, h_prev]`; the seed hidden state goes at
    /// element `seed_hidden_offset`.
    pub input: &'a Tensor,
    pub seed_hidden_offset: usize,
    /// `[value, target KV slot]` u32 each: the RoPE position and the view ends.
    pub rope_position: &'a Tensor,
    pub full_end: &'a Tensor,
    pub sliding_end: &'a Tensor,
}

/// A loaded assistant, bound to the target whose caches its attention reads.
pub struct Assistant {
    pub spec: AssistantSpec,
    io: DraftIo,
    ops: Vec<Op>,
    view: Option<DraftView>,
    routes: HeadRoutes,
    logits_readback: Readback,
    token_readback: Readback,
    /// The target caches the attention kernels were built on (checked before each round).
    bound_caches: Vec<Tensor>,
    target_hidden: usize,
    vocab: usize,
    target_window: usize,
    /// What pipelined rounds and plain steps cost with this pair on this device, kept
    /// from one greedy generation to the next (the adaptive schedule's cost model).
    pub(crate) draft_costs: DraftCosts,
}

impl Assistant {
    /// Reads the assistant's weights from `source`, checks it against `target` (hidden
    /// size, vocabulary, head dims and KV heads of the caches it reads) and builds every
    /// kernel of a draft step. `op_set` must allow the MTP-only operators for a centroid head
    /// (TopK, certified scatter): [`OpSet::with_mtp`].
    pub fn load(
        ctx: &GpuContext,
        source: &dyn WeightSource,
        spec: AssistantSpec,
        target: &KvState,
        op_set: &OpSet,
        options: AssistantOptions,
    ) -> Result<Assistant> {
        let tc = &target.model().spec.config;
        let (ht, vocab) = (tc.hidden_size, tc.vocab_size);
        check_fits_target(&spec, ht, vocab)?;
        let c = &spec.text.config;
        let stores = target_stores(target, &spec.text.layers)?;
        let io = DraftIo::new(ctx, c.hidden_size, ht, vocab)?;
        let view_of = |kind: LayerKind, end| kind_view(target, &stores, kind, end);
        let view = ViewKv {
            sliding: view_of(LayerKind::Sliding, &io.sliding_end),
            full: view_of(LayerKind::Full, &io.full_end),
        };
        let lm_head = lm_head_name(&spec, &|n| source.has(n));
        // The assistant's names are full HF names: its root scope adds no prefix.
        let root = Scope::root(source);
        let weights = AssistantWeights::load(ctx, &root, &spec, options.format, lm_head)?;
        let (ops, routes) = plan_step(
            ctx,
            &StepSource {
                spec: &spec,
                weights: &weights,
                target: target.model().weights(),
                view: &view,
                io: &io,
                source: &root,
                format: options.format,
                op_set,
                lm_head,
            },
        )?;
        let bound_caches = [&view.sliding, &view.full]
            .into_iter()
            .flatten()
            .map(|v| v.cache.chunks()[0].v.clone())
            .collect();
        Ok(Assistant {
            logits_readback: Readback::new(ctx, "assistant.logits", io.logits.byte_size()),
            token_readback: Readback::new(ctx, "assistant.token", 4),
            spec,
            io,
            ops,
            view: None,
            routes,
            bound_caches,
            target_hidden: ht,
            vocab,
            target_window: sliding_window_of(target),
            draft_costs: DraftCosts::default(),
        })
    }
}

/// Refuses an assistant trained for another target's hidden size or vocabulary.
fn check_fits_target(spec: &AssistantSpec, ht: usize, vocab: usize) -> Result<()> {
    if spec.backbone_hidden_size != ht {
        return Err(Error::invalid(
            OP,
            "backbone_hidden_size (must be the target's hidden_size)",
            ht,
            spec.backbone_hidden_size,
        ));
    }
    if spec.text.config.vocab_size != vocab {
        return Err(Error::invalid(
            OP,
            "vocab_size (must be the target's)",
            vocab,
            spec.text.config.vocab_size,
        ));
    }
    Ok(())
}

/// The target K/V each layer kind reads (the target layer storing it), checked against
/// the assistant's layers.
fn target_stores(target: &KvState, layers: &[LayerSpec]) -> Result<Vec<(LayerKind, usize)>> {
    let mut stores: Vec<(LayerKind, usize)> = Vec::new();
    for l in layers {
        let store = target_store(target, l)?;
        if !stores.iter().any(|(k, _)| *k == l.kind) {
            stores.push((l.kind, store));
        }
    }
    Ok(stores)
}

/// The target cache that layers of `kind` read (from `stores`, already checked), how to
/// rebuild its keys from its values on K = V layers, and the view end its rows stop at;
/// None where the assistant has no layer of that kind.
fn kind_view<'t>(
    target: &'t KvState,
    stores: &[(LayerKind, usize)],
    kind: LayerKind,
    end: &'t Tensor,
) -> Option<KindView<'t>> {
    let store = stores.iter().find(|(k, _)| *k == kind)?.1;
    let cache = target.kv_cache(store)?;
    let key_from_v = match (
        &target.model().weights().layers[store].attn.kv,
        cache.config().k_eq_v,
    ) {
        (Some(kv), true) => Some(KeyFromValue {
            k_norm_weight: &kv.k_norm_host,
            rope: rope_config(&target.model().spec.layers[store]),
        }),
        _ => None,
    };
    Some(KindView {
        cache,
        key_from_v,
        end,
    })
}

/// The target's sliding window (`usize::MAX` when it has no sliding layer).
fn sliding_window_of(target: &KvState) -> usize {
    target
        .model()
        .spec
        .layers
        .iter()
        .find_map(|l| l.window)
        .unwrap_or(usize::MAX)
}

/// The lm_head weight's name: the embedding when tied or when no `lm_head.weight` exists
/// (`has`: whether the source holds a tensor).
pub fn lm_head_name(spec: &AssistantSpec, has: &dyn Fn(&str) -> bool) -> &'static str {
    if spec.tied || !has("lm_head.weight") {
        "model.embed_tokens.weight"
    } else {
        "lm_head.weight"
    }
}

/// The target layer whose cache assistant layer `l` reads, checked to match it.
fn target_store(target: &KvState, l: &LayerSpec) -> Result<usize> {
    let store = store_layer(&target.model().spec, l.kind).ok_or_else(|| {
        Error::invalid(
            OP,
            format!(
                "target layer for assistant layer {} ({})",
                l.index,
                l.kind.hf_name()
            ),
            "a target layer of that type owning its K/V",
            "none",
        )
    })?;
    let cache = target.kv_cache(store).ok_or_else(|| {
        Error::invalid(
            OP,
            format!("KV cache of target layer {store}"),
            "allocated",
            "none",
        )
    })?;
    let cfg = cache.config();
    if cfg.head_dim != l.head_dim || cfg.kv_heads != l.num_kv_heads {
        return Err(Error::invalid(
            OP,
            format!(
                "head_dim / KV heads of assistant layer {} ({})",
                l.index,
                l.kind.hf_name()
            ),
            format!(
                "{} / {} (target layer {store}'s cache)",
                cfg.head_dim, cfg.kv_heads
            ),
            format!("{} / {}", l.head_dim, l.num_kv_heads),
        ));
    }
    Ok(store)
}

impl Assistant {
    /// The routes the head was built with.
    pub fn head_routes(&self) -> HeadRoutes {
        self.routes
    }

    /// Dispatches of one draft step.
    pub fn dispatch_count(&self) -> usize {
        self.ops.iter().map(Op::dispatches).sum()
    }

    /// The target's sliding window (the assistant's view of the sliding cache derives from
    /// it); `usize::MAX` for a target without sliding layers.
    pub fn target_window(&self) -> usize {
        self.target_window
    }

    /// The assistant's own sliding window (`usize::MAX` without sliding layers).
    pub fn window(&self) -> usize {
        self.spec
            .text
            .layers
            .iter()
            .find_map(|l| l.window)
            .unwrap_or(usize::MAX)
    }

    /// Whether this assistant's kernels read `target`'s caches (it was loaded for it).
    pub fn is_bound_to(&self, target: &KvState) -> bool {
        self.spec.text.layers.iter().all(|l| {
            store_layer(&target.model().spec, l.kind)
                .and_then(|s| target.kv_cache(s))
                .is_some_and(|c| {
                    self.bound_caches
                        .iter()
                        .any(|b| std::ptr::eq(b.buffer(), c.chunks()[0].v.buffer()))
                })
        })
    }

    /// Sets the K/V view and RoPE position of the next draft steps (queue writes, ordered
    /// before the next submit); `slot` is the KV slot of the target's active sequence
    /// ([`KvState::sequence_slot`]).
    pub fn begin_round(&mut self, ctx: &GpuContext, view: DraftView, slot: usize) {
        let write = |t: &Tensor, v: usize| {
            t.write_bytes(ctx, bytemuck::cast_slice(&[v as u32, slot as u32]))
        };
        write(&self.io.rope_position, view.position);
        write(&self.io.full_end, view.full_end);
        write(&self.io.sliding_end, view.sliding_end);
        self.view = Some(view);
    }

    /// Starts a round whose view buffers were written on the GPU (pipelined greedy rounds:
    /// the speculative commit kernel writes the RoPE position, the view ends and the seed
    /// hidden state, [`Assistant::gpu_round_buffers`]). `bound` is the largest view the round
    /// can have: its ends only size the attention grids (the kernels cut each row's keys
    /// from the position buffers), so a bound costs speed, never correctness.
    pub fn begin_round_on_gpu(&mut self, bound: DraftView) {
        self.view = Some(bound);
    }

    /// The buffers a GPU-resident round start writes (see [`Assistant::begin_round_on_gpu`]).
    pub fn gpu_round_buffers(&self) -> GpuRoundBuffers<'_> {
        GpuRoundBuffers {
            token: &self.io.token,
            input: &self.io.input,
            seed_hidden_offset: self.target_hidden,
            rope_position: &self.io.rope_position,
            full_end: &self.io.full_end,
            sliding_end: &self.io.sliding_end,
        }
    }

    /// Writes the token the next step embeds (the round's seed, or a host-sampled draft).
    pub fn write_token(&self, ctx: &GpuContext, token: u32) -> Result<()> {
        if token as usize >= self.vocab {
            return Err(Error::invalid(
                OP,
                "token to embed",
                format!("< vocab {}", self.vocab),
                token,
            ));
        }
        self.io.token.write_bytes(ctx, bytemuck::bytes_of(&token));
        Ok(())
    }

    /// Records the copy of row `row` of `hidden` (`[rows, target hidden]` f32: the target's
    /// final-normed hidden states of its last forward) into h_prev, for the first step of a
    /// round.
    pub fn record_seed_hidden(&self, step: &mut Step, hidden: &Tensor, row: usize) -> Result<()> {
        let ht = self.target_hidden;
        let rows = hidden.numel() / ht.max(1);
        if hidden.dtype() != DType::F32 || hidden.shape().last() != Some(&ht) || row >= rows {
            return Err(Error::invalid(
                OP,
                "seed hidden state",
                format!("row < rows of an f32 [rows, {ht}] tensor"),
                format!("row {row} of {:?} {:?}", hidden.dtype(), hidden.shape()),
            ));
        }
        let bytes = (ht * 4) as u64;
        step.encoder().copy_buffer_to_buffer(
            hidden.buffer(),
            row as u64 * bytes,
            self.io.input.buffer(),
            bytes,
            bytes,
        );
        Ok(())
    }

    /// Records one draft step: ONE compute pass (embedding .. argmax), then the copy of
    /// post_projection's output into h_prev for the next step. The draft stays in the
    /// token buffer, where the next step embeds it.
    pub fn record_step(&self, step: &mut Step) -> Result<()> {
        let view = self
            .view
            .ok_or_else(|| Error::invalid(OP, "draft view", "set by begin_round", "none"))?;
        let keys = KeyLens {
            sliding: view.sliding_end + 1,
            full: view.full_end + 1,
        };
        let mut recorded = Ok(());
        step.pass(|pass| {
            recorded = self.ops.iter().try_for_each(|op| op.record(pass, 1, keys));
        });
        recorded?;
        let bytes = (self.target_hidden * 4) as u64;
        step.encoder().copy_buffer_to_buffer(
            self.io.h_out.buffer(),
            0,
            self.io.input.buffer(),
            bytes,
            bytes,
        );
        Ok(())
    }

    /// Records the copy of the last step's draft into element `slot` of `ids` (u32: the
    /// verify forward's token ids).
    pub fn record_token_copy(&self, step: &mut Step, ids: &Tensor, slot: usize) -> Result<()> {
        if ids.dtype() != DType::U32 || slot >= ids.numel() {
            return Err(Error::invalid(
                OP,
                "token ids to copy the draft into",
                format!("a u32 tensor with more than {slot} elements"),
                format!("{:?} {:?}", ids.dtype(), ids.shape()),
            ));
        }
        step.encoder().copy_buffer_to_buffer(
            self.io.token.buffer(),
            0,
            ids.buffer(),
            slot as u64 * 4,
            4,
        );
        Ok(())
    }

    /// Records the readback copies of the last step's logits and draft.
    pub fn record_readback(&self, step: &mut Step, logits: bool) -> Result<()> {
        step.copy_to_readback(&self.io.token, &self.token_readback)?;
        if logits {
            step.copy_to_readback(&self.io.logits, &self.logits_readback)?;
        }
        Ok(())
    }

    /// The logits copied by the last [`Assistant::record_readback`] (after its submit).
    pub async fn read_logits(&self, ctx: &GpuContext) -> Result<Vec<f32>> {
        self.logits_readback.read_f32(ctx).await
    }

    /// The draft copied by the last [`Assistant::record_readback`] (after its submit).
    pub async fn read_token(&self, ctx: &GpuContext) -> Result<u32> {
        Ok(self.token_readback.read_u32(ctx).await?[0])
    }

    /// The draft logits tensor `[1, vocab]` (centroid head: unselected entries hold
    /// min(selected) - 1, as HF's).
    pub fn logits(&self) -> &Tensor {
        &self.io.logits
    }
}

/// Loads an assistant from a checkpoint's `config.json` text and weights.
pub fn load_assistant(
    ctx: &GpuContext,
    config_json: &str,
    source: &dyn WeightSource,
    target: &KvState,
    op_set: &OpSet,
    options: AssistantOptions,
) -> Result<Assistant> {
    let spec = parse_assistant_config(config_json)?;
    Assistant::load(ctx, source, spec, target, op_set, options)
}
