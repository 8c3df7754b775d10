//! A conversation's prompt ids, with message content read as text: only the markup a
//! template writes may hold special tokens.

use super::{ChatMessage, OP};
use crate::error::{Error, Result};
use crate::text::tokenizer::Tokenizer;
use crate::text::tools::{strings_of, ToolDeclaration};

/// A conversation's prompt ids, with message content read as text: only the markup the
/// template (or the built-in format) writes may hold special tokens. `render` is the
/// template. Content without any special token's string is the common case: the whole
/// rendering is encoded at once, exactly as HF encodes it. Otherwise the conversation is
/// rendered a second time with a placeholder for each content; the placeholders' places
/// in that skeleton are where the contents went (verified: the skeleton with the contents
/// put back, as written or trimmed as Gemma's templates trim them, must be the rendering),
/// and there the contents are encoded with special tokens inert. A template that changes
/// content in other ways cannot be checked and such content is refused.
pub fn encode_conversation(
    tok: &Tokenizer,
    messages: &[ChatMessage],
    render: &dyn Fn(&[ChatMessage]) -> Result<String>,
) -> Result<Vec<u32>> {
    encode_conversation_with_tools(tok, messages, &[], render)
}

/// [`encode_conversation`] of a conversation with tools (`render` renders them). The tools'
/// declarations and the messages' calls and responses are written by the template as
/// markup, so none of their text may hold a special token (refused by name): only a
/// message's content is encoded inert.
pub fn encode_conversation_with_tools(
    tok: &Tokenizer,
    messages: &[ChatMessage],
    tools: &[ToolDeclaration],
    render: &dyn Fn(&[ChatMessage]) -> Result<String>,
) -> Result<Vec<u32>> {
    let special_in = |place: String, value: &serde_json::Value| -> Result<()> {
        let mut found = Vec::new();
        strings_of(value, &mut found);
        match found.iter().find_map(|s| tok.first_marker(s)) {
            Some(special) => Err(Error::invalid(
                OP,
                place,
                "text without special tokens",
                format!("the special token {special:?}"),
            )),
            None => Ok(()),
        }
    };
    for (i, t) in tools.iter().enumerate() {
        special_in(format!("tools[{i}]"), &t.to_template_value())?;
    }
    for (i, m) in messages.iter().enumerate() {
        for (j, c) in m.tool_calls.iter().enumerate() {
            let value = serde_json::to_value(c).map_err(|e| {
                Error::invalid(OP, "tool call", "a serialisable call", e.to_string())
            })?;
            special_in(format!("messages[{i}].tool_calls[{j}]"), &value)?;
        }
        for (j, r) in m.tool_responses.iter().enumerate() {
            let value = serde_json::json!([r.name, r.response]);
            special_in(format!("messages[{i}].tool_responses[{j}]"), &value)?;
        }
    }
    for (i, m) in messages.iter().enumerate() {
        let named = [("role", Some(&m.role)), ("name", m.name.as_ref())];
        for (field, text) in named {
            if let Some(special) = text.and_then(|t| tok.first_marker(t)) {
                return Err(Error::invalid(
                    OP,
                    format!("messages[{i}].{field}"),
                    format!("a {field} without special tokens (a template writes it as markup)"),
                    format!("one holding the special token {special:?}"),
                ));
            }
        }
    }
    let text = render(messages)?;
    if !messages.iter().any(|m| tok.has_marker(&m.content)) {
        return tok.encode(&text);
    }
    let marked: Vec<ChatMessage> = messages
        .iter()
        .enumerate()
        .map(|(i, m)| ChatMessage {
            content: placeholder(i),
            ..m.clone()
        })
        .collect();
    let skeleton = render(&marked)?;
    for trim in [false, true] {
        let Some(parts) = fill_skeleton(&skeleton, messages, trim) else {
            continue;
        };
        let joined: String = parts.iter().map(|(_, t)| *t).collect();
        if joined != text {
            continue;
        }
        let mut ids = Vec::new();
        for (is_content, part) in parts {
            if is_content {
                ids.extend(tok.encode_inert(part)?);
            } else {
                ids.extend(tok.encode(part)?);
            }
        }
        return Ok(ids);
    }
    let (i, special) = messages
        .iter()
        .enumerate()
        .find_map(|(i, m)| tok.first_marker(&m.content).map(|s| (i, s)))
        .expect("a content with a special token");
    Err(Error::invalid(
        OP,
        format!("messages[{i}].content"),
        "text without special tokens, for a chat template that changes content",
        format!("the special token {special:?}"),
    ))
}

/// Private-use delimiters around a message's index: text no real template writes.
const OPEN: char = '\u{F0000}';
const CLOSE: char = '\u{F0001}';

fn placeholder(i: usize) -> String {
    format!("{OPEN}{i}{CLOSE}")
}

/// The skeleton cut into markup (`false`) and message contents (`true`) put back where
/// their placeholders are; None if a placeholder is malformed or names no message.
fn fill_skeleton<'a>(
    skeleton: &'a str,
    messages: &'a [ChatMessage],
    trim: bool,
) -> Option<Vec<(bool, &'a str)>> {
    let mut parts = Vec::new();
    let mut rest = skeleton;
    while let Some(start) = rest.find(OPEN) {
        parts.push((false, &rest[..start]));
        let after = &rest[start + OPEN.len_utf8()..];
        let end = after.find(CLOSE)?;
        let content = &messages.get(after[..end].parse::<usize>().ok()?)?.content;
        parts.push((true, if trim { content.trim() } else { content }));
        rest = &after[end + CLOSE.len_utf8()..];
    }
    parts.push((false, rest));
    parts.retain(|(_, t)| !t.is_empty());
    Some(parts)
}
