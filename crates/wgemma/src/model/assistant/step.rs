//! The kernels of one draft step, built once at load in HF's order: input (embedding +
//! pre_projection), the Q-only decoder layers, final norm + post_projection, the head, the
//! argmax.

use super::config::OP;
use super::view::DraftView;
use super::weights::AssistantWeights;
use crate::error::{Error, Result};
use crate::gpu::{DType, GpuContext, Kernel, Pass, Tensor};
use crate::model::config::{LayerKind, LayerSpec};
use crate::model::geglu_stage::GegluStage;
use crate::model::residual::{
    project, project_geglu, prologue_weight, BlockInput, Pending, Residual,
};
use crate::model::state::KvState;
use crate::model::weights::{LayerWeights, LinearWeight, WeightFormat};
use crate::ops::argmax::argmax;
use crate::ops::attention::{Attention, AttentionInputs, AttentionScratch, KeyFromValue, KvCache};
use crate::ops::embedding::embedding;
use crate::ops::gather::{gather_rows, RowTable};
use crate::ops::linear::Epilogue;
use crate::ops::linear::{dense_linear, Linear};
use crate::ops::min_fill::min_fill;
use crate::ops::opset::OpSet;
use crate::ops::rope::{Rope, RopeKernel, VHeads};
use crate::ops::scatter::{scatter, PermutationCertificate, ScatterRoute};
use crate::ops::topk::{topk, TopKRoute};
use crate::weights::layout::{MatrixData, MatrixLayout};
use crate::weights::source::Scope;

/// One recorded operation of a draft step.
pub(super) enum Op {
    Kernel(Kernel),
    Kernels(Vec<Kernel>),
    Linear(Linear),
    Rope(RopeKernel),
    /// Attention over the target's cache of this layer kind; the grid follows the view.
    Attention(Box<Attention>, LayerKind),
    /// The MLP's gate_up projection with GeGLU (one dispatch, or the projection + GeGLU).
    Geglu(GegluStage),
}

impl Op {
    pub(super) fn record(&self, pass: &mut Pass<'_>, view: &DraftView) -> Result<()> {
        match self {
            Op::Kernel(k) => pass.dispatch(k),
            Op::Kernels(ks) => ks.iter().for_each(|k| pass.dispatch(k)),
            Op::Linear(l) => l.record(pass),
            Op::Rope(r) => r.record(pass, 1)?,
            Op::Geglu(g) => g.record(pass),
            Op::Attention(a, kind) => {
                let end = match kind {
                    LayerKind::Sliding => view.sliding_end,
                    LayerKind::Full => view.full_end,
                };
                a.record(pass, 1, end + 1)?;
            }
        }
        Ok(())
    }

    pub(super) fn dispatches(&self) -> usize {
        match self {
            Op::Kernels(ks) => ks.len(),
            Op::Linear(l) => l.kernels().len(),
            Op::Geglu(GegluStage::Split(l, _)) => l.kernels().len() + 1,
            Op::Geglu(GegluStage::Fused(l)) => l.kernels().len(),
            _ => 1,
        }
    }
}

/// What the head was built with (tests, stats).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeadRoutes {
    /// The TopK route (centroid head only).
    pub topk: Option<TopKRoute>,
    /// The scatter route (centroid head only).
    pub scatter: Option<ScatterRoute>,
}

/// The one-row buffers of a draft step, allocated once.
pub(super) struct Activations {
    /// The token the step embeds, u32 [1]; the step's argmax overwrites it with the draft.
    pub token: Tensor,
    /// concat(target_embed(token) * scale, h_prev) [1, 2 Ht].
    pub input: Tensor,
    /// The residual stream [1, Ha] (two buffers: a norm prologue writes the updated stream
    /// into the one it does not read) and the normed input of a block.
    h: Tensor,
    h_spare: Tensor,
    x: Tensor,
    q: Tensor,
    attn: Tensor,
    o: Tensor,
    gate_up: Tensor,
    act: Tensor,
    /// Final norm output [1, Ha].
    hn: Tensor,
    /// post_projection output [1, Ht]: the next step's h_prev.
    pub h_out: Tensor,
    /// Draft logits [1, vocab].
    pub logits: Tensor,
    /// RoPE position P, and the ends of the full / sliding views (u32 [1] each).
    pub rope_position: Tensor,
    pub full_position: Tensor,
    pub sliding_position: Tensor,
}

