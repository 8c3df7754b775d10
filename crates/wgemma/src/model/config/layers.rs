//! The per-layer resolution of a config: layer kinds, overrides, heads, K/V sources, RoPE
//! and the MoE block, each refused by name when wgemma does not implement it.

use super::fields::{
    KvSource, LayerKind, LayerOverride, MoeSpec, Rope, RopeParameters, TextConfig,
};
use crate::error::{Error, Result};
use std::collections::BTreeMap;

const OP: &str = "config";

/// Refuses the config switches wgemma does not implement (activation, attention bias,
/// bidirectional attention).
pub(super) fn check_supported_features(c: &TextConfig) -> Result<()> {
    if c.hidden_activation != "gelu_pytorch_tanh" {
        return Err(Error::invalid(
            OP,
            "hidden_activation",
            "\"gelu_pytorch_tanh\"",
            &c.hidden_activation,
        ));
    }
    if c.attention_bias {
        return Err(Error::invalid(OP, "attention_bias", "false", "true"));
    }
    if let Some(mode) = &c.use_bidirectional_attention {
        return Err(Error::invalid(
            OP,
            "use_bidirectional_attention",
            "null (causal text decoding)",
            mode,
        ));
    }
    Ok(())
}

/// Each layer's attention kind: `layer_types`, or HF's default of 5 sliding then 1 full.
pub(super) fn layer_kinds(c: &TextConfig) -> Result<Vec<LayerKind>> {
    let n = c.num_hidden_layers;
    let kinds: Vec<LayerKind> = match &c.layer_types {
        Some(types) => {
            if types.len() != n {
                return Err(Error::invalid(OP, "layer_types length", n, types.len()));
            }
            types
                .iter()
                .map(|t| LayerKind::parse(t))
                .collect::<Result<_>>()?
        }
        // HF default: 5 sliding then 1 full.
        None => (0..n)
            .map(|i| {
                if (i + 1) % 6 == 0 {
                    LayerKind::Full
                } else {
                    LayerKind::Sliding
                }
            })
            .collect(),
    };
    if kinds.last() != Some(&LayerKind::Full) {
        // HF forces the last layer to full attention with a warning; a config that
        // says otherwise is not what the model will run, so refuse it.
        return Err(Error::invalid(
            OP,
            "last entry of layer_types",
            "\"full_attention\"",
            "\"sliding_attention\"",
        ));
    }
    Ok(kinds)
}

/// `per_layer_config` by layer index (its keys are index strings).
pub(super) fn layer_overrides(c: &TextConfig) -> Result<BTreeMap<usize, LayerOverride>> {
    let n = c.num_hidden_layers;
    let mut overrides = BTreeMap::new();
    for (key, o) in c.per_layer_config.iter().flatten() {
        let index = key
            .parse::<usize>()
            .ok()
            .filter(|&i| i < n)
            .ok_or_else(|| {
                Error::invalid(
                    OP,
                    "per_layer_config key",
                    format!("a layer index < {n}"),
                    format!("{key:?}"),
                )
            })?;
        overrides.insert(index, o.clone());
    }
    Ok(overrides)
}

/// Layer `i`'s `(head_dim, num_kv_heads)`: the per-layer form's overrides, or the sliding /
/// full values; both checked.
pub(super) fn layer_heads(
    c: &TextConfig,
    overrides: &BTreeMap<usize, LayerOverride>,
    i: usize,
    kind: LayerKind,
) -> Result<(usize, usize)> {
    let (head_dim, num_kv_heads) = match (kind, &c.per_layer_config) {
        // The per-layer form: overrides on top of the base values.
        (_, Some(_)) => {
            let o = overrides.get(&i);
            (
                o.and_then(|o| o.head_dim).unwrap_or(c.head_dim),
                o.and_then(|o| o.num_key_value_heads)
                    .unwrap_or(c.num_key_value_heads),
            )
        }
        (LayerKind::Sliding, None) => (c.head_dim, c.num_key_value_heads),
        (LayerKind::Full, None) => (
            c.global_head_dim,
            if c.attention_k_eq_v {
                c.num_global_key_value_heads
                    .unwrap_or(c.num_key_value_heads)
            } else {
                c.num_key_value_heads
            },
        ),
    };
    if head_dim == 0 {
        return Err(Error::invalid(
            OP,
            format!("head_dim of layer {i}"),
            "a positive integer",
            0,
        ));
    }
    if num_kv_heads == 0 || c.num_attention_heads % num_kv_heads != 0 {
        return Err(Error::invalid(
            OP,
            format!("key/value heads of layer {i}"),
            format!(
                "a divisor of num_attention_heads = {}",
                c.num_attention_heads
            ),
            num_kv_heads,
        ));
    }
    Ok((head_dim, num_kv_heads))
}

