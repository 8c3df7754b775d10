//! What an artifact holds for a model: every weight the loaders upload, under the name
//! they ask for it by, in the layout they upload it in. The plan is the models' weight
//! declarations ([`Weights::tensors`], [`assistant_tensors`]), which the loads read too,
//! and the centroid head's own tensors; the round-trip tests load every golden fixture
//! from an artifact, so a weight the loader asks for that the plan lacks fails there (and
//! the contract check refuses an artifact holding a tensor the plan does not name).

use crate::model::assistant::{
    assistant_tensors, lm_head_name, lm_head_rows_layout, AssistantHead, AssistantSpec,
    LM_HEAD_ROWS, TOKEN_ORDERING,
};
use crate::model::config::ModelSpec;
use crate::model::weights::{WeightFormat, Weights};
use crate::weights::declared::{TensorDecl, TensorKind};
use crate::weights::ggml::GgmlType;
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
    /// A `[n, k]` matrix in ggml blocks of `ty` exactly as its GGUF file stores them (an
    /// artifact converted with the file's own types): one U8 tensor `[n, row bytes]`.
    Ggml {
        n: usize,
        k: usize,
        ty: GgmlType,
        usage: MatrixUse,
    },
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

/// The suffix of a matrix stored in ggml blocks of `ty` (`.ggml_q6_k`).
pub fn ggml_suffix(ty: GgmlType) -> String {
    format!(".ggml_{}", format!("{ty:?}").to_lowercase())
}

/// Which ggml type a matrix is stored in, by its name and its parts' names (None: the
/// load format's layout).
pub type NativeType<'f> = &'f dyn Fn(&str, &[String]) -> Option<GgmlType>;

impl PlannedWeight {
    /// The artifact tensors of this weight, named `prefix + name` (+ the Q4 suffixes).
    pub fn stored(&self, prefix: &str) -> Vec<StoredTensor> {
        let name = format!("{prefix}{}", self.name);
        let one = |name: String, dtype, shape| vec![StoredTensor { name, dtype, shape }];
        match &self.prep {
            Prep::F32 { shape } => one(name, Dtype::F32, shape.clone()),
            Prep::U32 { len } => one(name, Dtype::U32, vec![*len]),
            Prep::Ggml { n, k, ty, .. } => one(
                format!("{name}{}", ggml_suffix(*ty)),
                Dtype::U8,
                vec![*n, ty.bytes_of(*k)],
            ),
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

pub use crate::weights::raw::expert_layout;

/// The planned weight of a declaration (`has`: whether the source holds an optional
/// tensor; None for one it lacks).
pub fn planned(
    d: &TensorDecl,
    format: WeightFormat,
    has: &dyn Fn(&str) -> bool,
    native: NativeType<'_>,
) -> Option<PlannedWeight> {
    let one = |shape: Vec<usize>| vec![(d.name.clone(), shape)];
    let (parts, prep) = match &d.kind {
        TensorKind::F32 { shape } => (
            one(shape.clone()),
            Prep::F32 {
                shape: shape.clone(),
            },
        ),
        TensorKind::OptionalScalar if !has(&d.name) => return None,
        TensorKind::OptionalScalar => (one(vec![1]), Prep::F32 { shape: vec![1] }),
        TensorKind::Matrix { parts, n, k, use_ } => {
            let rows = n / parts.len().max(1);
            let stored = match use_ {
                MatrixUse::Linear | MatrixUse::Table | MatrixUse::TableAndLinear => {
                    native(&d.name, parts)
                }
                _ => None,
            };
            let parts = parts.iter().map(|p| (p.clone(), vec![rows, *k])).collect();
            let (n, k, usage) = (*n, *k, *use_);
            let prep = match stored {
                Some(ty) => Prep::Ggml { n, k, ty, usage },
                None => Prep::Matrix {
                    n,
                    k,
                    layout: MatrixLayout::of(format, k),
                    usage,
                },
            };
            (parts, prep)
        }
        TensorKind::Experts { experts, n, k } => (
            one(vec![*experts, *n, *k]),
            Prep::Matrix {
                n: experts * n,
                k: *k,
                layout: expert_layout(format.expert_format()),
                usage: MatrixUse::Experts { experts: *experts },
            },
        ),
    };
    Some(PlannedWeight {
        name: d.name.clone(),
        parts,
        prep,
    })
}

/// The target's weights in `format`: its declarations ([`Weights::tensors`]) as planned
/// weights (`has` says which optional tensors the source holds: `layer_scalar`).
pub fn target_plan(
    spec: &ModelSpec,
    format: WeightFormat,
    has: &dyn Fn(&str) -> bool,
) -> Vec<PlannedWeight> {
    target_plan_with(spec, format, has, &|_, _| None)
}

/// [`target_plan`] with the matrices `native` names stored in ggml blocks (a GGUF file's
/// own types).
pub fn target_plan_with(
    spec: &ModelSpec,
    format: WeightFormat,
    has: &dyn Fn(&str) -> bool,
    native: NativeType<'_>,
) -> Vec<PlannedWeight> {
    Weights::tensors(spec)
        .iter()
        .filter_map(|d| planned(d, format, has, native))
        .collect()
}

/// The assistant's weights in `format`, by full name: its declarations
/// ([`assistant_tensors`]) and the centroid head's own tensors (`has`: `layer_scalar`, an
/// untied `lm_head.weight`).
pub fn assistant_plan(
    spec: &AssistantSpec,
    format: WeightFormat,
    has: &dyn Fn(&str) -> bool,
) -> Vec<PlannedWeight> {
    let lm_head = lm_head_name(spec, has);
    let mut out: Vec<PlannedWeight> = assistant_tensors(spec, lm_head)
        .iter()
        .filter_map(|d| planned(d, format, has, &|_, _| None))
        .collect();
    if let AssistantHead::Centroids { .. } = spec.head {
        let c = &spec.text.config;
        let (ha, vocab) = (c.hidden_size, c.vocab_size);
        out.push(PlannedWeight {
            name: TOKEN_ORDERING.to_string(),
            parts: vec![(TOKEN_ORDERING.to_string(), vec![vocab])],
            prep: Prep::U32 { len: vocab },
        });
        // The gather reads dense rows: the head's own copy of lm_head, in the row layout.
        out.push(PlannedWeight {
            name: LM_HEAD_ROWS.to_string(),
            parts: vec![(lm_head.to_string(), vec![vocab, ha])],
            prep: Prep::Matrix {
                n: vocab,
                k: ha,
                layout: lm_head_rows_layout(format),
                usage: MatrixUse::Rows,
            },
        });
    }
    out
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
