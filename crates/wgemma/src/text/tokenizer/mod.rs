//! Text in and out: `tokenizer.json` through the `tokenizers` crate, Gemma 4's chat format,
//! stop tokens, and streaming detokenisation (`text_stream`).

mod text_stream;

pub use text_stream::TextStream;

use super::markers::Markers;
use super::tool_markers::{
    STRING_MARK, TOOL_CALL_END, TOOL_CALL_START, TOOL_END, TOOL_RESPONSE_END, TOOL_RESPONSE_START,
    TOOL_START,
};
use crate::error::{Error, Result};

const OP: &str = "tokenizer";

/// Gemma 4 turn markers.
pub const TURN_START: &str = "<|turn>";
pub const TURN_END: &str = "<turn|>";
pub const BOS: &str = "<bos>";

/// What Gemma 4's built-in turn format writes (a checkpoint without a template of its own):
/// its chat markers ([`Tokenizer::mark_format_tokens`]).
pub const BUILTIN_FORMAT_MARKERS: [&str; 10] = [
    BOS,
    TURN_START,
    TURN_END,
    TOOL_START,
    TOOL_END,
    TOOL_CALL_START,
    TOOL_CALL_END,
    TOOL_RESPONSE_START,
    TOOL_RESPONSE_END,
    STRING_MARK,
];

/// A loaded tokenizer.
#[derive(Clone)]
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    /// The same tokenizer with its chat markers inert (read as text), built when message
    /// content first needs it: user text must not be able to write a turn marker.
    inert: std::sync::OnceLock<tokenizers::Tokenizer>,
    /// The added tokens message content must not write (content that has none is encoded
    /// whole): the special ones, and those the chat format writes ([`Markers`]).
    markers: Markers,
    /// The longest token's text in bytes: a prompt of n bytes has at least about
    /// n / this many tokens ([`Tokenizer::min_tokens`]).
    max_token_bytes: usize,
    bos_id: Option<u32>,
}