impl Activations {
    pub(super) fn new(
        ctx: &GpuContext,
        layers: &[LayerSpec],
        heads: usize,
        ha: usize,
        ht: usize,
        vocab: usize,
    ) -> Result<Activations> {
        let max_d = layers.iter().map(|l| l.head_dim).max().unwrap_or(1);
        let max_i = layers
            .iter()
            .map(|l| l.intermediate_size)
            .max()
            .unwrap_or(1);
        let f32s = |label: &str, shape: &[usize]| Tensor::zeros(ctx, label, shape, DType::F32);
        let u32s = |label: &str| Tensor::zeros(ctx, label, &[1], DType::U32);
        // [position, the target sequence's KV slot]: the attention reads the slot when the
        // target's caches hold several sequences.
        let positions = |label: &str| Tensor::zeros(ctx, label, &[2], DType::U32);
        Ok(Activations {
            token: u32s("assistant.token")?,
            input: f32s("assistant.input", &[1, 2 * ht])?,
            h: f32s("assistant.h", &[1, ha])?,
            h_spare: f32s("assistant.h_spare", &[1, ha])?,
            x: f32s("assistant.x", &[1, ha])?,
            q: f32s("assistant.q", &[heads * max_d])?,
            attn: f32s("assistant.attn", &[heads * max_d])?,
            o: f32s("assistant.o", &[1, ha])?,
            gate_up: f32s("assistant.gate_up", &[2 * max_i])?,
            act: f32s("assistant.act", &[max_i])?,
            hn: f32s("assistant.hn", &[1, ha])?,
            h_out: f32s("assistant.h_out", &[1, ht])?,
            logits: f32s("assistant.logits", &[1, vocab])?,
            rope_position: positions("assistant.rope_position")?,
            full_position: positions("assistant.full_position")?,
            sliding_position: positions("assistant.sliding_position")?,
        })
    }
}

/// The target K/V one layer kind reads: the store layer's cache (and, for K = V caches,
/// what rebuilds keys from values).
pub(super) struct TargetKv<'a> {
    pub cache: &'a KvCache,
    pub key_from_v: Option<KeyFromValue<'a>>,
}

/// Builds the ops of a draft step in order.
pub(super) struct StepBuilder<'a> {
    pub ctx: &'a GpuContext,
    pub weights: &'a AssistantWeights,
    /// The centroid head's own tensors come from here (`token_ordering`, the lm_head rows
    /// in the format's row layout), by full name.
    pub source: &'a Scope<'a>,
    pub format: WeightFormat,
    pub eps: f32,
    /// Assistant hidden size, query heads, target hidden size, vocabulary.
    pub ha: usize,
    pub heads: usize,
    pub ht: usize,
    pub vocab: usize,
    pub a: &'a Activations,
    pub ops: Vec<Op>,
    /// The residual stream between blocks ([`Stream`]).
    pub stream: Stream,
}

/// The residual stream of a draft step as the target's forward runs it
/// ([`crate::model::residual`]): each block's post-norm and residual add wait (pending)
/// and run with the next block's input norm, as the prologue of the Q4 matvec that reads
/// it (no dispatch: Q4 weights whose matvecs take one) or as one `rmsnorm_add_norm`
/// kernel. Values are the unfused ops'.
pub(super) struct Stream {
    /// The buffer holding h, and (prologue mode) the one the next add writes.
    h: Tensor,
    spare: Option<Tensor>,
    /// Branch output, its post-norm weight and the scale of the add.
    pending: Option<(Tensor, Tensor, f32)>,
}

impl Stream {
    pub fn new(a: &Activations) -> Stream {
        Stream {
            h: a.h.clone(),
            spare: Some(a.h_spare.clone()),
            pending: None,
        }
    }
}

