//! Gemma 4 text configuration: the `config.json` fields (HF `Gemma4TextConfig`), resolved
//! into a per-layer [`LayerSpec`] the model code reads. Values wgemma does not implement
//! are refused with a clear error, never ignored.

mod fields;
mod layers;
mod sizes;

pub(crate) use fields::{check_rms_norm_eps, check_rope_theta, check_softcap};
pub use fields::{
    KvSource, LayerKind, LayerOverride, LayerSpec, ModelSpec, MoeSpec, Rope, RopeParameters,
    TextConfig, TokenIds,
};
pub use sizes::{SizeEstimate, SizeLimits};

use crate::error::{Error, Result};
use fields::check_fields;
use layers::{
    check_supported_features, kv_source, layer_heads, layer_kinds, layer_overrides, layer_rope,
    moe_spec,
};

const OP: &str = "config";

/// Parses `config.json` text: a `gemma4_text` config, or a `gemma4` one with `text_config`.
pub fn parse_config(json: &str) -> Result<ModelSpec> {
    let value: serde_json::Value = serde_json::from_str(json)
        .map_err(|e| Error::invalid(OP, "config.json", "valid JSON", e.to_string()))?;
    let text = match value.get("model_type").and_then(|v| v.as_str()) {
        Some("gemma4") => value
            .get("text_config")
            .cloned()
            .ok_or_else(|| Error::invalid(OP, "gemma4 config", "a text_config object", "none"))?,
        Some("gemma4_text") | None => value,
        Some(other) => {
            return Err(Error::invalid(
                OP,
                "model_type",
                "\"gemma4\" or \"gemma4_text\"",
                format!("{other:?}"),
            ))
        }
    };
    let config: TextConfig = serde_json::from_value(text).map_err(|e| {
        Error::invalid(
            OP,
            "Gemma 4 text config fields",
            "HF Gemma4TextConfig",
            e.to_string(),
        )
    })?;
    ModelSpec::new(config)
}

impl ModelSpec {
    pub fn new(config: TextConfig) -> Result<ModelSpec> {
        check_fields(&config)?;
        let c = &config;
        check_supported_features(c)?;
        let n = c.num_hidden_layers;
        let kinds = layer_kinds(c)?;
        if c.num_kv_shared_layers >= n && n > 0 && c.num_kv_shared_layers != 0 {
            return Err(Error::invalid(
                OP,
                "num_kv_shared_layers",
                format!("< {n}"),
                c.num_kv_shared_layers,
            ));
        }
        let first_shared = n - c.num_kv_shared_layers;
        let overrides = layer_overrides(c)?;
        let mut layers = Vec::with_capacity(n);
        for (i, &kind) in kinds.iter().enumerate() {
            let (head_dim, num_kv_heads) = layer_heads(c, &overrides, i, kind)?;
            let kv = kv_source(&kinds, first_shared, i)?;
            let double = c.use_double_wide_mlp && matches!(kv, KvSource::Shared { .. });
            layers.push(LayerSpec {
                index: i,
                kind,
                head_dim,
                num_kv_heads,
                kv,
                k_eq_v: c.attention_k_eq_v && kind == LayerKind::Full,
                intermediate_size: c.intermediate_size * if double { 2 } else { 1 },
                rope: layer_rope(c, kind, head_dim)?,
                window: (kind == LayerKind::Sliding).then_some(c.sliding_window),
            });
        }
        let ple_dim = c.hidden_size_per_layer_input.unwrap_or(0);
        if ple_dim > 0
            && c.vocab_size_per_layer_input
                .is_some_and(|v| v != c.vocab_size)
        {
            return Err(Error::invalid(
                OP,
                "vocab_size_per_layer_input",
                format!("vocab_size = {}", c.vocab_size),
                c.vocab_size_per_layer_input.unwrap(),
            ));
        }
        let moe = moe_spec(c)?;
        if !c.tie_word_embeddings {
            return Err(Error::invalid(
                OP,
                "tie_word_embeddings",
                "true (Gemma 4 ties lm_head)",
                "false",
            ));
        }
        Ok(ModelSpec {
            layers,
            ple_dim,
            moe,
            config,
        })
    }

    /// Stop tokens from the config (`eos_token_id`).
    pub fn eos_ids(&self) -> Vec<u32> {
        self.config
            .eos_token_id
            .as_ref()
            .map(TokenIds::to_vec)
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The E2B shape of google/gemma-4-E2B's config.json: 35 layers, hidden 1536, 8 query
    /// heads and 1 KV head, head_dim 256 (sliding) / 512 (full), (4 sliding + 1 full) x 7 with
    /// window 512, the last 20 layers sharing K/V and double-wide MLPs, PLE width 256.
    pub(crate) const E2B_CONFIG: &str = r#"{
        "model_type": "gemma4_text", "vocab_size": 262144, "hidden_size": 1536,
        "intermediate_size": 6144, "num_hidden_layers": 35, "num_attention_heads": 8,
        "num_key_value_heads": 1, "head_dim": 256, "global_head_dim": 512,
        "sliding_window": 512, "num_kv_shared_layers": 20, "use_double_wide_mlp": true,
        "hidden_size_per_layer_input": 256, "vocab_size_per_layer_input": 262144,
        "final_logit_softcapping": 30.0, "eos_token_id": [1, 106],
        "layer_types": ["sliding_attention","sliding_attention","sliding_attention","sliding_attention","full_attention",
                        "sliding_attention","sliding_attention","sliding_attention","sliding_attention","full_attention",
                        "sliding_attention","sliding_attention","sliding_attention","sliding_attention","full_attention",
                        "sliding_attention","sliding_attention","sliding_attention","sliding_attention","full_attention",
                        "sliding_attention","sliding_attention","sliding_attention","sliding_attention","full_attention",
                        "sliding_attention","sliding_attention","sliding_attention","sliding_attention","full_attention",
                        "sliding_attention","sliding_attention","sliding_attention","sliding_attention","full_attention"]
    }"#;

