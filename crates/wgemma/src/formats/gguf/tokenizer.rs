//! A Hugging Face `tokenizer.json` rebuilt from a GGUF's `tokenizer.ggml.*` metadata, so a
//! GGUF file alone gives text in and text out. Two of llama.cpp's tokenizer models:
//! - `gemma4` (and `llama` files that carry merges): SentencePiece-style BPE, spaces as
//!   `▁`, unknown bytes as `<0xNN>` tokens (byte fallback), as Gemma's tokenizer.json has it;
//! - `gpt2`: byte-level BPE (the trained KJV pair's tokenizer).
//!
//! Token types CONTROL (3) and USER_DEFINED (4) become added tokens (CONTROL ones special),
//! so chat markers such as `<|turn>` are matched whole in text.

use super::reader::{GgufFile, Value};
use crate::error::{Error, Result};
use crate::text::chat::ChatTemplate;
use crate::text::tokenizer::BOS;
use serde_json::json;

const OP: &str = "gguf tokenizer";
const CONTROL: u64 = 3;
const USER_DEFINED: u64 = 4;

fn strings<'v>(file: &'v GgufFile<'_>, key: &str) -> Result<Option<Vec<&'v str>>> {
    match file.get(key) {
        None => Ok(None),
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| {
                v.as_str().ok_or_else(|| {
                    Error::invalid(OP, format!("an entry of {key}"), "a string", v.type_name())
                })
            })
            .collect::<Result<Vec<_>>>()
            .map(Some),
        Some(other) => Err(Error::invalid(
            OP,
            key.to_string(),
            "an array of strings",
            other.type_name(),
        )),
    }
}

/// The tokenizer.json text, or `None` when the file carries no vocabulary (llama.cpp's
/// `no_vocab`, e.g. the synthetic E2B GGUF of the peer benchmark).
pub fn tokenizer_json(file: &GgufFile<'_>) -> Result<Option<String>> {
    let model = match file.get("tokenizer.ggml.model") {
        None => return Ok(None),
        Some(v) => v
            .as_str()
            .ok_or_else(|| Error::invalid(OP, "tokenizer.ggml.model", "a string", v.type_name()))?,
    };
    if model == "no_vocab" || model == "none" {
        return Ok(None);
    }
    let tokens = strings(file, "tokenizer.ggml.tokens")?.ok_or_else(|| {
        Error::invalid(
            OP,
            "tokenizer.ggml.tokens",
            "an array of strings",
            "missing",
        )
    })?;
    let merges = strings(file, "tokenizer.ggml.merges")?.unwrap_or_default();
    let types: Vec<u64> = match file.get("tokenizer.ggml.token_type") {
        Some(Value::Array(items)) if items.len() == tokens.len() => {
            items.iter().map(|v| v.as_u64().unwrap_or(1)).collect()
        }
        Some(Value::Array(items)) => {
            return Err(Error::invalid(
                OP,
                "entries of tokenizer.ggml.token_type",
                format!("{} (one per token)", tokens.len()),
                items.len(),
            ))
        }
        _ => vec![1; tokens.len()],
    };
    let mut vocab = serde_json::Map::with_capacity(tokens.len());
    let mut added = Vec::new();
    for (id, (&t, &ty)) in tokens.iter().zip(&types).enumerate() {
        // A repeated token string keeps its first id (the tokenizer maps text to one id).
        vocab.entry(t.to_string()).or_insert(json!(id));
        if ty == CONTROL || ty == USER_DEFINED {
            added.push(
                json!({"id": id, "content": t, "single_word": false, "lstrip": false,
                "rstrip": false, "normalized": false, "special": ty == CONTROL}),
            );
        }
    }
    let unk = tokens.contains(&"<unk>").then_some("<unk>");
    let (normalizer, pre_tokenizer, decoder, byte_fallback) = match model {
        "gemma4" | "llama" if !merges.is_empty() => (
            json!({"type": "Replace", "pattern": {"String": " "}, "content": "\u{2581}"}),
            serde_json::Value::Null,
            json!({"type": "Sequence", "decoders": [
                {"type": "Replace", "pattern": {"String": "\u{2581}"}, "content": " "},
                {"type": "ByteFallback"}, {"type": "Fuse"}]}),
            true,
        ),
        "gpt2" => (
            serde_json::Value::Null,
            json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true,
                   "use_regex": true}),
            json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true,
                   "use_regex": true}),
            false,
        ),
        other => {
            return Err(Error::invalid(
                OP,
                "tokenizer.ggml.model",
                "\"gemma4\" or \"gpt2\" with tokenizer.ggml.merges (BPE)",
                format!(
                    "{other:?}{}",
                    if merges.is_empty() {
                        " without merges"
                    } else {
                        ""
                    }
                ),
            ))
        }
    };
    Ok(Some(
        json!({
            "version": "1.0", "truncation": null, "padding": null,
            "added_tokens": added,
            "normalizer": normalizer,
            "pre_tokenizer": pre_tokenizer,
            "post_processor": null,
            "decoder": decoder,
            "model": {"type": "BPE", "dropout": null, "unk_token": unk,
                      "continuing_subword_prefix": null, "end_of_word_suffix": null,
                      "fuse_unk": byte_fallback, "byte_fallback": byte_fallback,
                      "ignore_merges": false, "vocab": vocab, "merges": merges},
        })
        .to_string(),
    ))
}

/// Errors of the chat template a GGUF carries name the session (the API that reports them),
/// as template errors of other sources do.
const CHAT_OP: &str = "session";

// Defined here rather than in text/chat.rs so that the text layer does not depend on the GGUF
// reader.
impl ChatTemplate {
    /// The template a GGUF file carries, if any: `tokenizer.chat_template` (llama.cpp's
    /// converter copies the HF tokenizer's template there), with `bos_token` / `eos_token`
    /// the strings of `tokenizer.ggml.bos_token_id` / `eos_token_id` in
    /// `tokenizer.ggml.tokens` (`<bos>` / `<eos>` when the file lacks them).
    pub fn from_gguf(file: &GgufFile<'_>) -> Result<Option<ChatTemplate>> {
        const KEY: &str = "tokenizer.chat_template";
        let source = match file.get(KEY) {
            None => return Ok(None),
            Some(v) => v.as_str().ok_or_else(|| {
                Error::invalid(
                    CHAT_OP,
                    format!("GGUF key {KEY}"),
                    "a string",
                    v.type_name(),
                )
            })?,
        };
        let token = |id_key: &str, default: &str| -> String {
            let id = file.get(id_key).and_then(|v| v.as_u64());
            match (id, file.get("tokenizer.ggml.tokens")) {
                (Some(id), Some(Value::Array(tokens))) => tokens
                    .get(id as usize)
                    .and_then(|t| t.as_str())
                    .unwrap_or(default)
                    .to_string(),
                _ => default.to_string(),
            }
        };
        let (bos, eos) = (
            token("tokenizer.ggml.bos_token_id", BOS),
            token("tokenizer.ggml.eos_token_id", "<eos>"),
        );
        ChatTemplate::new(source, &bos, &eos)
            .map(Some)
            .map_err(|e| e.within(format!("GGUF key {KEY}")))
    }
}