impl StepBuilder<'_> {
    /// The input of the next block, `N(h'; w_in)` with h' the stream after the pending
    /// add, handed to `consume` (which builds the block's projection); the norm kernels
    /// it needs are pushed first.
    /// `w` (with `epilogue`) is the projection: a prologue where its matvec takes one, else
    /// kernels (they update h in place, so the two ways mix freely).
    fn block_input<T>(
        &mut self,
        w_in: &Tensor,
        (w, epilogue): (&LinearWeight, Epilogue),
        consume: impl FnOnce(&BlockInput) -> Result<T>,
    ) -> Result<T> {
        let (ctx, a, eps) = (self.ctx, self.a, self.eps);
        let st = &self.stream;
        let mut residual = match &st.spare {
            Some(spare) if prologue_weight(ctx, 1, w, epilogue).is_some() => {
                Residual::prologues(ctx, &st.h, spare, &a.x, eps)
            }
            _ => Residual::kernels(ctx, &st.h, &a.x, eps),
        };
        let prologue = residual.uses_prologues();
        if let Some((branch, weight, scale)) = &st.pending {
            residual.add(Pending {
                branch,
                weight,
                scale: *scale,
            })?;
        }
        let mut kernels = Vec::new();
        let input = residual.input(Some(w_in), &mut kernels)?;
        let out = consume(&input)?;
        residual.commit();
        let h = residual.h().clone();
        if !kernels.is_empty() {
            self.ops.push(Op::Kernels(kernels));
        }
        let st = &mut self.stream;
        if st.pending.take().is_some() && prologue {
            st.spare = Some(std::mem::replace(&mut st.h, h));
        }
        Ok(out)
    }

    /// Queues `h = (h + N(branch; weight)) * scale` for the next block's input.
    fn add(&mut self, branch: &Tensor, weight: Tensor, scale: f32) {
        self.stream.pending = Some((branch.clone(), weight, scale));
    }

    /// `h = pre_projection(concat(target_embed(token) * scale, h_prev))`: the embedding
    /// writes the first half of `input`; h_prev is copied into the second half between passes.
    pub fn input(&mut self, target: &KvState) -> Result<()> {
        let (ctx, a, ht) = (self.ctx, self.a, self.ht);
        let tw = target.model().weights();
        self.ops.push(Op::Kernels(embedding(
            ctx,
            &tw.embed_tokens,
            &a.token,
            &a.input.prefix_view(&[1, ht])?,
            tw.embed_scale,
        )?));
        let pre = &self.weights.pre_projection;
        self.ops.push(Op::Linear(pre.linear(ctx, &a.input, &a.h)?));
        Ok(())
    }

    /// One decoder layer (HF `Gemma4TextDecoderLayer` of a KV-shared layer): Q-only
    /// attention over the target's K/V, then the MLP, `layer_scalar` on the layer output.
    pub fn layer(
        &mut self,
        l: &LayerSpec,
        w: &LayerWeights,
        kv: &TargetKv<'_>,
        rope: &Rope,
        scratch: &AttentionScratch,
    ) -> Result<()> {
        let (ctx, a, eps, nh) = (self.ctx, self.a, self.eps, self.heads);
        let (d, i) = (l.head_dim, l.intermediate_size);
        let q = a.q.prefix_view(&[1, nh, d])?;
        let attn = a.attn.prefix_view(&[1, nh, d])?;

        // Self-attention: queries only; keys and values are the target's.
        let (q_proj, q_norm) = (&w.attn.q_proj, &w.attn.q_norm);
        let (positions, window) = match l.kind {
            LayerKind::Sliding => (
                &a.sliding_position,
                // HF's flipped bidirectional window keeps W + 1 rows.
                Some(l.window.unwrap_or(usize::MAX - 1) + 1),
            ),
            LayerKind::Full => (&a.full_position, None),
        };
        let q_flat = q.reshaped(&[1, nh * d])?;
        let q_linear =
            self.block_input(&w.attn.input_layernorm, (q_proj, Epilogue::None), |input| {
                project(ctx, input, q_proj, &q_flat, true)
            })?;
        self.ops.push(Op::Linear(q_linear));
        // q_norm and RoPE in one dispatch.
        self.ops.push(Op::Rope(rope.norm_rope(
            ctx,
            &a.rope_position,
            (&q, q_norm),
            None,
            VHeads::None,
            eps,
        )?));
        self.ops.push(Op::Attention(
            Box::new(Attention::with_window(
                ctx,
                AttentionInputs {
                    fold_q: None,
                    q: &q,
                    positions,
                    cache: kv.cache,
                    out: &attn,
                    key_from_v: kv.key_from_v,
                },
                scratch,
                window,
            )?),
            l.kind,
        ));
        self.ops.push(Op::Linear(w.attn.o_proj.linear(
            ctx,
            &attn.reshaped(&[1, nh * d])?,
            &a.o,
        )?));
        self.add(&a.o, w.attn.post_attention_layernorm.clone(), 1.0);

        // MLP: gate_proj and up_proj stacked [2I, H], GeGLU, down_proj.
        let gate_up_proj = &w.mlp.gate_up_proj;
        let gate_up_rows = a.gate_up.prefix_view(&[1, 2 * i])?;
        let act = a.act.prefix_view(&[1, i])?;
        let geglu = self.block_input(
            &w.mlp.pre_feedforward_layernorm,
            (gate_up_proj, Epilogue::GegluPairs),
            |input| project_geglu(ctx, input, gate_up_proj, &act, &gate_up_rows),
        )?;
        self.ops.push(Op::Geglu(geglu));
        self.ops
            .push(Op::Linear(w.mlp.down_proj.linear(ctx, &act, &a.o)?));
        // layer_scalar multiplies the whole layer output: fused into the residual add.
        let post = w.mlp.post_feedforward_layernorm.clone();
        self.add(&a.o, post, w.layer_scalar);
        Ok(())
    }

    /// `hn = norm(h)`; `h_out = post_projection(hn)` (the next step's h_prev).
    pub fn output(&mut self) -> Result<()> {
        let (ctx, a) = (self.ctx, self.a);
        let norm = &self.weights.norm;
        // The last layer's add and the final norm: one kernel (the head reads hn itself).
        let st = &self.stream;
        let mut residual = Residual::kernels(ctx, &st.h, &a.x, self.eps);
        if let Some((branch, weight, scale)) = &st.pending {
            residual.add(Pending {
                branch,
                weight,
                scale: *scale,
            })?;
        }
        let finish = residual
            .finish(Some((norm, &a.hn)))?
            .expect("a final norm gives a kernel");
        self.ops.push(Op::Kernel(finish));
        self.stream.pending = None;
        let post = &self.weights.post_projection;
        self.ops
            .push(Op::Linear(post.linear(ctx, &a.hn, &a.h_out)?));
        Ok(())
    }

    /// `logits = lm_head(hn)` over the whole vocabulary (no softcap: HF's assistant has
    /// none).
    pub fn dense_head(&mut self) -> Result<HeadRoutes> {
        self.ops.push(Op::Linear(self.weights.head.linear(
            self.ctx,
            &self.a.hn,
            &self.a.logits,
        )?));
        Ok(HeadRoutes {
            topk: None,
            scatter: None,
        })
    }

    /// HF `Gemma4AssistantMaskedEmbedder`: centroid logits -> TopK clusters -> their
    /// `token_ordering` rows (token ids, certified distinct by the permutation) -> those
    /// lm_head rows . hn -> a vocab row filled with min(selected) - 1 -> scatter.
    pub fn centroid_head(
        &mut self,
        op_set: &OpSet,
        lm_head: &str,
        num_centroids: usize,
        top_k: usize,
    ) -> Result<HeadRoutes> {
        let (ctx, a, ha, vocab) = (self.ctx, self.a, self.ha, self.vocab);
        let per = vocab / num_centroids;
        let selected = top_k * per;
        let f32s = |label: &str, shape: &[usize]| Tensor::zeros(ctx, label, shape, DType::F32);

        let centroids = &self.weights.head;
        let centroid_logits = f32s("assistant.centroid_logits", &[1, num_centroids])?;
        self.ops.push(Op::Linear(centroids.linear(
            ctx,
            &a.hn,
            &centroid_logits,
        )?));
        let top_values = f32s("assistant.top_values", &[1, top_k])?;
        let top_indices = Tensor::zeros(ctx, "assistant.top_indices", &[1, top_k], DType::U32)?;
        let top = topk(ctx, op_set, &centroid_logits, &top_values, &top_indices)?;
        let topk_route = top.route;
        self.ops.push(Op::Kernel(top.kernel));

        let ordering = token_ordering(self.source, vocab)?;
        let certificate = PermutationCertificate::verify_and_upload(
            ctx,
            TOKEN_ORDERING,
            &ordering,
            num_centroids,
            per,
        )?;
        let ids = Tensor::zeros(ctx, "assistant.selected_ids", &[1, selected], DType::U32)?;
        let (select, unique) = certificate.select_rows(ctx, &top.distinct, &ids)?;
        self.ops.push(Op::Kernels(select));

        // The selected lm_head rows: a row table (f32 weights stay f32, else f16), gathered
        // and dotted with hn.
        let table = self.lm_head_table(lm_head)?;
        let rows_dtype = if table.dtype() == DType::F16 && ha % 2 != 0 {
            DType::F32
        } else {
            table.dtype()
        };
        let rows = Tensor::zeros(ctx, "assistant.selected_rows", &[selected, ha], rows_dtype)?;
        self.ops
            .push(Op::Kernels(gather_rows(ctx, &table, &ids, &rows)?.kernels));
        let selected_logits = f32s("assistant.selected_logits", &[1, selected])?;
        self.ops.push(Op::Linear(dense_linear(
            ctx,
            &a.hn,
            &rows,
            &selected_logits,
        )?));
        self.ops
            .push(Op::Kernel(min_fill(ctx, &selected_logits, &a.logits)?));
        let scattered = scatter(
            ctx,
            op_set,
            &a.logits,
            &ids,
            &selected_logits,
            Some(&unique),
        )?;
        let scatter_route = scattered.route;
        self.ops.push(Op::Kernels(scattered.kernels));
        Ok(HeadRoutes {
            topk: Some(topk_route),
            scatter: Some(scatter_route),
        })
    }

    fn lm_head_table(&self, name: &str) -> Result<RowTable> {
        let (vocab, ha) = (self.vocab, self.ha);
        let layout = lm_head_rows_layout(self.format);
        // The lm_head itself, or the rows stored apart under LM_HEAD_ROWS (an artifact).
        let raw = self
            .source
            .matrix_tensors(LM_HEAD_ROWS, &[name], vocab, ha)?
            .pop()
            .ok_or_else(|| {
                Error::invalid(OP, format!("`{LM_HEAD_ROWS}`"), "a stored tensor", "none")
            })?;
        let m = raw.host_matrix(vocab, ha, layout)?;
        m.validate(LM_HEAD_ROWS)?;
        let (dtype, bytes): (DType, &[u8]) = match &m.data {
            MatrixData::F32(w) => (DType::F32, bytemuck::cast_slice(w)),
            MatrixData::F16(w) => (DType::F16, bytemuck::cast_slice(w)),
            MatrixData::Q4 { .. } => {
                return Err(Error::invalid(
                    OP,
                    format!("layout of `{LM_HEAD_ROWS}`"),
                    format!("{layout:?}"),
                    format!("{:?}", m.layout()),
                ))
            }
        };
        RowTable::upload(
            self.ctx,
            "assistant.lm_head",
            [vocab, ha],
            dtype,
            bytes,
            None,
        )
    }

    /// The greedy draft, written over the token the step embedded.
    pub fn argmax(&mut self) -> Result<()> {
        self.ops.push(Op::Kernels(argmax(
            self.ctx,
            &self.a.logits,
            &self.a.token,
        )?));
        Ok(())
    }
}