    #[test]
    fn e2b_layers_resolve_like_hf() {
        let spec = parse_config(E2B_CONFIG).unwrap();
        assert_eq!(spec.layers.len(), 35);
        assert_eq!(spec.ple_dim, 256);
        // First shared layer is 15; sources are the last own layer of each kind (13, 14).
        assert_eq!(spec.layers[14].kv, KvSource::Own);
        assert_eq!(spec.layers[15].kv, KvSource::Shared { from_layer: 13 });
        assert_eq!(spec.layers[19].kv, KvSource::Shared { from_layer: 14 });
        assert_eq!(spec.layers[14].intermediate_size, 6144);
        assert_eq!(spec.layers[15].intermediate_size, 12288);
        let full = &spec.layers[4];
        assert_eq!(
            (full.kind, full.head_dim, full.num_kv_heads),
            (LayerKind::Full, 512, 1)
        );
        assert_eq!(full.rope.rotary_pairs, 64);
        assert_eq!(full.window, None);
        let sliding = &spec.layers[0];
        assert_eq!(
            (sliding.head_dim, sliding.rope.rotary_pairs, sliding.window),
            (256, 128, Some(512))
        );
        let inv = full.rope.inv_freq(512);
        assert_eq!(inv.len(), 256);
        assert_eq!(inv[0], 1.0);
        assert!((inv[1] - 1.0 / 1e6f32.powf(2.0 / 512.0)).abs() < 1e-9);
        assert_eq!(inv[64], 0.0);
        assert_eq!(spec.eos_ids(), vec![1, 106]);
    }

    #[test]
    fn multimodal_wrapper_and_k_eq_v() {
        let json = r#"{"model_type": "gemma4", "text_config": {
            "vocab_size": 512, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
            "num_attention_heads": 4, "num_key_value_heads": 2, "num_global_key_value_heads": 1,
            "head_dim": 16, "global_head_dim": 32, "sliding_window": 8, "attention_k_eq_v": true,
            "layer_types": ["sliding_attention", "full_attention"]}}"#;
        let spec = parse_config(json).unwrap();
        assert!(!spec.layers[0].k_eq_v);
        assert!(spec.layers[1].k_eq_v);
        assert_eq!(spec.layers[1].num_kv_heads, 1);
        assert_eq!(spec.layers[0].num_kv_heads, 2);
    }

    #[test]
    fn per_layer_config_form() {
        let json = r#"{"model_type": "gemma4_text", "vocab_size": 512, "hidden_size": 128,
            "intermediate_size": 128, "num_hidden_layers": 4, "num_attention_heads": 4,
            "num_key_value_heads": 2, "head_dim": 32, "sliding_window": 8, "attention_k_eq_v": true,
            "per_layer_config": {"3": {"head_dim": 64, "num_key_value_heads": 1}},
            "layer_types": ["sliding_attention", "sliding_attention", "sliding_attention", "full_attention"]}"#;
        let spec = parse_config(json).unwrap();
        assert_eq!(
            (spec.layers[0].head_dim, spec.layers[0].num_kv_heads),
            (32, 2)
        );
        assert_eq!(
            (spec.layers[3].head_dim, spec.layers[3].num_kv_heads),
            (64, 1)
        );
        assert_eq!(spec.layers[3].rope.rotary_pairs, 8);
        let bad = json.replace("\"3\": {", "\"9\": {");
        assert!(parse_config(&bad)
            .unwrap_err()
            .to_string()
            .contains("per_layer_config"));
    }

    #[test]
    fn golden_fixture_configs_parse() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/golden");
        for name in ["e2b_like", "dense_kv"] {
            let json = std::fs::read_to_string(dir.join(name).join("config.json")).unwrap();
            let spec = parse_config(&json).unwrap();
            assert!(spec.layers.iter().any(|l| l.kind == LayerKind::Full));
        }
    }

    #[test]
    fn unsupported_values_are_refused() {
        let base: serde_json::Value = serde_json::from_str(E2B_CONFIG).unwrap();
        let refuse = |key: &str, value: serde_json::Value, needle: &str| {
            let mut v = base.clone();
            v[key] = value;
            let err = parse_config(&v.to_string()).unwrap_err().to_string();
            assert!(err.contains(needle), "{key}: {err}");
        };
        refuse("hidden_activation", "silu".into(), "gelu_pytorch_tanh");
        refuse("attention_bias", true.into(), "attention_bias");
        refuse("model_type", "llama".into(), "model_type");
        refuse("use_bidirectional_attention", "all".into(), "bidirectional");
        refuse("num_key_value_heads", 3.into(), "divisor");
        refuse(
            "layer_types",
            serde_json::json!(["full_attention"]),
            "layer_types length",
        );
        refuse("tie_word_embeddings", false.into(), "tie_word_embeddings");
        let err = parse_config("{not json").unwrap_err().to_string();
        assert!(err.contains("valid JSON"), "{err}");
    }
}
