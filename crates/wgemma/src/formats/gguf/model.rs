//! Gemma 4 as llama.cpp writes it to GGUF (architecture `gemma4`): the metadata keys its
//! loader reads (`src/models/gemma4.cpp`, written by `convert_hf_to_gguf.py`'s
//! `Gemma4Model`) turned back into the HF `Gemma4TextConfig` wgemma parses, and the HF
//! tensor names mapped to llama.cpp's (`gguf-py/gguf/tensor_mapping.py`).
//!
//! What the converter changes and this module undoes: head dims and KV heads of full and
//! sliding layers live in separate keys (`key_length` / `key_length_swa`, a per-layer
//! `head_count_kv` array); the double-wide MLP of KV-shared layers is a per-layer
//! `feed_forward_length` array; proportional RoPE on full layers is a `rope_freqs` tensor
//! (1 for rotated frequency pairs, 1e30 for the others); `layer_scalar` gains `.weight`;
//! the router's `per_expert_scale` becomes `ffn_down_exps.scale`. Norm weights are stored
//! as HF has them (Gemma 4's RMSNorm multiplies by `w`, so no +1 shift is applied).

use super::reader::{GgufFile, Value};
use crate::error::{Error, Result};
use crate::model::config::{check_rms_norm_eps, check_rope_theta, check_softcap};
use serde_json::json;

const OP: &str = "gguf";
pub const ARCH: &str = "gemma4";
pub const ASSISTANT_ARCH: &str = "gemma4-assistant";

/// Model-level tensors: (HF name without the `model.` prefix, GGUF name).
const GLOBAL_NAMES: [(&str, &str); 5] = [
    ("embed_tokens.weight", "token_embd.weight"),
    (
        "embed_tokens_per_layer.weight",
        "per_layer_token_embd.weight",
    ),
    (
        "per_layer_model_projection.weight",
        "per_layer_model_proj.weight",
    ),
    (
        "per_layer_projection_norm.weight",
        "per_layer_proj_norm.weight",
    ),
    ("norm.weight", "output_norm.weight"),
];

/// Tensors of layer `i`: (HF name after `layers.{i}.`, GGUF name after `blk.{i}.`).
const LAYER_NAMES: [(&str, &str); 25] = [
    ("input_layernorm.weight", "attn_norm.weight"),
    ("self_attn.q_proj.weight", "attn_q.weight"),
    ("self_attn.k_proj.weight", "attn_k.weight"),
    ("self_attn.v_proj.weight", "attn_v.weight"),
    ("self_attn.o_proj.weight", "attn_output.weight"),
    ("self_attn.q_norm.weight", "attn_q_norm.weight"),
    ("self_attn.k_norm.weight", "attn_k_norm.weight"),
    (
        "post_attention_layernorm.weight",
        "post_attention_norm.weight",
    ),
    ("pre_feedforward_layernorm.weight", "ffn_norm.weight"),
    ("post_feedforward_layernorm.weight", "post_ffw_norm.weight"),
    ("mlp.gate_proj.weight", "ffn_gate.weight"),
    ("mlp.up_proj.weight", "ffn_up.weight"),
    ("mlp.down_proj.weight", "ffn_down.weight"),
    ("per_layer_input_gate.weight", "inp_gate.weight"),
    ("per_layer_projection.weight", "proj.weight"),
    ("post_per_layer_input_norm.weight", "post_norm.weight"),
    ("layer_scalar", "layer_output_scale.weight"),
    ("router.proj.weight", "ffn_gate_inp.weight"),
    ("router.scale", "ffn_gate_inp.scale"),
    ("router.per_expert_scale", "ffn_down_exps.scale"),
    ("experts.gate_up_proj", "ffn_gate_up_exps.weight"),
    ("experts.down_proj", "ffn_down_exps.weight"),
    (
        "pre_feedforward_layernorm_2.weight",
        "pre_ffw_norm_2.weight",
    ),
    (
        "post_feedforward_layernorm_1.weight",
        "post_ffw_norm_1.weight",
    ),
    (
        "post_feedforward_layernorm_2.weight",
        "post_ffw_norm_2.weight",
    ),
];

