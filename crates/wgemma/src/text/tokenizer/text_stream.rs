//! Streaming detokenisation: text pieces of a growing token sequence as they become
//! printable.

use super::Tokenizer;
use crate::error::Result;

/// Turns a growing token sequence into text pieces as they become printable: a piece is
/// emitted only once it does not end in an incomplete UTF-8 sequence (decoded as U+FFFD).
/// It holds no tokenizer, so one can live beside the model that owns it (a server keeps
/// one per sequence).
#[derive(Debug, Clone, Default)]
pub struct TextStream {
    ids: Vec<u32>,
    emitted: usize,
    /// Special tokens written as text ([`Tokenizer::decode_keeping`]).
    keep: Vec<u32>,
}

impl TextStream {
    pub fn new() -> Self {
        TextStream::default()
    }

    /// A stream that writes the special tokens of `keep` as their strings.
    pub fn keeping(keep: Vec<u32>) -> Self {
        TextStream {
            keep,
            ..TextStream::default()
        }
    }

    /// Adds a token; returns the new printable text, if any.
    pub fn push(&mut self, tokenizer: &Tokenizer, id: u32) -> Result<Option<String>> {
        self.ids.push(id);
        let text = tokenizer.decode_keeping(&self.ids, &self.keep)?;
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

    /// Text of `ids` as this stream writes it.
    pub fn text_of(&self, tokenizer: &Tokenizer, ids: &[u32]) -> Result<String> {
        tokenizer.decode_keeping(ids, &self.keep)
    }

    /// All text so far.
    pub fn text(&self, tokenizer: &Tokenizer) -> Result<String> {
        tokenizer.decode_keeping(&self.ids, &self.keep)
    }
}
