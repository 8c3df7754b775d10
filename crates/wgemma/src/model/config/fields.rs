//! The `config.json` fields of a Gemma 4 text decoder (HF `Gemma4TextConfig`), the resolved
//! per-layer spec, and the checks of values that size or divide something.

use crate::error::{Error, Result};
use serde::Deserialize;
use std::collections::BTreeMap;

const OP: &str = "config";

/// `eos_token_id` may be one id or a list.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(untagged)]
pub enum TokenIds {
    One(u32),
    Many(Vec<u32>),
}

impl TokenIds {
    pub fn to_vec(&self) -> Vec<u32> {
        match self {
            TokenIds::One(id) => vec![*id],
            TokenIds::Many(ids) => ids.clone(),
        }
    }
}

/// RoPE parameters of one layer type (`rope_parameters[layer_type]`).
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct RopeParameters {
    pub rope_type: String,
    pub rope_theta: f64,
    #[serde(default)]
    pub partial_rotary_factor: Option<f64>,
    #[serde(default)]
    pub factor: Option<f64>,
}

fn default_true() -> bool {
    true
}
fn default_eps() -> f64 {
    1e-6
}
fn default_global_head_dim() -> usize {
    512
}
fn default_activation() -> String {
    "gelu_pytorch_tanh".into()
}

/// The `config.json` fields of a Gemma 4 text decoder (or the `text_config` of a
/// multimodal `gemma4` checkpoint), with HF's defaults for what a file may omit.
#[derive(Debug, Clone, Deserialize)]
pub struct TextConfig {
    #[serde(default)]
    pub model_type: Option<String>,
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub num_key_value_heads: usize,
    pub head_dim: usize,
    #[serde(default = "default_global_head_dim")]
    pub global_head_dim: usize,
    #[serde(default)]
    pub num_global_key_value_heads: Option<usize>,
    /// transformers >= 5.24 writes the full layers' head_dim / KV heads here, keyed by
    /// layer index, instead of `global_head_dim` / `num_global_key_value_heads`.
    #[serde(default)]
    pub per_layer_config: Option<BTreeMap<String, LayerOverride>>,
    #[serde(default = "default_activation")]
    pub hidden_activation: String,
    #[serde(default)]
    pub max_position_embeddings: Option<usize>,
    #[serde(default = "default_eps")]
    pub rms_norm_eps: f64,
    #[serde(default)]
    pub eos_token_id: Option<TokenIds>,
    #[serde(default)]
    pub bos_token_id: Option<u32>,
    #[serde(default)]
    pub pad_token_id: Option<u32>,
    #[serde(default = "default_true")]
    pub tie_word_embeddings: bool,
    #[serde(default)]
    pub rope_parameters: Option<BTreeMap<String, RopeParameters>>,
    #[serde(default)]
    pub attention_bias: bool,
    pub sliding_window: usize,
    #[serde(default)]
    pub layer_types: Option<Vec<String>>,
    #[serde(default)]
    pub final_logit_softcapping: Option<f64>,
    #[serde(default)]
    pub use_bidirectional_attention: Option<String>,
    #[serde(default)]
    pub vocab_size_per_layer_input: Option<usize>,
    #[serde(default)]
    pub hidden_size_per_layer_input: Option<usize>,
    #[serde(default)]
    pub attention_k_eq_v: bool,
    #[serde(default)]
    pub num_kv_shared_layers: usize,
    #[serde(default)]
    pub enable_moe_block: bool,
    #[serde(default)]
    pub use_double_wide_mlp: bool,
    #[serde(default)]
    pub num_experts: Option<usize>,
    #[serde(default)]
    pub top_k_experts: Option<usize>,
    #[serde(default)]
    pub moe_intermediate_size: Option<usize>,
}

/// One entry of `per_layer_config`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct LayerOverride {
    #[serde(default)]
    pub head_dim: Option<usize>,
    #[serde(default)]
    pub num_key_value_heads: Option<usize>,
}

/// Sliding-window or full (global) attention.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LayerKind {
    Sliding,
    Full,
}

impl LayerKind {
    pub(super) fn parse(s: &str) -> Result<LayerKind> {
        match s {
            "sliding_attention" => Ok(LayerKind::Sliding),
            "full_attention" => Ok(LayerKind::Full),
            other => Err(Error::invalid(
                OP,
                "layer_types entry",
                "\"sliding_attention\" or \"full_attention\"",
                format!("{other:?}"),
            )),
        }
    }
    pub fn hf_name(self) -> &'static str {
        match self {
            LayerKind::Sliding => "sliding_attention",
            LayerKind::Full => "full_attention",
        }
    }
}