/// Maps `name` through `global` or, after `from_layer{i}.`, through `layer` into
/// `to_layer{i}.`.
fn map_name(
    name: &str,
    from_layer: &str,
    to_layer: &str,
    global: impl Fn(&(&'static str, &'static str)) -> (&'static str, &'static str),
) -> Option<String> {
    if let Some((_, to)) = GLOBAL_NAMES.iter().map(&global).find(|(f, _)| *f == name) {
        return Some(to.to_string());
    }
    let (index, rest) = name.strip_prefix(from_layer)?.split_once('.')?;
    let index: usize = index.parse().ok()?;
    let (_, to) = LAYER_NAMES.iter().map(&global).find(|(f, _)| *f == rest)?;
    Some(format!("{to_layer}{index}.{to}"))
}

/// The GGUF name of a decoder tensor given by its HF name without the `model.` prefix
/// (`layers.3.self_attn.q_proj.weight` -> `blk.3.attn_q.weight`); `None` for names
/// llama.cpp's gemma4 layout does not have.
pub fn gguf_name(hf: &str) -> Option<String> {
    map_name(hf, "layers.", "blk.", |&(h, g)| (h, g))
}

/// The HF name (without `model.`) of a gemma4 GGUF tensor; `None` for tensors wgemma does
/// not read (`rope_freqs`, which becomes the config's partial rotary factor).
pub fn hf_name(gguf: &str) -> Option<String> {
    map_name(gguf, "blk.", "layers.", |&(h, g)| (g, h))
}

/// The GGUF name of an assistant tensor given by its FULL HF name (`pre_projection.weight`,
/// `model.layers.0.self_attn.q_proj.weight`, `masked_embedding.token_ordering`).
pub fn assistant_gguf_name(hf: &str) -> Option<String> {
    Some(
        match hf {
            "pre_projection.weight" => "nextn.pre_projection.weight",
            "post_projection.weight" => "nextn.post_projection.weight",
            "masked_embedding.centroids.weight" => "masked_embd_centroids.weight",
            "masked_embedding.token_ordering" => "masked_embd_ordering",
            _ => return gguf_name(hf.strip_prefix("model.")?),
        }
        .to_string(),
    )
}

/// Typed access to `{arch}.` keys, each failure naming the key and what it held.
pub struct Meta<'f, 'a> {
    pub file: &'f GgufFile<'a>,
    pub arch: &'f str,
}

impl Meta<'_, '_> {
    pub fn key(&self, suffix: &str) -> String {
        format!("{}.{suffix}", self.arch)
    }

    fn value(&self, suffix: &str) -> Option<&Value> {
        self.file.get(&self.key(suffix))
    }

    /// An unsigned integer key; `None` when absent.
    pub fn opt_u(&self, suffix: &str) -> Result<Option<usize>> {
        match self.value(suffix) {
            None => Ok(None),
            Some(v) => v.as_u64().map(|u| Some(u as usize)).ok_or_else(|| {
                Error::invalid(
                    OP,
                    self.key(suffix),
                    "an unsigned integer",
                    format!("a {}", v.type_name()),
                )
            }),
        }
    }

    pub fn u(&self, suffix: &str) -> Result<usize> {
        self.opt_u(suffix)?
            .ok_or_else(|| Error::invalid(OP, self.key(suffix), "an unsigned integer", "missing"))
    }

    pub fn opt_f(&self, suffix: &str) -> Result<Option<f64>> {
        match self.value(suffix) {
            None => Ok(None),
            Some(v) => v.as_f64().map(Some).ok_or_else(|| {
                Error::invalid(
                    OP,
                    self.key(suffix),
                    "a number",
                    format!("a {}", v.type_name()),
                )
            }),
        }
    }

    /// A per-layer integer key: one value for every layer, or an array of `layers`.
    pub fn per_layer(&self, suffix: &str, layers: usize) -> Result<Option<Vec<usize>>> {
        match self.value(suffix) {
            None => Ok(None),
            Some(Value::Array(items)) => {
                if items.len() != layers {
                    return Err(Error::invalid(
                        OP,
                        format!("entries of {}", self.key(suffix)),
                        layers,
                        items.len(),
                    ));
                }
                items
                    .iter()
                    .map(|v| {
                        v.as_u64().map(|u| u as usize).ok_or_else(|| {
                            Error::invalid(
                                OP,
                                format!("an entry of {}", self.key(suffix)),
                                "an unsigned integer",
                                format!("a {}", v.type_name()),
                            )
                        })
                    })
                    .collect::<Result<Vec<_>>>()
                    .map(Some)
            }
            Some(v) => Ok(Some(vec![
                self.u(suffix).map_err(|_| {
                    Error::invalid(
                        OP,
                        self.key(suffix),
                        "an unsigned integer or an array of them",
                        format!("a {}", v.type_name()),
                    )
                })?;
                layers
            ])),
        }
    }

