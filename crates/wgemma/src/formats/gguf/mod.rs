//! GGUF files as llama.cpp writes them: Gemma 4 text models (`gemma4`) and MTP assistants
//! (`gemma4-assistant`) loaded straight from
//! the file users already have (Q4_0, Q4_K_M, Q8_0, F16, ...), with the tokenizer rebuilt
//! from the file's metadata.
//!
//! - [`reader`]: the container, from `&[u8]`, every field checked against the bytes
//!   (its metadata: [`metadata`]; the bounds-checked reads under both: `cursor`).
//! - [`quant`]: ggml's block formats and their bit-exact dequantisation (they live in
//!   [`crate::weights::ggml`]: the uploader places them like any other stored dtype).
//! - [`model`]: the gemma4 metadata as an HF config, and HF <-> llama.cpp tensor names.
//! - [`tokenizer`]: `tokenizer.json` from `tokenizer.ggml.*` (the chat template,
//!   `tokenizer.chat_template`, is read by [`crate::text::chat::ChatTemplate::from_gguf`], defined
//!   in [`tokenizer`]).
//! - [`source`]: the file as a [`crate::weights::source::WeightSource`].

mod cursor;
pub mod metadata;
pub mod model;
pub use crate::weights::ggml as quant;
#[cfg(test)]
mod memory_tests;
pub mod reader;
pub mod source;
#[cfg(test)]
mod tests;
pub mod tokenizer;

pub use reader::{GgufFile, TensorInfo, Value};
pub use source::{GgufAssistant, GgufWeights};

/// Whether `bytes` start like a GGUF file.
pub fn is_gguf(bytes: &[u8]) -> bool {
    bytes.starts_with(b"GGUF")
}

/// The config.json text (HF `Gemma4TextConfig`) of a `gemma4` file, for
/// [`crate::model::parse_config`].
pub fn config_json(file: &GgufFile<'_>) -> crate::Result<String> {
    Ok(model::text_config(file)?.to_string())
}

/// The config.json text (HF `Gemma4AssistantConfig`) of a `gemma4-assistant` file, for
/// [`crate::model::assistant::parse_assistant_config`].
pub fn assistant_config_json(file: &GgufFile<'_>) -> crate::Result<String> {
    Ok(model::assistant_config(file)?.to_string())
}

/// EOS ids of the file: `tokenizer.ggml.eos_token_id` and `eot_token_id` (Gemma 4's
/// `<turn|>`), when present.
pub fn eos_ids(file: &GgufFile<'_>) -> Vec<u32> {
    let mut ids: Vec<u32> = ["tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id"]
        .iter()
        .filter_map(|k| file.get(k).and_then(Value::as_u64))
        .filter_map(|v| u32::try_from(v).ok())
        .collect();
    ids.dedup();
    ids
}
