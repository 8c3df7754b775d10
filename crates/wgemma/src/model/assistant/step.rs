//! The plan of one draft step, built once at load in HF's order: the input (embedding +
//! pre_projection), the decoder layers through the target's own blocks
//! (`model/blocks/`) in their queries-only mode (each layer attends to the target's K/V
//! through the round's view), the final norm + post_projection, the head
//! ([`super::head`]) and the argmax.

use super::config::{AssistantHead, AssistantSpec, OP};
use super::head::{HeadBuilder, HeadRoutes};
use super::io::DraftIo;
use super::weights::AssistantWeights;
use crate::error::{Error, Result};
use crate::gpu::GpuContext;
use crate::model::blocks::{BlockCx, KvAccess, ViewKv};
use crate::model::forward::{decoder_layer, prologues_fit};
use crate::model::plan_options::PlanOptions;
use crate::model::plan_parts::{Activations, Op, Shared};
use crate::model::residual::Residual;
use crate::model::weights::{WeightFormat, Weights};
use crate::ops::argmax::argmax;
use crate::ops::embedding::embedding;
use crate::ops::opset::OpSet;
use crate::weights::source::Scope;

/// What a draft step's plan is built from.
pub(super) struct StepSource<'a> {
    pub spec: &'a AssistantSpec,
    pub weights: &'a AssistantWeights,
    /// The target's weights: the step embeds with its table.
    pub target: &'a Weights,
    /// The target's K/V each layer kind reads, ending at `io`'s view ends.
    pub view: &'a ViewKv<'a>,
    pub io: &'a DraftIo,
    /// The centroid head's own tensors (by full name) and the format of its row table.
    pub source: &'a Scope<'a>,
    pub format: WeightFormat,
    /// The operators a centroid head may use (TopK, certified scatter).
    pub op_set: &'a OpSet,
    pub lm_head: &'a str,
}

/// Every op of one draft step, in order, and the routes its head took.
pub(super) fn plan_step(ctx: &GpuContext, s: &StepSource<'_>) -> Result<(Vec<Op>, HeadRoutes)> {
    let (text, io) = (&s.spec.text, s.io);
    let (ha, ht) = (text.config.hidden_size, s.spec.backbone_hidden_size);
    let eps = text.config.rms_norm_eps as f32;
    let a = Activations::new(ctx, text, 1, false)?;
    let shared = Shared::new(ctx, text)?;
    // The assistant's plan takes the default fusions whatever the target's are: its
    // queries-only layers fold nothing, and its norms are prologues where its linears take
    // them.
    let options = PlanOptions::default();
    let cx = BlockCx {
        ctx,
        spec: text,
        kv: KvAccess::QueriesOnly(s.view),
        shared: &shared,
        a: &a,
        positions: &io.rope_position,
        m: 1,
        eps,
        options,
    };
    let mut ops = Vec::new();
    // h = pre_projection(concat(target_embed(token) * scale, h_prev)): the embedding writes
    // the first half of `input`; h_prev is copied into the second half between passes.
    ops.push(Op::Kernels(embedding(
        ctx,
        &s.target.embed_tokens,
        &io.token,
        &io.input.prefix_view(&[1, ht])?,
        s.target.embed_scale,
    )?));
    let pre = &s.weights.pre_projection;
    ops.push(Op::Linear(pre.linear(ctx, &io.input, &a.h)?));

    let prologues = options.norm_prologues(1) && prologues_fit(ctx, text, &s.weights.layers, 1);
    let mut residual = if prologues {
        Residual::prologues(ctx, &a.h, &a.h_spare, &a.x, eps)
    } else {
        Residual::kernels(ctx, &a.h, &a.x, eps)
    };
    for (l, w) in text.layers.iter().zip(&s.weights.layers) {
        decoder_layer(&cx, l, w, &mut residual, &mut ops)?;
    }
    // hn = norm(h) with the last layer's add, one kernel (the head reads hn itself);
    // h_out = post_projection(hn), the next step's h_prev.
    let finish = residual
        .finish(Some((&s.weights.norm, &io.hn)))?
        .ok_or_else(|| Error::invalid(OP, "final norm kernel", "one", "none"))?;
    ops.push(Op::Kernel(finish));
    let post = &s.weights.post_projection;
    ops.push(Op::Linear(post.linear(ctx, &io.hn, &io.h_out)?));

    let mut head = HeadBuilder {
        ctx,
        weights: s.weights,
        source: s.source,
        format: s.format,
        ha,
        vocab: text.config.vocab_size,
        io,
        ops: &mut ops,
    };
    let routes = match s.spec.head {
        AssistantHead::Dense => head.dense_head()?,
        AssistantHead::Centroids {
            num_centroids,
            top_k,
        } => head.centroid_head(s.op_set, s.lm_head, num_centroids, top_k)?,
    };
    // The greedy draft, written over the token the step embedded.
    ops.push(Op::Kernels(argmax(ctx, &io.logits, &io.token)?));
    Ok((ops, routes))
}
