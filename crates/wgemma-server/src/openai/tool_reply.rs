//! The model's reply out as OpenAI's answer: the `<|tool_call>` blocks of a whole reply
//! become `message.tool_calls` (fresh `call_...` ids, arguments as JSON text) and the
//! finish reason `tool_calls` (streamed replies: [`super::tool_stream`]).

use serde_json::{json, Value};
use wgemma::session::ToolCall;
use wgemma::text::tools::{parse_cut_reply, parse_reply};

/// A fresh call id (OpenAI's `call_...`).
pub(crate) fn call_id() -> String {
    format!("call_{:024x}", rand::random::<u128>() >> 32)
}

/// A parsed call as OpenAI's `tool_calls` entry (`index` in stream deltas), with a fresh id.
pub fn call_json(call: &ToolCall, index: Option<usize>) -> Value {
    let mut v = json!({
        "id": call_id(),
        "type": "function",
        "function": {"name": call.name, "arguments": Value::Object(call.arguments.clone()).to_string()},
    });
    if let Some(i) = index {
        v["index"] = i.into();
    }
    v
}

/// The finish reason of a reply that made `calls` calls: "tool_calls" unless it was cut.
pub fn finish_with_calls(finish: &'static str, calls: usize) -> &'static str {
    if calls > 0 && finish == "stop" {
        "tool_calls"
    } else {
        finish
    }
}

/// A whole chat answer's message with its calls taken out of the text: OpenAI's shape
/// (content null when the reply is only calls). A reply `cut` by its token budget in a call
/// gives that call as far as it was written (its arguments' JSON text so far), never the
/// call's markup as text.
pub fn answer_message(text: &str, cut: bool) -> (Value, usize) {
    let (content, list) = if cut {
        let (content, calls, open) = parse_cut_reply(text);
        let mut list: Vec<Value> = calls.iter().map(|c| call_json(c, None)).collect();
        list.extend(open.map(|p| partial_json(&p.name, &p.arguments)));
        (content, list)
    } else {
        let (content, calls) = parse_reply(text);
        (content, calls.iter().map(|c| call_json(c, None)).collect())
    };
    if list.is_empty() {
        return (json!({"role": "assistant", "content": content}), 0);
    }
    let content = if content.trim().is_empty() {
        Value::Null
    } else {
        Value::String(content)
    };
    let n = list.len();
    (
        json!({"role": "assistant", "content": content, "tool_calls": list}),
        n,
    )
}

/// A call cut short: its name and the arguments' JSON text so far.
fn partial_json(name: &str, arguments: &str) -> Value {
    json!({"id": call_id(), "type": "function", "function": {"name": name, "arguments": arguments}})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_become_openai_tool_calls() {
        let (m, n) = answer_message(
            "<|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>}<tool_call|>",
            false,
        );
        assert_eq!(n, 1);
        assert_eq!(m["content"], Value::Null);
        assert_eq!(m["tool_calls"][0]["function"]["name"], "get_weather");
        assert_eq!(
            m["tool_calls"][0]["function"]["arguments"],
            r#"{"city":"Paris"}"#
        );
        assert!(m["tool_calls"][0]["id"]
            .as_str()
            .unwrap()
            .starts_with("call_"));
        assert_eq!(finish_with_calls("stop", n), "tool_calls");
        assert_eq!(finish_with_calls("length", n), "length");
        let (m, n) = answer_message("plain", false);
        assert_eq!((m["content"].as_str(), n), (Some("plain"), 0));
        // Cut by the budget in a call: the call as far as it was written, no markup.
        let (m, n) = answer_message("So: <|tool_call>call:get_weather{city:<|\"|>Par", true);
        assert_eq!((m["content"].as_str(), n), (Some("So: "), 1));
        assert_eq!(
            m["tool_calls"][0]["function"]["arguments"],
            r#"{"city":"Par"#
        );
    }
}
