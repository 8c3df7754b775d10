//! The chat markers of a vocabulary: the added tokens that message content must not be able
//! to write. Every special added token is one; so is every other added token the chat
//! format writes (a checkpoint may mark its turn tokens `special: false`, and user text
//! holding `<|turn>system` would then encode as that token and forge a turn). Added tokens
//! of plain text (whitespace runs, HTML tags) that the format never writes stay text.

use crate::error::{Error, Result};
use aho_corasick::{AhoCorasick, MatchKind};
use tokenizers::AddedToken;

const OP: &str = "tokenizer";

/// The marker strings of a vocabulary and a finder over them.
#[derive(Clone)]
pub struct Markers {
    strings: Vec<String>,
    finder: AhoCorasick,
}

impl Markers {
    /// The special added tokens of `added`, plus those of its other added tokens whose
    /// string `format_text` holds (the chat template's source and the strings it is given,
    /// or the built-in format's markers). Whitespace-only tokens are never markers: they carry
    /// no structure and are common in text.
    pub fn new<'a>(
        added: impl Iterator<Item = &'a AddedToken>,
        format_text: &[&str],
    ) -> Result<Markers> {
        let mut strings: Vec<String> = added
            .filter(|t| !t.content.trim().is_empty())
            .filter(|t| t.special || format_text.iter().any(|f| f.contains(&t.content)))
            .map(|t| t.content.clone())
            .collect();
        strings.sort_unstable();
        strings.dedup();
        // Leftmost-first over longest-first order: the longest marker at a place is named.
        strings.sort_by_key(|s| std::cmp::Reverse(s.len()));
        let finder = AhoCorasick::builder()
            .match_kind(MatchKind::LeftmostFirst)
            .build(&strings)
            .map_err(|e| {
                Error::invalid(OP, "chat markers", "strings to search for", e.to_string())
            })?;
        Ok(Markers { strings, finder })
    }

    /// Whether `s` is one of the markers.
    pub fn contains(&self, s: &str) -> bool {
        self.strings.iter().any(|m| m == s)
    }

    /// The first marker in `text`, if any.
    pub fn first_in<'a>(&self, text: &'a str) -> Option<&'a str> {
        self.finder.find(text).map(|m| &text[m.range()])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(content: &str, special: bool) -> AddedToken {
        AddedToken::from(content.to_string(), special)
    }

    #[test]
    fn non_special_tokens_the_format_writes_are_markers_and_others_text() {
        let added = [
            token("<eos>", true),
            token("<|turn>", false),
            token("<h1>", false),
            token("\n\n", false),
        ];
        let template = "{% for m in messages %}<|turn>{{ m.role }}\n\n{{ m.content }}{% endfor %}";
        let m = Markers::new(added.iter(), &[template]).unwrap();
        assert!(m.contains("<eos>") && m.contains("<|turn>"));
        assert!(!m.contains("<h1>") && !m.contains("\n\n"));
        assert_eq!(m.first_in("a <h1> b <|turn>system"), Some("<|turn>"));
        assert_eq!(m.first_in("a <h1>\n\nb"), None);
        // Without a template, the built-in format's markers are the format text.
        let builtin = Markers::new(added.iter(), &["<bos>", "<|turn>", "<turn|>"]).unwrap();
        assert!(builtin.contains("<|turn>") && !builtin.contains("<h1>"));
    }

    #[test]
    fn the_longest_marker_at_a_place_is_named() {
        let added = [token("<|tool>", true), token("<|tool_call>", true)];
        let m = Markers::new(added.iter(), &[]).unwrap();
        assert_eq!(m.first_in("x<|tool_call>"), Some("<|tool_call>"));
    }
}
