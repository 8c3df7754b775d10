//! A streamed chat reply that may call tools, split into text deltas and `tool_calls`
//! deltas as it arrives ([`ToolStream`]), each delta its own chunk ([`tool_calls_chunk`]).

use super::tool_reply::{call_id, call_json};
use serde_json::{json, Value};
use wgemma::text::tool_json::PartialCall;
use wgemma::text::tools::{ReplyPiece, ToolCallParser};

/// A stream chunk carrying one `tool_calls` delta.
pub fn tool_calls_chunk(id: &str, created: u64, model: &str, delta: Value) -> Value {
    json!({
        "id": id, "object": "chat.completion.chunk", "created": created, "model": model,
        "system_fingerprint": crate::openai::response::SYSTEM_FINGERPRINT,
        "choices": [{"index": 0, "delta": {"tool_calls": [delta]}, "logprobs": null, "finish_reason": null}],
    })
}

/// A streamed reply split into text deltas and call deltas as it arrives, as OpenAI streams
/// calls: a call's first delta (its `index`, `id`, `type` and name, arguments "") once its
/// name is whole, then its arguments' JSON text in fragments as they are decoded
/// ([`wgemma::text::tool_json::partial_call`]), which add up to the whole call's arguments.
#[derive(Debug, Default)]
pub struct ToolStream {
    parser: ToolCallParser,
    /// Calls begun so far (the next one's `index`).
    pub calls: usize,
    /// The call being streamed: its index and the arguments text sent so far.
    open: Option<(usize, String)>,
}

impl ToolStream {
    /// The text that may be sent now, and the `tool_calls` deltas that `text` gives.
    pub fn feed(&mut self, text: &str) -> (String, Vec<Value>) {
        let pieces = self.parser.feed(text);
        let (text, mut deltas) = self.split(pieces);
        if let Some(p) = self.parser.open_call() {
            deltas.extend(self.grow(&p));
        }
        (text, deltas)
    }

    /// What is left at the end: held text, and a call left open as far as it was written
    /// when the reply was `cut` by its budget or that call was streamed already (an
    /// unterminated block otherwise stays text, as in a whole answer).
    pub fn finish(&mut self, cut: bool) -> (String, Vec<Value>) {
        if cut || self.open.is_some() {
            let (pieces, partial) = self.parser.finish_cut();
            let (text, mut deltas) = self.split(pieces);
            if let Some(p) = partial {
                deltas.extend(self.grow(&p));
            }
            return (text, deltas);
        }
        let pieces = self.parser.finish();
        self.split(pieces)
    }

    fn split(&mut self, pieces: Vec<ReplyPiece>) -> (String, Vec<Value>) {
        let mut text = String::new();
        let mut deltas = Vec::new();
        for piece in pieces {
            match piece {
                ReplyPiece::Text(t) => text.push_str(&t),
                ReplyPiece::Call(c) => match self.open.take() {
                    // The rest of a call streamed so far.
                    Some((index, sent)) => {
                        let whole = Value::Object(c.arguments).to_string();
                        if let Some(rest) =
                            whole.strip_prefix(sent.as_str()).filter(|r| !r.is_empty())
                        {
                            deltas.push(json!({"index": index, "function": {"arguments": rest}}));
                        }
                    }
                    None => {
                        deltas.push(call_json(&c, Some(self.calls)));
                        self.calls += 1;
                    }
                },
            }
        }
        (text, deltas)
    }

    /// The deltas of the open call `p`: its first one when new, then what its arguments
    /// grew by.
    fn grow(&mut self, p: &PartialCall) -> Vec<Value> {
        let mut deltas = Vec::new();
        let (index, sent) = self.open.get_or_insert_with(|| {
            let index = self.calls;
            deltas.push(json!({"index": index, "id": call_id(), "type": "function",
                               "function": {"name": p.name, "arguments": ""}}));
            (index, String::new())
        });
        if let Some(more) = p
            .arguments
            .strip_prefix(sent.as_str())
            .filter(|m| !m.is_empty())
        {
            deltas.push(json!({"index": *index, "function": {"arguments": more}}));
            *sent = p.arguments.clone();
        }
        if deltas.first().is_some_and(|d| d.get("id").is_some()) {
            self.calls += 1;
        }
        deltas
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streamed_calls_come_in_fragments() {
        let mut s = ToolStream::default();
        let (t1, c1) = s.feed("Hi <|tool_call>call:f{a:1,");
        let (t2, c2) = s.feed("b:<|\"|>xy<|\"|>}<tool_call|> <|tool");
        let (t3, c3) = s.finish(false);
        assert_eq!(
            (t1.as_str(), t2.as_str(), t3.as_str()),
            ("Hi ", " ", "<|tool")
        );
        assert!(c3.is_empty());
        assert_eq!(c1[0]["index"], 0);
        assert_eq!(c1[0]["function"]["name"], "f");
        assert!(c1[0]["id"].as_str().unwrap().starts_with("call_"));
        let fragments: String = c1
            .iter()
            .chain(&c2)
            .map(|d| d["function"]["arguments"].as_str().unwrap())
            .collect();
        assert_eq!(fragments, r#"{"a":1,"b":"xy"}"#);
        assert!(c1.len() + c2.len() >= 3, "{c1:?} {c2:?}");
        // A whole call in one piece is one delta; a call cut short ends where it was.
        let mut s = ToolStream::default();
        let (_, whole) = s.feed("<|tool_call>call:g{}<tool_call|>");
        assert_eq!(
            (whole.len(), &whole[0]["function"]["arguments"]),
            (1, &json!("{}"))
        );
        s.feed("<|tool_call>call:f{a:<|\"|>x");
        let (text, rest) = s.finish(true);
        assert_eq!(text, "");
        assert!(rest.is_empty(), "{rest:?}");
        assert_eq!(s.calls, 2);
    }
}
