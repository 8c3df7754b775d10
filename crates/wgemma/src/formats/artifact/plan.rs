//! What an artifact holds for a model: every weight the loaders upload, under the name
//! they ask for it by, in the layout they upload it in. The plan mirrors
//! [`Weights::load`](crate::model::weights::Weights::load) and the assistant's step
//! builder; the round-trip tests load every golden fixture from an artifact, so a weight
//! the loader asks for that the plan lacks fails there (and the contract check refuses an
//! artifact holding a tensor the plan does not name).

use crate::model::assistant::{lm_head_rows_layout, AssistantHead, AssistantSpec, LM_HEAD_ROWS};
use crate::model::config::{KvSource, ModelSpec};
use crate::model::weights::WeightFormat;
use crate::ops::moe::ExpertFormat;
use crate::weights::layout::MatrixLayout;
use crate::weights::layout::MatrixUse;
use safetensors::Dtype;

/// How a planned weight is stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Prep {
    /// f32 as in the checkpoint (norm weights, scales, `layer_scalar`), of this shape.
    F32 { shape: Vec<usize> },
    /// A `[n, k]` matrix stacked from the row blocks of `parts`, in `layout`.
    Matrix {
        n: usize,
        k: usize,
        layout: MatrixLayout,
        usage: MatrixUse,
    },
    /// u32 of this length (the assistant's `token_ordering`, checked at load again).
    U32 { len: usize },
}

/// One weight the loader uploads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedWeight {
    /// The name the loader asks for.
    pub name: String,
    /// The checkpoint tensors it comes from, with their shapes (row blocks, in order).
    pub parts: Vec<(String, Vec<usize>)>,
    pub prep: Prep,
}

/// One tensor of the artifact file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredTensor {
    pub name: String,
    pub dtype: Dtype,
    pub shape: Vec<usize>,
}

impl StoredTensor {
    pub fn byte_len(&self) -> usize {
        self.shape.iter().product::<usize>() * self.dtype.bitsize() / 8
    }
}

/// Suffixes of a Q4 matrix's two tensors.
pub const Q4_PACKED: &str = ".q4_packed";
pub const Q4_SCALES: &str = ".q4_scales";

impl PlannedWeight {
    /// The artifact tensors of this weight, named `prefix + name` (+ the Q4 suffixes).
    pub fn stored(&self, prefix: &str) -> Vec<StoredTensor> {
        let name = format!("{prefix}{}", self.name);
        let one = |name: String, dtype, shape| vec![StoredTensor { name, dtype, shape }];
        match &self.prep {
            Prep::F32 { shape } => one(name, Dtype::F32, shape.clone()),
            Prep::U32 { len } => one(name, Dtype::U32, vec![*len]),
            Prep::Matrix { n, k, layout, .. } => match *layout {
                MatrixLayout::F32 => one(name, Dtype::F32, vec![*n, *k]),
                MatrixLayout::F16 => one(name, Dtype::F16, vec![*n, *k]),
                MatrixLayout::Q4 { group } => {
                    let (packed, scales) = MatrixLayout::q4_words(*n, *k, group);
                    vec![
                        StoredTensor {
                            name: format!("{name}{Q4_PACKED}"),
                            dtype: Dtype::U32,
                            shape: vec![*n, packed / n],
                        },
                        StoredTensor {
                            name: format!("{name}{Q4_SCALES}"),
                            dtype: Dtype::U32,
                            shape: vec![scales],
                        },
                    ]
                }
            },
        }
    }
}

/// The layout of MoE experts: the format's own, as [`ExpertHost::from_f32`] makes it.
///
/// [`ExpertHost::from_f32`]: crate::ops::moe::ExpertHost::from_f32
pub fn expert_layout(format: ExpertFormat) -> MatrixLayout {
    match format {
        ExpertFormat::F32 => MatrixLayout::F32,
        ExpertFormat::F16 => MatrixLayout::F16,
        ExpertFormat::Q4 { group } => MatrixLayout::Q4 { group },
    }
}

struct Planner<'a> {
    format: WeightFormat,
    has: &'a dyn Fn(&str) -> bool,
    out: Vec<PlannedWeight>,
}

