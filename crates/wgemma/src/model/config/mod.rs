//! Gemma 4 text configuration: the `config.json` fields (HF `Gemma4TextConfig`), resolved
//! into a per-layer [`LayerSpec`] the model code reads. Values wgemma does not implement
//! are refused with a clear error, never ignored.

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
    fn parse(s: &str) -> Result<LayerKind> {
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
fn check_fields(c: &TextConfig) -> Result<()> {
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

/// What a load may use, for [`ModelSpec::check_sizes`]: the device's largest buffer and
/// the host's memory (the library reads no files: the caller measures it).
#[derive(Debug, Clone, Copy)]
pub struct SizeLimits {
    /// Weight bytes per parameter in the load format (Q4 group g: 0.5 + 2 / g).
    pub bytes_per_weight: f64,
    /// `--context`: positions each own KV cache holds (a sliding layer: its window).
    pub max_context: usize,
    /// Rows of the largest forward that keeps every row's logits (verify rows; prefill
    /// chunks keep the last row's only).
    pub max_rows: usize,
    /// The device's `max_buffer_size`.
    pub max_buffer_bytes: u64,
    /// Host memory in bytes, when known.
    pub host_memory_bytes: Option<u64>,
    /// The adapter is a CPU (lavapipe): its buffers are host memory too.
    pub device_is_host: bool,
}

/// Sizes a config asks for, in bytes (u128: absurd configs must not overflow).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SizeEstimate {
    /// Every weight in the load format.
    pub weights: u128,
    /// Every own layer's K and V caches (f32 rows; a sliding layer holds its window).
    pub kv_cache: u128,
    /// The largest tensor as f32 on the host (the loaders convert one tensor at a time).
    pub largest_host_tensor: u128,
    /// Logits of the largest forward, f32.
    pub logits: u128,
}

fn gib(bytes: u128) -> String {
    format!("{:.2} GiB", bytes as f64 / (1u64 << 30) as f64)
}

impl ModelSpec {
    /// Lower bounds on what loading this config allocates: enough to refuse an absurd
    /// config (a 2^28 vocabulary, 100000 layers) before any of it is allocated.
    pub fn estimate_sizes(&self, limits: &SizeLimits) -> SizeEstimate {
        let c = &self.config;
        let m = |a: usize, b: usize| a as u128 * b as u128;
        let embed = m(c.vocab_size, c.hidden_size);
        let ple_table = m(c.vocab_size, self.ple_dim) * self.layers.len() as u128;
        let mut params = embed + ple_table;
        let mut kv_cache = 0u128;
        let mut largest = embed.max(ple_table);
        for l in &self.layers {
            let q = m(c.num_attention_heads, l.head_dim) * c.hidden_size as u128;
            let kv = m(l.num_kv_heads, l.head_dim) * c.hidden_size as u128;
            let mlp = m(c.hidden_size, l.intermediate_size);
            let moe = self.moe.map_or(0, |e| {
                m(e.num_experts, e.intermediate_size) * c.hidden_size as u128 * 3
            });
            params += 2 * q + 2 * kv + 3 * mlp + moe + m(2, c.hidden_size) * self.ple_dim as u128;
            largest = largest.max(q).max(2 * mlp).max(moe);
            if l.kv == KvSource::Own {
                let positions = l
                    .window
                    .map_or(limits.max_context, |w| w.min(limits.max_context));
                let k_and_v = if l.k_eq_v { 1 } else { 2 };
                kv_cache += m(positions, l.num_kv_heads) * l.head_dim as u128 * 4 * k_and_v;
            }
        }
        SizeEstimate {
            weights: (params as f64 * limits.bytes_per_weight) as u128,
            kv_cache,
            largest_host_tensor: largest * 4,
            logits: m(limits.max_rows, c.vocab_size) * 4,
        }
    }

    /// Refuses a config whose sizes cannot fit this device or this host, stating them.
    /// Called at the top of every load, before anything is read or allocated.
    pub fn check_sizes(&self, limits: &SizeLimits) -> Result<SizeEstimate> {
        let e = self.estimate_sizes(limits);
        let c = &self.config;
        let max_buffer = limits.max_buffer_bytes as u128;
        if e.logits > max_buffer {
            return Err(Error::invalid(
                OP,
                format!(
                    "logits of one verify forward ({} rows x vocab_size {}, f32)",
                    limits.max_rows, c.vocab_size
                ),
                format!("<= the device's max_buffer_size = {}", gib(max_buffer)),
                gib(e.logits),
            ));
        }
        if let Some(host) = limits.host_memory_bytes.map(u128::from) {
            if e.largest_host_tensor > host {
                return Err(Error::invalid(
                    OP,
                    format!(
                        "the largest tensor as f32 on the host (vocab_size {} x hidden_size \
                         {}, or a layer's matrices)",
                        c.vocab_size, c.hidden_size
                    ),
                    format!("<= host memory = {}", gib(host)),
                    gib(e.largest_host_tensor),
                ));
            }
            let device = e.weights + e.kv_cache;
            if limits.device_is_host && device > host {
                return Err(Error::invalid(
                    OP,
                    format!(
                        "weights ({}) + KV caches ({}) of {} layers on a CPU adapter, whose \
                         buffers are host memory",
                        gib(e.weights),
                        gib(e.kv_cache),
                        self.layers.len()
                    ),
                    format!("<= host memory = {}", gib(host)),
                    gib(device),
                ));
            }
        }
        Ok(e)
    }

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

/// Refuses the config switches wgemma does not implement (activation, attention bias,
/// bidirectional attention).
fn check_supported_features(c: &TextConfig) -> Result<()> {
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
fn layer_kinds(c: &TextConfig) -> Result<Vec<LayerKind>> {
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
fn layer_overrides(c: &TextConfig) -> Result<BTreeMap<usize, LayerOverride>> {
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
fn layer_heads(
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
fn kv_source(kinds: &[LayerKind], first_shared: usize, i: usize) -> Result<KvSource> {
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
fn layer_rope(c: &TextConfig, kind: LayerKind, head_dim: usize) -> Result<Rope> {
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
fn moe_spec(c: &TextConfig) -> Result<Option<MoeSpec>> {
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