/// Where a layer's K/V come from (HF `kv_sharing_modes`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KvSource {
    /// Computes and caches its own K/V.
    Own,
    /// Reuses the K/V of an earlier layer of the same kind (the last non-shared one).
    Shared { from_layer: usize },
}

/// RoPE as one layer applies it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rope {
    pub theta: f64,
    /// Rotated frequency pairs (`head_dim / 2` for full rotary; fewer for proportional).
    pub rotary_pairs: usize,
}

impl Rope {
    /// HF's inverse frequencies over the full `head_dim / 2` pairs: rotated pairs use
    /// theta^(-2i / head_dim) (proportional: still divided by the FULL head_dim), the rest 0.
    pub fn inv_freq(&self, head_dim: usize) -> Vec<f32> {
        (0..head_dim / 2)
            .map(|i| {
                if i < self.rotary_pairs {
                    let exponent = (2 * i) as f32 / head_dim as f32;
                    1.0 / (self.theta as f32).powf(exponent)
                } else {
                    0.0
                }
            })
            .collect()
    }
}

/// Everything one decoder layer needs to know, resolved from the config.
#[derive(Debug, Clone, PartialEq)]
pub struct LayerSpec {
    pub index: usize,
    pub kind: LayerKind,
    pub head_dim: usize,
    pub num_kv_heads: usize,
    pub kv: KvSource,
    /// Full layers of K=V models use k_proj's output as V (no v_proj).
    pub k_eq_v: bool,
    pub intermediate_size: usize,
    pub rope: Rope,
    /// Sliding window W (query q sees keys q - W < k <= q), `None` for full layers.
    pub window: Option<usize>,
}

/// A validated Gemma 4 text config with per-layer specs.
#[derive(Debug, Clone)]
pub struct ModelSpec {
    pub config: TextConfig,
    pub layers: Vec<LayerSpec>,
    /// Per-layer embedding width (0 = no PLE).
    pub ple_dim: usize,
    pub moe: Option<MoeSpec>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MoeSpec {
    pub num_experts: usize,
    pub top_k: usize,
    pub intermediate_size: usize,
}

/// `final_logit_softcapping`, whatever format it came in: HF divides the logits by it, so 0
/// gives NaN and a negative value flips them; null (no capping) is the way to disable.
pub(crate) fn check_softcap(cap: f64) -> Result<()> {
    if cap > 0.0 && cap.is_finite() {
        return Ok(());
    }
    Err(Error::invalid(
        OP,
        "final_logit_softcapping",
        "a finite value > 0, or none for no capping",
        cap,
    ))
}

/// `rms_norm_eps`, whatever format it came in.
pub(crate) fn check_rms_norm_eps(eps: f64) -> Result<()> {
    if eps >= 0.0 && eps.is_finite() {
        return Ok(());
    }
    Err(Error::invalid(
        OP,
        "rms_norm_eps",
        "a finite value >= 0",
        eps,
    ))
}

/// A RoPE base frequency (`name` says which), whatever format it came in.
pub(crate) fn check_rope_theta(name: &str, theta: f64) -> Result<()> {
    if theta > 0.0 && theta.is_finite() {
        return Ok(());
    }
    Err(Error::invalid(OP, name, "a finite value > 0", theta))
}

/// Checks the fields that size or divide something: a zero there would be a division by
/// zero, an empty buffer or a NaN far from the config that caused it.
pub(super) fn check_fields(c: &TextConfig) -> Result<()> {
    for (name, value) in [
        ("vocab_size", c.vocab_size),
        ("hidden_size", c.hidden_size),
        ("intermediate_size", c.intermediate_size),
        ("num_hidden_layers", c.num_hidden_layers),
        ("num_attention_heads", c.num_attention_heads),
        ("head_dim", c.head_dim),
        ("sliding_window", c.sliding_window),
    ] {
        if value == 0 {
            return Err(Error::invalid(OP, name, "a positive integer", 0));
        }
    }
    if let Some(cap) = c.final_logit_softcapping {
        check_softcap(cap)?;
    }
    check_rms_norm_eps(c.rms_norm_eps)?;
    for (kind, p) in c.rope_parameters.iter().flatten() {
        check_rope_theta(&format!("rope_parameters.{kind}.rope_theta"), p.rope_theta)?;
        if let Some(f) = p.partial_rotary_factor {
            if !(f > 0.0 && f <= 1.0) {
                return Err(Error::invalid(
                    OP,
                    format!("rope_parameters.{kind}.partial_rotary_factor"),
                    "a value in (0, 1]",
                    f,
                ));
            }
        }
    }
    Ok(())
}
