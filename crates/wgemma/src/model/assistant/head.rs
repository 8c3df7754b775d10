//! The assistant's output head, planned after its final norm: the dense lm_head (26B /
//! 31B), or the centroid head (E2B / E4B: HF `Gemma4AssistantMaskedEmbedder`), both
//! writing the draft logits the argmax reads.

use super::config::OP;
use super::io::DraftIo;
use super::weights::AssistantWeights;
use crate::error::{Error, Result};
use crate::gpu::{DType, GpuContext, Tensor};
use crate::model::plan_parts::Op;
use crate::model::weights::WeightFormat;
use crate::ops::gather::{gather_rows, RowTable};
use crate::ops::linear::dense_linear;
use crate::ops::min_fill::min_fill;
use crate::ops::opset::OpSet;
use crate::ops::scatter::{scatter, PermutationCertificate, ScatterRoute};
use crate::ops::topk::{topk, TopKRoute};
use crate::weights::layout::{MatrixData, MatrixLayout};
use crate::weights::source::Scope;

/// What the head was built with (tests, stats).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeadRoutes {
    /// The TopK route (centroid head only).
    pub topk: Option<TopKRoute>,
    /// The scatter route (centroid head only).
    pub scatter: Option<ScatterRoute>,
}

/// Plans a head's kernels into `ops`, after the final norm wrote `io.hn`.
pub(super) struct HeadBuilder<'a, 'o> {
    pub ctx: &'a GpuContext,
    pub weights: &'a AssistantWeights,
    /// The centroid head's own tensors come from here (`token_ordering`, the lm_head rows
    /// in the format's row layout), by full name.
    pub source: &'a Scope<'a>,
    pub format: WeightFormat,
    /// Assistant hidden size and vocabulary.
    pub ha: usize,
    pub vocab: usize,
    pub io: &'a DraftIo,
    pub ops: &'o mut Vec<Op>,
}

impl HeadBuilder<'_, '_> {
    /// `logits = lm_head(hn)` over the whole vocabulary (no softcap: HF's assistant has
    /// none).
    pub fn dense_head(&mut self) -> Result<HeadRoutes> {
        self.ops.push(Op::Linear(self.weights.head.linear(
            self.ctx,
            &self.io.hn,
            &self.io.logits,
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
        let (ctx, io, ha, vocab) = (self.ctx, self.io, self.ha, self.vocab);
        let per = vocab / num_centroids;
        let selected = top_k * per;
        let f32s = |label: &str, shape: &[usize]| Tensor::zeros(ctx, label, shape, DType::F32);

        let centroids = &self.weights.head;
        let centroid_logits = f32s("assistant.centroid_logits", &[1, num_centroids])?;
        self.ops.push(Op::Linear(centroids.linear(
            ctx,
            &io.hn,
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
            &io.hn,
            &rows,
            &selected_logits,
        )?));
        self.ops
            .push(Op::Kernel(min_fill(ctx, &selected_logits, &io.logits)?));
        let scattered = scatter(
            ctx,
            op_set,
            &io.logits,
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