/// Layer `i`'s K/V: its own before `first_shared`, else the last non-shared layer of its
/// kind's.
pub(super) fn kv_source(kinds: &[LayerKind], first_shared: usize, i: usize) -> Result<KvSource> {
    if i < first_shared {
        return Ok(KvSource::Own);
    }
    let kind = kinds[i];
    let from_layer = (0..first_shared)
        .rev()
        .find(|&j| kinds[j] == kind)
        .ok_or_else(|| {
            Error::invalid(
                OP,
                format!("KV-shared layer {i} ({})", kind.hf_name()),
                "an earlier non-shared layer of the same type",
                "none",
            )
        })?;
    Ok(KvSource::Shared { from_layer })
}

/// The RoPE a layer of `kind` applies: `rope_parameters[kind]`, or HF's defaults (sliding:
/// theta 10^4, full rotary; full: theta 10^6, proportional with a quarter rotated).
pub(super) fn layer_rope(c: &TextConfig, kind: LayerKind, head_dim: usize) -> Result<Rope> {
    let default = match kind {
        LayerKind::Sliding => RopeParameters {
            rope_type: "default".into(),
            rope_theta: 10_000.0,
            partial_rotary_factor: None,
            factor: None,
        },
        LayerKind::Full => RopeParameters {
            rope_type: "proportional".into(),
            rope_theta: 1_000_000.0,
            partial_rotary_factor: Some(0.25),
            factor: None,
        },
    };
    let p = match &c.rope_parameters {
        Some(map) => map.get(kind.hf_name()).cloned().ok_or_else(|| {
            Error::invalid(
                OP,
                "rope_parameters",
                format!("an entry for {}", kind.hf_name()),
                "none",
            )
        })?,
        None => default,
    };
    if p.factor.is_some_and(|f| f != 1.0) {
        return Err(Error::invalid(
            OP,
            "rope_parameters.factor",
            "1.0 (no scaling)",
            p.factor.unwrap(),
        ));
    }
    let rotary_pairs = match p.rope_type.as_str() {
        "default" => head_dim / 2,
        "proportional" => (p.partial_rotary_factor.unwrap_or(1.0) * head_dim as f64 / 2.0) as usize,
        other => {
            return Err(Error::invalid(
                OP,
                "rope_type",
                "\"default\" or \"proportional\"",
                format!("{other:?}"),
            ))
        }
    };
    Ok(Rope {
        theta: p.rope_theta,
        rotary_pairs,
    })
}

/// The MoE block's sizes when `enable_moe_block` is set, each required and positive.
pub(super) fn moe_spec(c: &TextConfig) -> Result<Option<MoeSpec>> {
    if !c.enable_moe_block {
        return Ok(None);
    }
    let need = |v: Option<usize>, name: &str| {
        v.filter(|&x| x > 0).ok_or_else(|| {
            Error::invalid(
                OP,
                name.to_string(),
                "a positive integer with enable_moe_block",
                "none",
            )
        })
    };
    let spec = MoeSpec {
        num_experts: need(c.num_experts, "num_experts")?,
        top_k: need(c.top_k_experts, "top_k_experts")?,
        intermediate_size: need(c.moe_intermediate_size, "moe_intermediate_size")?,
    };
    if spec.top_k > spec.num_experts {
        return Err(Error::invalid(
            OP,
            "top_k_experts",
            format!("<= num_experts = {}", spec.num_experts),
            spec.top_k,
        ));
    }
    Ok(Some(spec))
}