    /// `attention.sliding_window_pattern`: true for sliding layers.
    pub fn sliding_pattern(&self, layers: usize) -> Result<Vec<bool>> {
        let key = self.key("attention.sliding_window_pattern");
        match self.file.get(&key) {
            Some(Value::Array(items)) if items.len() == layers => items
                .iter()
                .map(|v| match v {
                    Value::Bool(b) => Ok(*b),
                    other => Err(Error::invalid(
                        OP,
                        format!("an entry of {key}"),
                        "a bool",
                        format!("a {}", other.type_name()),
                    )),
                })
                .collect(),
            Some(Value::Array(items)) => Err(Error::invalid(
                OP,
                format!("entries of {key}"),
                layers,
                items.len(),
            )),
            _ => Err(Error::invalid(
                OP,
                key.clone(),
                format!("an array of {layers} bools"),
                self.file.describe(&key),
            )),
        }
    }
}

/// The rows of a 2-D tensor (`dims[1]`), or an error naming it.
fn rows_of(file: &GgufFile<'_>, name: &str) -> Result<usize> {
    let t = file
        .tensor(name)
        .ok_or_else(|| Error::invalid(OP, format!("tensor `{name}`"), "present", "missing"))?;
    match t.dims[..] {
        [_, rows] => Ok(rows),
        _ => Err(Error::invalid(
            OP,
            format!("dimensions of `{name}`"),
            "2",
            t.dims.len(),
        )),
    }
}

/// The partial rotary factor of full layers from `rope_freqs` (1 for rotated pairs, 1e30
/// for the rest, rotated pairs first, as the converter writes it); 1 without the tensor.
fn partial_rotary_factor(file: &GgufFile<'_>, head_dim: usize) -> Result<f64> {
    let Some(t) = file.tensor("rope_freqs.weight") else {
        return Ok(1.0);
    };
    let values = super::quant::dequantize_to_vec(t.ty, t.data)?;
    if values.len() != head_dim / 2 {
        return Err(Error::invalid(
            OP,
            "elements of `rope_freqs.weight` (full layers' head_dim / 2)",
            head_dim / 2,
            values.len(),
        ));
    }
    let rotated = values.iter().take_while(|&&v| v == 1.0).count();
    if values[rotated..].iter().any(|&v| v < 1e29) {
        return Err(Error::invalid(
            OP,
            "`rope_freqs.weight`",
            "1.0 for the rotated pairs then 1e30 (llama.cpp's proportional RoPE)",
            format!("{:?}", &values[..values.len().min(8)]),
        ));
    }
    Ok(2.0 * rotated as f64 / head_dim as f64)
}

/// The HF `Gemma4TextConfig` (as config.json's `text_config`) that a `gemma4` GGUF
/// describes. Sizes come from the tensors where the metadata does not carry them
/// (vocabulary, per-layer vocabulary, K = V on full layers, an untied lm_head).
pub fn text_config(file: &GgufFile<'_>) -> Result<serde_json::Value> {
    check_arch(file, ARCH, "a Gemma 4 text model")?;
    decoder_config(file, ARCH)
}

/// The HF `Gemma4AssistantConfig` (config.json) of a `gemma4-assistant` file: its decoder
/// as `text_config`, `backbone_hidden_size` from `embedding_length_out`, the centroid head
/// when `masked_embd_centroids` is present. llama.cpp's converter writes no key for the
/// head's top-k (llama.cpp drafts with the dense lm_head); `{arch}.centroid_intermediate_top_k`
/// is read when present, else HF's default, 32.
pub fn assistant_config(file: &GgufFile<'_>) -> Result<serde_json::Value> {
    check_arch(file, ASSISTANT_ARCH, "a Gemma 4 MTP assistant")?;
    let m = Meta {
        file,
        arch: ASSISTANT_ARCH,
    };
    let mut c = json!({
        "model_type": "gemma4_assistant",
        "backbone_hidden_size": m.u("embedding_length_out")?,
        "tie_word_embeddings": true,
        "text_config": decoder_config(file, ASSISTANT_ARCH)?,
    });
    if file.tensor("masked_embd_centroids.weight").is_some() {
        c["use_ordered_embeddings"] = json!(true);
        c["num_centroids"] = json!(rows_of(file, "masked_embd_centroids.weight")?);
        c["centroid_intermediate_top_k"] =
            json!(m.opt_u("centroid_intermediate_top_k")?.unwrap_or(32));
    }
    Ok(c)
}