impl Tokenizer {
    /// Parses `tokenizer.json` bytes. The JSON and its top-level shape are checked here
    /// before the `tokenizers` crate sees them: that crate panics on some malformed files
    /// (a truncated `{"decoder": {` did), and a panic is no error message. Any panic left
    /// inside it is caught at this boundary as a last resort ([`quietly_catch`]).
    pub fn from_bytes(json: &[u8]) -> Result<Tokenizer> {
        check_tokenizer_json(json)?;
        let mut inner = quietly_catch(|| tokenizers::Tokenizer::from_bytes(json))
            .map_err(|panic| {
                Error::invalid(
                    OP,
                    "tokenizer.json",
                    "a Hugging Face tokenizer file",
                    format!("one the tokenizers crate cannot read ({panic})"),
                )
            })?
            .map_err(|e| {
                Error::invalid(
                    OP,
                    "tokenizer.json",
                    "a Hugging Face tokenizer file",
                    e.to_string(),
                )
            })?;
        // HF turns truncation and padding off for generation; a tokenizer.json that sets
        // them would otherwise cut or pad every prompt without a word.
        let _ = inner.with_truncation(None);
        inner.with_padding(None);
        let markers = Markers::new(inner.get_added_tokens_decoder().values(), &[])?;
        let max_token_bytes = inner
            .get_vocab(true)
            .keys()
            .map(String::len)
            .max()
            .unwrap_or(1)
            .max(1);
        let bos_id = inner.token_to_id(BOS);
        Ok(Tokenizer {
            inner,
            inert: std::sync::OnceLock::new(),
            markers,
            max_token_bytes,
            bos_id,
        })
    }

    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    pub fn token_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    /// Token ids of `text` as-is (special tokens in the text are recognised; no BOS added).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        let enc = self
            .inner
            .encode(text, false)
            .map_err(|e| Error::invalid(OP, "text to encode", "encodable text", e.to_string()))?;
        Ok(enc.get_ids().to_vec())
    }

    /// Makes every added token that `format_text` holds a chat marker too, special flag
    /// or not ([`Markers`]): `format_text` is what the chat format writes (the template's
    /// source and its BOS / EOS strings, or [`BUILTIN_FORMAT_MARKERS`]).
    pub fn mark_format_tokens(&mut self, format_text: &[&str]) -> Result<()> {
        self.markers = Markers::new(self.inner.get_added_tokens_decoder().values(), format_text)?;
        self.inert = std::sync::OnceLock::new();
        Ok(())
    }

    /// Token ids of `text` read as text: a chat marker's string in it (`<|turn>`) is split
    /// like any other text instead of becoming that token. For message content.
    pub fn encode_inert(&self, text: &str) -> Result<Vec<u32>> {
        if !self.has_marker(text) {
            return self.encode(text);
        }
        let inert = self.inert.get_or_init(|| self.marker_inert_tokenizer());
        let enc = inert
            .encode(text, false)
            .map_err(|e| Error::invalid(OP, "text to encode", "encodable text", e.to_string()))?;
        Ok(enc.get_ids().to_vec())
    }

    /// The tokenizer with every marker flagged special and special tokens encoded as text
    /// (the `tokenizers` crate reads only special tokens' strings as text).
    fn marker_inert_tokenizer(&self) -> tokenizers::Tokenizer {
        let mut t = self.inner.clone();
        let unflagged: Vec<tokenizers::AddedToken> = t
            .get_added_tokens_decoder()
            .into_values()
            .filter(|a| !a.special && self.markers.contains(&a.content))
            .map(|a| a.special(true))
            .collect();
        // Re-adding a token of the vocabulary keeps its id and takes the new flag.
        let _ = t.add_special_tokens(unflagged);
        t.set_encode_special_tokens(true);
        t
    }

    /// Whether `text` holds a chat marker's string (`<bos>`, `<|turn>`, ...).
    pub fn has_marker(&self, text: &str) -> bool {
        self.markers.first_in(text).is_some()
    }

    /// The first chat marker's string in `text`, if any (for error messages).
    pub fn first_marker<'a>(&self, text: &'a str) -> Option<&'a str> {
        self.markers.first_in(text)
    }

    /// A lower bound on the tokens of a text of `bytes` bytes, without encoding it: no token
    /// covers more than the vocabulary's longest token, and a normaliser is allowed to
    /// shrink the text up to 4x (NFKC and friends shrink far less). A prompt that cannot
    /// fit the context by this bound is refused before the tokenizer spends time on it.
    pub fn min_tokens(&self, bytes: usize) -> usize {
        bytes / (self.max_token_bytes * 4)
    }

    /// A plain prompt: `<bos>` then the text.
    pub fn encode_prompt(&self, text: &str) -> Result<Vec<u32>> {
        let mut ids: Vec<u32> = self.bos_id.into_iter().collect();
        ids.extend(self.encode(text)?);
        Ok(ids)
    }

    /// One user turn in Gemma 4's chat format, ready for the model's answer:
    /// `<bos><|turn>user\n{text}<turn|>\n<|turn>model\n`.
    pub fn encode_chat(&self, user_text: &str) -> Result<Vec<u32>> {
        for marker in [TURN_START, TURN_END] {
            if self.token_id(marker).is_none() {
                return Err(Error::invalid(
                    OP,
                    "chat format",
                    format!("a tokenizer with the `{marker}` token (Gemma 4)"),
                    "a tokenizer without it",
                ));
            }
        }
        let mut ids: Vec<u32> = self.bos_id.into_iter().collect();
        ids.extend(self.encode(&format!(
            "{TURN_START}user\n{user_text}{TURN_END}\n{TURN_START}model\n"
        ))?);
        Ok(ids)
    }

    /// The tokenizer as `tokenizer.json` text (a grammar engine reads each token's bytes
    /// from it).
    pub fn to_json(&self) -> Result<String> {
        self.inner
            .to_string(false)
            .map_err(|e| Error::invalid(OP, "tokenizer", "one that serialises", e.to_string()))
    }

    /// Text of `ids`, special tokens skipped.
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        self.inner.decode(ids, true).map_err(|e| {
            Error::invalid(
                OP,
                "token ids to decode",
                "ids of this vocabulary",
                e.to_string(),
            )
        })
    }

    /// Text of `ids` with special tokens skipped, except those of `keep`, which are written
    /// as their strings (Gemma 4's tool-call markers, which a reader of the text must see).
    pub fn decode_keeping(&self, ids: &[u32], keep: &[u32]) -> Result<String> {
        if keep.is_empty() {
            return self.decode(ids);
        }
        let mut text = String::new();
        for run in ids.split_inclusive(|id| keep.contains(id)) {
            match run.split_last() {
                Some((last, rest)) if keep.contains(last) => {
                    text.push_str(&self.decode(rest)?);
                    text.push_str(&self.inner.id_to_token(*last).unwrap_or_default());
                }
                _ => text.push_str(&self.decode(run)?),
            }
        }
        Ok(text)
    }

    /// Ids of the tool-call markers that are tokens of this vocabulary (what
    /// [`Tokenizer::decode_keeping`] keeps in a reply that may call tools).
    pub fn tool_marker_ids(&self) -> Vec<u32> {
        [
            TOOL_CALL_START,
            TOOL_CALL_END,
            STRING_MARK,
            TOOL_RESPONSE_START,
        ]
        .iter()
        .filter_map(|m| self.token_id(m))
        .collect()
    }

    /// Stop tokens: the config's EOS ids plus `<turn|>` when the vocabulary has it.
    pub fn stop_ids(&self, eos_ids: &[u32]) -> Vec<u32> {
        let mut ids = eos_ids.to_vec();
        ids.extend(self.token_id(TURN_END));
        ids.sort_unstable();
        ids.dedup();
        ids
    }
}

