//! Text in and out: `tokenizer.json` through the `tokenizers` crate, Gemma 4's chat format,
//! stop tokens, and streaming detokenisation.

use crate::error::{Error, Result};

const OP: &str = "tokenizer";

/// Gemma 4 turn markers.
pub const TURN_START: &str = "<|turn>";
pub const TURN_END: &str = "<turn|>";
pub const BOS: &str = "<bos>";

/// A loaded tokenizer.
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    bos_id: Option<u32>,
}

impl Tokenizer {
    /// Parses `tokenizer.json` bytes.
    pub fn from_bytes(json: &[u8]) -> Result<Tokenizer> {
        let inner = tokenizers::Tokenizer::from_bytes(json).map_err(|e| {
            Error::invalid(
                OP,
                "tokenizer.json",
                "a Hugging Face tokenizer file",
                e.to_string(),
            )
        })?;
        let bos_id = inner.token_to_id(BOS);
        Ok(Tokenizer { inner, bos_id })
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

    /// Stop tokens: the config's EOS ids plus `<turn|>` when the vocabulary has it.
    pub fn stop_ids(&self, eos_ids: &[u32]) -> Vec<u32> {
        let mut ids = eos_ids.to_vec();
        ids.extend(self.token_id(TURN_END));
        ids.sort_unstable();
        ids.dedup();
        ids
    }
}

/// Turns a growing token sequence into text pieces as they become printable: a piece is
/// emitted only once it does not end in an incomplete UTF-8 sequence (decoded as U+FFFD).
pub struct TextStream<'t> {
    tokenizer: &'t Tokenizer,
    ids: Vec<u32>,
    emitted: usize,
}

impl<'t> TextStream<'t> {
    pub fn new(tokenizer: &'t Tokenizer) -> Self {
        TextStream {
            tokenizer,
            ids: Vec::new(),
            emitted: 0,
        }
    }

    /// Adds a token; returns the new printable text, if any.
    pub fn push(&mut self, id: u32) -> Result<Option<String>> {
        self.ids.push(id);
        let text = self.tokenizer.decode(&self.ids)?;
        if text.ends_with('\u{fffd}')
            || text.len() <= self.emitted
            || !text.is_char_boundary(self.emitted)
        {
            return Ok(None);
        }
        let piece = text[self.emitted..].to_string();
        self.emitted = text.len();
        Ok(Some(piece))
    }

    /// All text so far.
    pub fn text(&self) -> Result<String> {
        self.tokenizer.decode(&self.ids)
    }
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
mod tests {
    use super::*;

    fn tiny() -> Tokenizer {
        Tokenizer::from_bytes(
            tiny_tokenizer_json(&["hello", "world", "user", "model", " "]).as_bytes(),
        )
        .unwrap()
    }

    #[test]
    fn chat_format_and_stop_ids() {
        let t = tiny();
        let ids = t.encode_chat("hello world").unwrap();
        let id = |s: &str| t.token_id(s).unwrap();
        assert_eq!(
            ids,
            vec![
                id(BOS),
                id(TURN_START),
                id("user"),
                id("\n"),
                id("hello"),
                id(" "),
                id("world"),
                id(TURN_END),
                id("\n"),
                id(TURN_START),
                id("model"),
                id("\n")
            ]
        );
        assert_eq!(t.stop_ids(&[1]), vec![1, id(TURN_END)]);
        assert_eq!(
            t.encode_prompt("hello").unwrap(),
            vec![id(BOS), id("hello")]
        );
    }

    #[test]
    fn stream_emits_new_text_only() {
        let t = tiny();
        let mut s = TextStream::new(&t);
        let hello = t.token_id("hello").unwrap();
        let space = t.token_id(" ").unwrap();
        assert_eq!(s.push(hello).unwrap().as_deref(), Some("hello"));
        assert_eq!(s.push(space).unwrap().as_deref(), Some(" "));
        assert_eq!(s.push(t.token_id(TURN_END).unwrap()).unwrap(), None);
        assert_eq!(s.text().unwrap(), "hello ");
    }

    #[test]
    fn bad_tokenizer_and_missing_chat_tokens_are_errors() {
        assert!(Tokenizer::from_bytes(b"{}").is_err());
        let mut json: serde_json::Value =
            serde_json::from_str(&tiny_tokenizer_json(&["a"])).unwrap();
        json["added_tokens"] = serde_json::json!([]);
        json["model"]["vocab"]
            .as_object_mut()
            .unwrap()
            .remove(TURN_START);
        let t = Tokenizer::from_bytes(json.to_string().as_bytes()).unwrap();
        let err = t.encode_chat("a").unwrap_err().to_string();
        assert!(err.contains(TURN_START), "{err}");
    }
}