/// The centroid head's permutation of the vocabulary into clusters.
pub const TOKEN_ORDERING: &str = "masked_embedding.token_ordering";

/// The name the centroid head's lm_head row table is prepared under (an artifact stores
/// it apart from a Q4 lm_head: the gather reads dense rows).
pub const LM_HEAD_ROWS: &str = "lm_head_rows";

/// The centroid head's lm_head rows: f32 for f32 weights, else f16.
pub fn lm_head_rows_layout(format: WeightFormat) -> MatrixLayout {
    match format {
        WeightFormat::F32 => MatrixLayout::F32,
        _ => MatrixLayout::F16,
    }
}

/// `masked_embedding.token_ordering` as u32, every entry checked to be in `0..vocab` (the
/// permutation check itself is [`PermutationCertificate::verify_and_upload`]'s).
fn token_ordering(source: &Scope<'_>, vocab: usize) -> Result<Vec<u32>> {
    let name = TOKEN_ORDERING;
    source
        .i64(name, &[vocab])?
        .into_iter()
        .enumerate()
        .map(|(i, v)| {
            u32::try_from(v)
                .ok()
                .filter(|&t| (t as usize) < vocab)
                .ok_or_else(|| {
                    Error::invalid(
                        OP,
                        format!("`{name}`[{i}] (a permutation of 0..{vocab})"),
                        format!("0..{vocab}"),
                        v,
                    )
                })
        })
        .collect()
}