/// Checks that `json` is a JSON object with a `model` object (what every Hugging Face
/// tokenizer.json has), naming what was found otherwise.
fn check_tokenizer_json(json: &[u8]) -> Result<()> {
    let value: serde_json::Value = serde_json::from_slice(json)
        .map_err(|e| Error::invalid(OP, "tokenizer.json", "valid JSON", e.to_string()))?;
    let Some(object) = value.as_object() else {
        return Err(Error::invalid(
            OP,
            "tokenizer.json",
            "a JSON object",
            json_kind(&value),
        ));
    };
    match object.get("model") {
        Some(m) if m.is_object() => Ok(()),
        other => Err(Error::invalid(
            OP,
            "tokenizer.json field `model`",
            "an object (the tokenizer model: BPE, Unigram, WordLevel, WordPiece)",
            other.map_or("none".to_string(), json_kind),
        )),
    }
}

/// A JSON value's kind in words ("an object", "a number", ...), for error messages.
pub(crate) fn json_kind(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
    .to_string()
}

thread_local! {
    /// Set while [`quietly_catch`] runs on this thread: its panics are reported as errors.
    static CATCHING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f`, turning a panic into `Err(message)` without the panic hook printing it (the
/// caller reports it as an error). The hook stays the previous one for every other panic
/// and thread. On wasm32 (panic = abort) a panic still aborts.
pub fn quietly_catch<T>(f: impl FnOnce() -> T) -> std::result::Result<T, String> {
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !CATCHING.with(|c| c.get()) {
                previous(info);
            }
        }));
    });
    let was = CATCHING.with(|c| c.replace(true));
    let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    CATCHING.with(|c| c.set(was));
    out.map_err(|payload| {
        payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic".to_string())
    })
}

/// Parses prompt token ids written `5,17,9` (spaces allowed around each): at least one id,
/// each a u32. Errors name the offending item and its position.
pub fn parse_prompt_ids(s: &str) -> Result<Vec<u32>> {
    if s.trim().is_empty() {
        return Err(Error::invalid(
            OP,
            "prompt ids",
            "at least one comma-separated token id",
            "an empty list",
        ));
    }
    s.split(',')
        .enumerate()
        .map(|(i, t)| {
            t.trim().parse::<u32>().map_err(|_| {
                Error::invalid(
                    OP,
                    format!("prompt id #{} of {s:?}", i + 1),
                    "a token id (an integer 0..=4294967295)",
                    format!("{t:?}"),
                )
            })
        })
        .collect()
}

/// Builds a small word-level tokenizer with Gemma's special tokens (tests and demos).
pub fn tiny_tokenizer_json(words: &[&str]) -> String {
    let mut vocab = serde_json::Map::new();
    let specials = ["<pad>", "<eos>", BOS, "<unk>", TURN_START, TURN_END];
    for (i, t) in specials
        .iter()
        .chain(words.iter())
        .chain(["\n"].iter())
        .enumerate()
    {
        vocab.insert(t.to_string(), i.into());
    }
    let added: Vec<serde_json::Value> = specials
        .iter()
        .map(|t| {
            serde_json::json!({"id": vocab[*t], "content": t, "single_word": false, "lstrip": false,
                "rstrip": false, "normalized": false, "special": true})
        })
        .collect();
    serde_json::json!({
        "version": "1.0",
        "truncation": null, "padding": null,
        "added_tokens": added,
        "normalizer": null,
        "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "\\n| "}, "behavior": "Isolated", "invert": false},
        "post_processor": null,
        "decoder": {"type": "Fuse"},
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "<unk>"}
    })
    .to_string()
}

#[cfg(test)]
mod tests;