fn check_arch(file: &GgufFile<'_>, want: &str, what: &str) -> Result<()> {
    let arch = file.architecture()?;
    if arch != want {
        return Err(Error::invalid(
            OP,
            "general.architecture",
            format!("\"{want}\" ({what})"),
            format!("{arch:?}"),
        ));
    }
    Ok(())
}

/// The decoder's `Gemma4TextConfig` from the `{arch}.` keys and the tensors.
fn decoder_config(file: &GgufFile<'_>, arch: &str) -> Result<serde_json::Value> {
    let m = Meta { file, arch };
    let layers = m.u("block_count")?;
    if layers == 0 || layers > 1024 {
        return Err(Error::invalid(OP, m.key("block_count"), "1..=1024", layers));
    }
    let hidden = m.u("embedding_length")?;
    let heads = m.u("attention.head_count")?;
    let sliding = m.sliding_pattern(layers)?;
    let head_dim_full = m.u("attention.key_length")?;
    let head_dim_swa = m
        .opt_u("attention.key_length_swa")?
        .unwrap_or(head_dim_full);
    let (kv_swa, kv_full) = kv_heads_by_kind(&m, heads, &sliding)?;
    let shared = m.opt_u("attention.shared_kv_layers")?.unwrap_or(0);
    if shared > layers {
        return Err(Error::invalid(
            OP,
            m.key("attention.shared_kv_layers"),
            format!("at most block_count ({layers})"),
            shared,
        ));
    }
    let first_shared = layers - shared;
    let (intermediate, double_wide) = feed_forward_width(&m, layers, first_shared)?;
    let vocab = rows_of(file, "token_embd.weight")?;
    if file.tensor("output.weight").is_some() {
        return Err(Error::invalid(
            OP,
            "tensor `output.weight`",
            "absent (Gemma 4 ties the lm_head to token_embd)",
            "present",
        ));
    }
    let ple = m.opt_u("embedding_length_per_layer_input")?.unwrap_or(0);
    let ple_vocab = if ple > 0 {
        Some(rows_of(file, "per_layer_token_embd.weight")?)
    } else {
        None
    };
    // K = V on full layers: llama.cpp reads attn_v as optional and uses K for V when absent.
    let k_eq_v = (0..first_shared).any(|i| {
        !sliding[i]
            && file.tensor(&format!("blk.{i}.attn_k.weight")).is_some()
            && file.tensor(&format!("blk.{i}.attn_v.weight")).is_none()
    });
    let experts = m.opt_u("expert_count")?.filter(|&e| e > 0);
    let DecoderFloats {
        theta_full,
        theta_swa,
        eps,
        softcap,
    } = DecoderFloats::read(&m)?;
    let factor = partial_rotary_factor(file, head_dim_full)?;
    let layer_types: Vec<&str> = sliding.iter().map(|&s| layer_type(s)).collect();
    let mut c = json!({
        "model_type": "gemma4_text",
        "vocab_size": vocab,
        "hidden_size": hidden,
        "intermediate_size": intermediate,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_swa,
        "head_dim": head_dim_swa,
        "global_head_dim": head_dim_full,
        "rms_norm_eps": eps,
        "sliding_window": m.u("attention.sliding_window")?,
        "layer_types": layer_types,
        "num_kv_shared_layers": shared,
        "use_double_wide_mlp": double_wide,
        "attention_k_eq_v": k_eq_v,
        "tie_word_embeddings": true,
        "hidden_activation": "gelu_pytorch_tanh",
        "rope_parameters": {
            "sliding_attention": {"rope_type": "default", "rope_theta": theta_swa},
            "full_attention": {
                "rope_type": "proportional",
                "rope_theta": theta_full,
                "partial_rotary_factor": factor,
            },
        },
    });
    if let Some(kv) = kv_full.filter(|&kv| kv != kv_swa) {
        c["num_global_key_value_heads"] = json!(kv);
    }
    if let Some(n) = m.opt_u("context_length")? {
        c["max_position_embeddings"] = json!(n);
    }
    if let Some(cap) = softcap {
        c["final_logit_softcapping"] = json!(cap);
    }
    if let Some(v) = ple_vocab {
        c["hidden_size_per_layer_input"] = json!(ple);
        c["vocab_size_per_layer_input"] = json!(v);
    }
    if let Some(e) = experts {
        c["enable_moe_block"] = json!(true);
        c["num_experts"] = json!(e);
        c["top_k_experts"] = json!(m.u("expert_used_count")?);
        c["moe_intermediate_size"] = json!(m.u("expert_feed_forward_length")?);
    }
    let tok = |key: &str| file.get(key).and_then(Value::as_u64);
    for (gguf, hf) in [
        ("tokenizer.ggml.bos_token_id", "bos_token_id"),
        ("tokenizer.ggml.eos_token_id", "eos_token_id"),
        ("tokenizer.ggml.padding_token_id", "pad_token_id"),
    ] {
        if let Some(id) = tok(gguf) {
            c[hf] = json!(id);
        }
    }
    Ok(c)
}