impl Planner<'_> {
    fn vector(&mut self, name: &str, len: usize) {
        self.f32(name, vec![len]);
    }

    fn f32(&mut self, name: &str, shape: Vec<usize>) {
        self.out.push(PlannedWeight {
            name: name.to_string(),
            parts: vec![(name.to_string(), shape.clone())],
            prep: Prep::F32 { shape },
        });
    }

    fn matrix(&mut self, name: &str, parts: &[&str], n: usize, k: usize, usage: MatrixUse) {
        let layout = MatrixLayout::of(self.format, k);
        self.matrix_in(name, parts, n, k, usage, layout);
    }

    fn matrix_in(
        &mut self,
        name: &str,
        parts: &[&str],
        n: usize,
        k: usize,
        usage: MatrixUse,
        layout: MatrixLayout,
    ) {
        let rows = n / parts.len().max(1);
        self.out.push(PlannedWeight {
            name: name.to_string(),
            parts: parts
                .iter()
                .map(|p| (p.to_string(), vec![rows, k]))
                .collect(),
            prep: Prep::Matrix {
                n,
                k,
                layout,
                usage,
            },
        });
    }

    fn linear(&mut self, name: &str, n: usize, k: usize) {
        self.matrix(name, &[name], n, k, MatrixUse::Linear);
    }

    fn experts(&mut self, name: &str, experts: usize, n: usize, k: usize) {
        let layout = expert_layout(self.format.expert_format());
        self.out.push(PlannedWeight {
            name: name.to_string(),
            parts: vec![(name.to_string(), vec![experts, n, k])],
            prep: Prep::Matrix {
                n: experts * n,
                k,
                layout,
                usage: MatrixUse::Experts { experts },
            },
        });
    }

    fn optional_scalar(&mut self, name: &str) {
        if (self.has)(name) {
            self.f32(name, vec![1]);
        }
    }
}

/// The target's weights in `format` (`has` says which optional tensors the source holds:
/// `layer_scalar`).
pub fn target_plan(
    spec: &ModelSpec,
    format: WeightFormat,
    has: &dyn Fn(&str) -> bool,
) -> Vec<PlannedWeight> {
    let c = &spec.config;
    let (h, v, nh) = (c.hidden_size, c.vocab_size, c.num_attention_heads);
    let mut p = Planner {
        format,
        has,
        out: Vec::new(),
    };
    let embed = "embed_tokens.weight";
    p.matrix(embed, &[embed], v, h, MatrixUse::TableAndLinear);
    if spec.ple_dim > 0 {
        let width = spec.layers.len() * spec.ple_dim;
        let table = "embed_tokens_per_layer.weight";
        p.matrix(table, &[table], v, width, MatrixUse::Table);
        p.linear("per_layer_model_projection.weight", width, h);
        p.vector("per_layer_projection_norm.weight", spec.ple_dim);
    }
    for l in &spec.layers {
        let n = |name: &str| format!("layers.{}.{name}", l.index);
        let (d, i) = (l.head_dim, l.intermediate_size);
        if l.kv == KvSource::Own {
            p.vector(&n("self_attn.k_norm.weight"), d);
            p.linear(&n("self_attn.k_proj.weight"), l.num_kv_heads * d, h);
            if !l.k_eq_v {
                p.linear(&n("self_attn.v_proj.weight"), l.num_kv_heads * d, h);
            }
        }
        p.matrix(
            &n("mlp.gate_up_proj"),
            &[&n("mlp.gate_proj.weight"), &n("mlp.up_proj.weight")],
            2 * i,
            h,
            MatrixUse::Linear,
        );
        if spec.ple_dim > 0 {
            p.linear(&n("per_layer_input_gate.weight"), spec.ple_dim, h);
            p.linear(&n("per_layer_projection.weight"), h, spec.ple_dim);
            p.vector(&n("post_per_layer_input_norm.weight"), h);
        }
        if let Some(m) = spec.moe {
            p.linear(&n("router.proj.weight"), m.num_experts, h);
            p.vector(&n("router.scale"), h);
            p.vector(&n("router.per_expert_scale"), m.num_experts);
            let e = m.num_experts;
            p.experts(&n("experts.gate_up_proj"), e, 2 * m.intermediate_size, h);
            p.experts(&n("experts.down_proj"), e, h, m.intermediate_size);
            p.vector(&n("pre_feedforward_layernorm_2.weight"), h);
            p.vector(&n("post_feedforward_layernorm_1.weight"), h);
            p.vector(&n("post_feedforward_layernorm_2.weight"), h);
        }
        p.optional_scalar(&n("layer_scalar"));
        p.vector(&n("input_layernorm.weight"), h);
        p.linear(&n("self_attn.q_proj.weight"), nh * d, h);
        p.vector(&n("self_attn.q_norm.weight"), d);
        p.linear(&n("self_attn.o_proj.weight"), h, nh * d);
        p.vector(&n("post_attention_layernorm.weight"), h);
        p.vector(&n("pre_feedforward_layernorm.weight"), h);
        p.linear(&n("mlp.down_proj.weight"), h, i);
        p.vector(&n("post_feedforward_layernorm.weight"), h);
    }
    p.vector("norm.weight", h);
    p.out
}

