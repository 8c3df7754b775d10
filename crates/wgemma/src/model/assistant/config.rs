//! The assistant's `config.json` (HF `Gemma4AssistantConfig`). Its weights come from a
//! [`WeightSource`](crate::weights::source::WeightSource) like the target's, by their full
//! HF names (`model.layers.0...`, `pre_projection.weight`,
//! `masked_embedding.token_ordering`).

use crate::error::{Error, Result};
use crate::model::config::{ModelSpec, TextConfig};
use crate::model::weights::WeightFormat;

pub(super) const OP: &str = "assistant";

/// The assistant's output head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AssistantHead {
    /// `lm_head` over the whole vocabulary (tied to the assistant's `embed_tokens`).
    Dense,
    /// HF `use_ordered_embeddings`: `num_centroids` centroid logits, the `top_k` best
    /// clusters of `vocab / num_centroids` tokens each.
    Centroids { num_centroids: usize, top_k: usize },
}

/// A validated `gemma4_assistant` config.
#[derive(Debug, Clone)]
pub struct AssistantSpec {
    /// The assistant's decoder. Its layers own no K/V (they all read the target's); the
    /// spec is resolved as if they did, for head dims, RoPE and MLP sizes.
    pub text: ModelSpec,
    /// The target's hidden size this assistant was trained with (`backbone_hidden_size`).
    pub backbone_hidden_size: usize,
    pub head: AssistantHead,
    /// `tie_word_embeddings`: lm_head is `model.embed_tokens.weight`.
    pub tied: bool,
}

fn default_backbone() -> usize {
    1536
}
fn default_centroids() -> usize {
    2048
}
fn default_top_k() -> usize {
    32
}
fn default_tied() -> bool {
    true
}

#[derive(serde::Deserialize)]
struct AssistantConfigJson {
    #[serde(default)]
    model_type: Option<String>,
    text_config: serde_json::Value,
    #[serde(default = "default_backbone")]
    backbone_hidden_size: usize,
    #[serde(default)]
    use_ordered_embeddings: bool,
    #[serde(default = "default_centroids")]
    num_centroids: usize,
    #[serde(default = "default_top_k")]
    centroid_intermediate_top_k: usize,
    #[serde(default = "default_tied")]
    tie_word_embeddings: bool,
}

/// Parses a `gemma4_assistant` `config.json` (HF `Gemma4AssistantConfig`), with HF's
/// architecture checks (`validate_architecture`): no per-layer inputs, no MoE, no
/// double-wide MLP, every layer KV-shared.
pub fn parse_assistant_config(json: &str) -> Result<AssistantSpec> {
    let c: AssistantConfigJson = serde_json::from_str(json).map_err(|e| {
        Error::invalid(
            OP,
            "assistant config.json",
            "a Gemma4AssistantConfig (text_config, backbone_hidden_size, ...)",
            e.to_string(),
        )
    })?;
    if let Some(t) = c.model_type.as_deref().filter(|t| *t != "gemma4_assistant") {
        return Err(Error::invalid(
            OP,
            "model_type",
            "\"gemma4_assistant\"",
            format!("{t:?}"),
        ));
    }
    let mut text: TextConfig = serde_json::from_value(c.text_config).map_err(|e| {
        Error::invalid(
            OP,
            "text_config",
            "HF Gemma4TextConfig fields",
            e.to_string(),
        )
    })?;
    let n = text.num_hidden_layers;
    if text.hidden_size_per_layer_input.unwrap_or(0) != 0 {
        return Err(Error::invalid(
            OP,
            "text_config.hidden_size_per_layer_input",
            0,
            text.hidden_size_per_layer_input.unwrap_or(0),
        ));
    }
    if text.vocab_size_per_layer_input.unwrap_or(0) != 0 {
        return Err(Error::invalid(
            OP,
            "text_config.vocab_size_per_layer_input",
            0,
            text.vocab_size_per_layer_input.unwrap_or(0),
        ));
    }
    if text.enable_moe_block || text.use_double_wide_mlp {
        return Err(Error::invalid(
            OP,
            "text_config.enable_moe_block / use_double_wide_mlp",
            "false / false",
            format!("{} / {}", text.enable_moe_block, text.use_double_wide_mlp),
        ));
    }
    // HF's __post_init__ turns 0 into "all layers shared"; anything else must be all.
    if text.num_kv_shared_layers != 0 && text.num_kv_shared_layers != n {
        return Err(Error::invalid(
            OP,
            "text_config.num_kv_shared_layers (every assistant layer reads the target's K/V)",
            n,
            text.num_kv_shared_layers,
        ));
    }
    // Resolve the layers as if they owned their K/V: the K/V come from the target anyway.
    text.num_kv_shared_layers = 0;
    let spec = ModelSpec::new(text)?;
    let vocab = spec.config.vocab_size;
    let head = if c.use_ordered_embeddings {
        let (nc, k) = (c.num_centroids, c.centroid_intermediate_top_k);
        if nc == 0 || vocab % nc != 0 {
            return Err(Error::invalid(
                OP,
                "num_centroids",
                format!("a divisor of vocab_size {vocab}"),
                nc,
            ));
        }
        if k == 0 || k > nc {
            return Err(Error::invalid(
                OP,
                "centroid_intermediate_top_k",
                format!("1..={nc} (num_centroids)"),
                k,
            ));
        }
        AssistantHead::Centroids {
            num_centroids: nc,
            top_k: k,
        }
    } else {
        AssistantHead::Dense
    };
    Ok(AssistantSpec {
        text: spec,
        backbone_hidden_size: c.backbone_hidden_size,
        head,
        tied: c.tie_word_embeddings,
    })
}

