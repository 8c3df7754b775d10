//! Strings from a model file, made safe to print on a terminal. A file's metadata (a GGUF
//! name, a tensor name, a tokenizer model) is whatever its writer put there: an escape
//! sequence in it would move the cursor, rewrite the screen or set the window title of
//! whoever runs `wgemma inspect`. Control characters and the invisible bidirectional
//! controls (which reorder what is shown) are written as Rust escapes (`\u{1b}`, `\n`).

use std::borrow::Cow;

/// Whether `c` changes how a terminal shows what follows it.
fn needs_escape(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// `text` with its control and bidirectional-control characters escaped (borrowed when it
/// has none).
pub fn printable(text: &str) -> Cow<'_, str> {
    if !text.chars().any(needs_escape) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if needs_escape(c) {
            out.extend(c.escape_debug());
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_sequences_and_bidi_controls_are_written_out() {
        assert!(matches!(printable("gemma-4 e2b"), Cow::Borrowed(_)));
        assert_eq!(
            printable("a\u{1b}]0;pwned\u{7}b"),
            "a\\u{1b}]0;pwned\\u{7}b"
        );
        assert_eq!(printable("x\ny\r\t"), "x\\ny\\r\\t");
        assert_eq!(printable("\u{9b}2J"), "\\u{9b}2J");
        assert_eq!(printable("evil\u{202e}txt.exe"), "evil\\u{202e}txt.exe");
        // Other text, non-ASCII included, is left alone.
        assert_eq!(printable("blk.0.ffn_up · 量"), "blk.0.ffn_up · 量");
    }
}