/// The assistant's weights in `format`, by full name (`has`: `layer_scalar`, an untied
/// `lm_head.weight`).
pub fn assistant_plan(
    spec: &AssistantSpec,
    format: WeightFormat,
    has: &dyn Fn(&str) -> bool,
) -> Vec<PlannedWeight> {
    let c = &spec.text.config;
    let (ha, nh, vocab) = (c.hidden_size, c.num_attention_heads, c.vocab_size);
    let ht = spec.backbone_hidden_size;
    let mut p = Planner {
        format,
        has,
        out: Vec::new(),
    };
    p.linear("pre_projection.weight", ha, 2 * ht);
    for l in &spec.text.layers {
        let n = |name: &str| format!("model.layers.{}.{name}", l.index);
        let (d, i) = (l.head_dim, l.intermediate_size);
        p.vector(&n("input_layernorm.weight"), ha);
        p.linear(&n("self_attn.q_proj.weight"), nh * d, ha);
        p.vector(&n("self_attn.q_norm.weight"), d);
        p.linear(&n("self_attn.o_proj.weight"), ha, nh * d);
        p.vector(&n("post_attention_layernorm.weight"), ha);
        p.vector(&n("pre_feedforward_layernorm.weight"), ha);
        p.matrix(
            &n("mlp.gate_up_proj"),
            &[&n("mlp.gate_proj.weight"), &n("mlp.up_proj.weight")],
            2 * i,
            ha,
            MatrixUse::Linear,
        );
        p.linear(&n("mlp.down_proj.weight"), ha, i);
        p.vector(&n("post_feedforward_layernorm.weight"), ha);
        p.optional_scalar(&n("layer_scalar"));
    }
    p.vector("model.norm.weight", ha);
    p.linear("post_projection.weight", ht, ha);
    let lm_head = if spec.tied || !has("lm_head.weight") {
        "model.embed_tokens.weight"
    } else {
        "lm_head.weight"
    };
    match spec.head {
        AssistantHead::Dense => p.linear(lm_head, vocab, ha),
        AssistantHead::Centroids { num_centroids, .. } => {
            p.linear("masked_embedding.centroids.weight", num_centroids, ha);
            let ordering = "masked_embedding.token_ordering";
            p.out.push(PlannedWeight {
                name: ordering.to_string(),
                parts: vec![(ordering.to_string(), vec![vocab])],
                prep: Prep::U32 { len: vocab },
            });
            p.matrix_in(
                LM_HEAD_ROWS,
                &[lm_head],
                vocab,
                ha,
                MatrixUse::Rows,
                lm_head_rows_layout(format),
            );
        }
    }
    p.out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::synthetic::SyntheticShape;

    #[test]
    fn e2b_plan_shares_the_embedding_and_stacks_gate_up() {
        let spec = SyntheticShape::E2b.spec();
        let plan = target_plan(&spec, WeightFormat::Q4 { group: 32 }, &|_| false);
        let embed = &plan[0];
        assert_eq!(embed.name, "embed_tokens.weight");
        let stored = embed.stored("target.");
        assert_eq!(stored.len(), 2);
        assert_eq!(stored[0].name, "target.embed_tokens.weight.q4_packed");
        assert_eq!(stored[0].shape, vec![262144, 1536 / 8]);
        assert_eq!(stored[1].shape, vec![262144 * 1536 / 32 / 2]);
        let gate_up = plan
            .iter()
            .find(|w| w.name == "layers.0.mlp.gate_up_proj")
            .unwrap();
        assert_eq!(gate_up.parts.len(), 2);
        assert_eq!(gate_up.parts[1].1, vec![6144, 1536]);
        // KV-shared layers own no k/v projections.
        assert!(!plan
            .iter()
            .any(|w| w.name == "layers.34.self_attn.k_proj.weight"));
        assert!(!plan.iter().any(|w| w.name.ends_with("layer_scalar")));
        let names: std::collections::HashSet<_> = plan.iter().map(|w| &w.name).collect();
        assert_eq!(names.len(), plan.len(), "names are unique");
    }
}