/// HF's `layer_types` entry of a sliding or a full attention layer.
fn layer_type(sliding: bool) -> &'static str {
    if sliding {
        "sliding_attention"
    } else {
        "full_attention"
    }
}

/// `(kv heads of sliding layers, of full layers if any)` from the per-layer
/// `attention.head_count_kv` (default `heads`); every layer of a kind must agree, as HF's
/// config has one count per kind.
fn kv_heads_by_kind(
    m: &Meta<'_, '_>,
    heads: usize,
    sliding: &[bool],
) -> Result<(usize, Option<usize>)> {
    let layers = sliding.len();
    let kv_heads = m
        .per_layer("attention.head_count_kv", layers)?
        .unwrap_or(vec![heads; layers]);
    let kv_of = |want_sliding: bool| {
        (0..layers)
            .find(|&i| sliding[i] == want_sliding)
            .map(|i| kv_heads[i])
    };
    let kv_swa = kv_of(true).or(kv_of(false)).unwrap_or(heads);
    let kv_full = kv_of(false);
    for (i, &kv) in kv_heads.iter().enumerate() {
        let want = if sliding[i] {
            kv_swa
        } else {
            kv_full.unwrap_or(kv_swa)
        };
        if kv != want {
            return Err(Error::invalid(
                OP,
                format!("{} of layer {i}", m.key("attention.head_count_kv")),
                format!("{want} (the same for every layer of its kind)"),
                kv,
            ));
        }
    }
    Ok((kv_swa, kv_full))
}

/// `(intermediate_size, use_double_wide_mlp)` from the per-layer `feed_forward_length`:
/// one width, doubled on the KV-shared layers from `first_shared` on or not at all.
fn feed_forward_width(
    m: &Meta<'_, '_>,
    layers: usize,
    first_shared: usize,
) -> Result<(usize, bool)> {
    let ff = m
        .per_layer("feed_forward_length", layers)?
        .ok_or_else(|| Error::invalid(OP, m.key("feed_forward_length"), "present", "missing"))?;
    let double_wide = first_shared < layers && ff[first_shared] == 2 * ff[0];
    for (i, &f) in ff.iter().enumerate() {
        let want = if double_wide && i >= first_shared {
            2 * ff[0]
        } else {
            ff[0]
        };
        if f != want {
            return Err(Error::invalid(
                OP,
                format!("{} of layer {i}", m.key("feed_forward_length")),
                format!("{want} (HF: intermediate_size, doubled on KV-shared layers or not)"),
                f,
            ));
        }
    }
    Ok((ff[0], double_wide))
}

/// The decoder's float keys, each checked by the config's own rules here: JSON has no
/// NaN, so a NaN would reach the config as null and mean "default" or "none" instead of
/// being refused.
struct DecoderFloats {
    theta_full: f64,
    theta_swa: f64,
    eps: f64,
    softcap: Option<f64>,
}

impl DecoderFloats {
    fn read(m: &Meta<'_, '_>) -> Result<DecoderFloats> {
        let checked = |suffix: &str, check: &dyn Fn(f64) -> Result<()>| -> Result<Option<f64>> {
            let v = m.opt_f(suffix)?;
            if let Some(v) = v {
                check(v).map_err(|e| e.within(format!("GGUF key {}", m.key(suffix))))?;
            }
            Ok(v)
        };
        Ok(DecoderFloats {
            theta_full: checked("rope.freq_base", &|t| check_rope_theta("rope_theta", t))?
                .unwrap_or(1e6),
            theta_swa: checked("rope.freq_base_swa", &|t| check_rope_theta("rope_theta", t))?
                .unwrap_or(1e4),
            eps: checked("attention.layer_norm_rms_epsilon", &check_rms_norm_eps)?.unwrap_or(1e-6),
            softcap: checked("final_logit_softcapping", &check_softcap)?,
        })
    }
}