/// How to build an assistant.
#[derive(Debug, Clone, Copy)]
pub struct AssistantOptions {
    pub format: WeightFormat,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(head: serde_json::Value, text: serde_json::Value) -> String {
        let mut text_config = serde_json::json!({
            "model_type": "gemma4_text", "vocab_size": 512, "hidden_size": 32,
            "intermediate_size": 64, "num_hidden_layers": 4, "num_attention_heads": 2,
            "num_key_value_heads": 1, "head_dim": 32, "global_head_dim": 64,
            "sliding_window": 8, "num_kv_shared_layers": 4,
            "layer_types": ["sliding_attention", "sliding_attention", "sliding_attention",
                            "full_attention"],
        });
        for (k, v) in text.as_object().unwrap() {
            text_config[k] = v.clone();
        }
        let mut c = serde_json::json!({
            "model_type": "gemma4_assistant", "backbone_hidden_size": 64,
            "text_config": text_config,
        });
        for (k, v) in head.as_object().unwrap() {
            c[k] = v.clone();
        }
        c.to_string()
    }

    #[test]
    fn parses_both_heads() {
        let dense =
            parse_assistant_config(&config(serde_json::json!({}), serde_json::json!({}))).unwrap();
        assert_eq!(dense.head, AssistantHead::Dense);
        assert_eq!(dense.backbone_hidden_size, 64);
        assert_eq!(dense.text.layers.len(), 4);
        assert_eq!(dense.text.layers[3].head_dim, 64);
        let centroids = parse_assistant_config(&config(
            serde_json::json!({"use_ordered_embeddings": true, "num_centroids": 32,
                               "centroid_intermediate_top_k": 4}),
            serde_json::json!({}),
        ))
        .unwrap();
        assert_eq!(
            centroids.head,
            AssistantHead::Centroids {
                num_centroids: 32,
                top_k: 4
            }
        );
        // HF's default: 0 shared layers means all.
        let zero = config(
            serde_json::json!({}),
            serde_json::json!({"num_kv_shared_layers": 0}),
        );
        assert!(parse_assistant_config(&zero).is_ok());
    }

    #[test]
    fn refuses_what_hf_refuses() {
        let refuse = |head: serde_json::Value, text: serde_json::Value, needle: &str| {
            let err = parse_assistant_config(&config(head, text))
                .unwrap_err()
                .to_string();
            assert!(err.contains(needle), "{needle}: {err}");
        };
        let none = serde_json::json!({});
        refuse(
            none.clone(),
            serde_json::json!({"num_kv_shared_layers": 2}),
            "num_kv_shared_layers",
        );
        refuse(
            none.clone(),
            serde_json::json!({"hidden_size_per_layer_input": 16}),
            "per_layer_input",
        );
        refuse(
            none.clone(),
            serde_json::json!({"use_double_wide_mlp": true}),
            "double_wide",
        );
        refuse(
            serde_json::json!({"model_type": "gemma4"}),
            none.clone(),
            "model_type",
        );
        refuse(
            serde_json::json!({"use_ordered_embeddings": true, "num_centroids": 30}),
            none.clone(),
            "num_centroids",
        );
        refuse(
            serde_json::json!({"use_ordered_embeddings": true, "num_centroids": 32,
                               "centroid_intermediate_top_k": 33}),
            none,
            "centroid_intermediate_top_k",
        );
        assert!(parse_assistant_config("{").is_err());
    }
}
