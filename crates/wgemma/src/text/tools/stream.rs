//! The model's reply split into text and calls, piece by piece as it streams or whole.

use super::{parse_call, ToolCall};
use crate::text::tool_json::{partial_call, PartialCall};
use crate::text::tool_markers::{TOOL_CALL_END, TOOL_CALL_START};

/// A piece of the model's reply: text for the user, or a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplyPiece {
    Text(String),
    Call(ToolCall),
}

/// Splits the model's text into text and calls as it arrives: text is given back as soon
/// as it cannot be the start of `<|tool_call>`; a call when its `<tool_call|>` arrives. A
/// block that does not parse as a call is given back as the text it was.
#[derive(Debug, Default, Clone)]
pub struct ToolCallParser {
    /// Text not given back yet: a possible marker's start, or an open call.
    held: String,
    /// `held` starts with `<|tool_call>`.
    in_call: bool,
}

impl ToolCallParser {
    pub fn new() -> ToolCallParser {
        ToolCallParser::default()
    }

    /// The pieces that `text` (the next part of the reply) completes.
    pub fn feed(&mut self, text: &str) -> Vec<ReplyPiece> {
        self.held.push_str(text);
        let mut pieces = Vec::new();
        loop {
            if self.in_call {
                let Some(end) = self.held.find(TOOL_CALL_END) else {
                    return pieces;
                };
                let block: String = self.held.drain(..end + TOOL_CALL_END.len()).collect();
                self.in_call = false;
                let body = &block[TOOL_CALL_START.len()..block.len() - TOOL_CALL_END.len()];
                pieces.push(match parse_call(body) {
                    Ok(call) => ReplyPiece::Call(call),
                    Err(_) => ReplyPiece::Text(block),
                });
            } else if let Some(start) = self.held.find(TOOL_CALL_START) {
                if start > 0 {
                    pieces.push(ReplyPiece::Text(self.held.drain(..start).collect()));
                }
                self.in_call = true;
            } else {
                // Hold back the longest end that may begin the marker (ASCII, so a char
                // boundary).
                let keep = (1..TOOL_CALL_START.len())
                    .rev()
                    .find(|&k| self.held.ends_with(&TOOL_CALL_START[..k]))
                    .unwrap_or(0);
                let give = self.held.len() - keep;
                if give > 0 {
                    pieces.push(ReplyPiece::Text(self.held.drain(..give).collect()));
                }
                return pieces;
            }
        }
    }

    /// The call open so far (its `<tool_call|>` not come yet), once its name is whole: its
    /// name and its arguments as JSON text so far ([`crate::text::tool_json`]).
    pub fn open_call(&self) -> Option<PartialCall> {
        if !self.in_call {
            return None;
        }
        partial_call(&self.held[TOOL_CALL_START.len()..])
    }

    /// What is left when a reply is cut short (by its token budget) in the middle: the held
    /// text, and the call left open, as far as it was written (None when none is open, or
    /// when its name is not whole yet). A call's markup never comes back as text here.
    pub fn finish_cut(&mut self) -> (Vec<ReplyPiece>, Option<PartialCall>) {
        if !self.in_call {
            return (self.finish(), None);
        }
        let open = self.open_call();
        self.in_call = false;
        self.held.clear();
        (Vec::new(), open)
    }

    /// What is left when the reply ends: held text, or an unterminated call, as text.
    pub fn finish(&mut self) -> Vec<ReplyPiece> {
        self.in_call = false;
        let rest = std::mem::take(&mut self.held);
        if rest.is_empty() {
            Vec::new()
        } else {
            vec![ReplyPiece::Text(rest)]
        }
    }
}

/// A whole reply as its text (calls taken out) and its calls, in order.
pub fn parse_reply(text: &str) -> (String, Vec<ToolCall>) {
    let mut parser = ToolCallParser::new();
    let mut pieces = parser.feed(text);
    pieces.extend(parser.finish());
    joined(pieces)
}

/// A reply cut short by its token budget, as [`parse_reply`], and the call it left open as
/// far as it was written ([`ToolCallParser::finish_cut`]: never its markup as text).
pub fn parse_cut_reply(text: &str) -> (String, Vec<ToolCall>, Option<PartialCall>) {
    let mut parser = ToolCallParser::new();
    let mut pieces = parser.feed(text);
    let (rest, open) = parser.finish_cut();
    pieces.extend(rest);
    let (content, calls) = joined(pieces);
    (content, calls, open)
}

/// The text pieces joined, and the calls in order.
fn joined(pieces: Vec<ReplyPiece>) -> (String, Vec<ToolCall>) {
    let mut content = String::new();
    let mut calls = Vec::new();
    for piece in pieces {
        match piece {
            ReplyPiece::Text(t) => content.push_str(&t),
            ReplyPiece::Call(c) => calls.push(c),
        }
    }
    (content, calls)
}
