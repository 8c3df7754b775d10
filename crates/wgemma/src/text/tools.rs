//! Tool calling in Gemma 4's format: tool declarations in the system turn, the model's calls
//! and the tools' responses in the model's turn, every value in Gemma's own notation rather
//! than JSON (keys bare, strings between `<|"|>` markers, which need no escaping):
//!
//! ```text
//! <|turn>system\n<|tool>declaration:get_weather{description:<|"|>Weather now<|"|>,
//!   parameters:{properties:{city:{type:<|"|>STRING<|"|>}},required:[<|"|>city<|"|>],
//!   type:<|"|>OBJECT<|"|>}}<tool|><turn|>\n
//! <|turn>model\n<|tool_call>call:get_weather{city:<|"|>Paris<|"|>}<tool_call|>
//!   <|tool_response>response:get_weather{temperature:21}<tool_response|>It is 21 degrees.
//! ```
//!
//! This module renders declarations, calls and responses (the built-in chat format uses it;
//! a checkpoint's own template gets the same data in HF's shapes), and parses the model's
//! text back into calls, also piece by piece as it streams ([`ToolCallParser`]). Text that
//! looks like a call but does not parse stays text: the model's output is never trusted to
//! be well formed.

use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

pub(crate) use super::tool_markers::is_bare_key;
use super::tool_markers::{
    STRING_MARK, TOOL_CALL_END, TOOL_CALL_START, TOOL_END, TOOL_RESPONSE_END, TOOL_RESPONSE_START,
    TOOL_START,
};

const OP: &str = "tools";

/// Values nest at most this deep when parsed (model output is untrusted: no stack overflow).
const MAX_DEPTH: usize = 64;

/// A function the model may call (OpenAI's `tools[].function`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolDeclaration {
    pub name: String,
    pub description: Option<String>,
    /// The arguments' JSON schema (an object schema).
    pub parameters: Value,
}

impl ToolDeclaration {
    /// A declaration, its name checked (it must survive the call syntax: letters, digits,
    /// `_`, `-` and `.`, as OpenAI's names) and its parameters an object schema (absent: no
    /// arguments).
    pub fn new(
        name: &str,
        description: Option<&str>,
        parameters: Option<Value>,
    ) -> Result<ToolDeclaration> {
        check_name(name, "tool name")?;
        let parameters = match parameters {
            None | Some(Value::Null) => serde_json::json!({"type": "object", "properties": {}}),
            Some(p @ Value::Object(_)) => p,
            Some(other) => {
                return Err(Error::invalid(
                    OP,
                    "parameters",
                    "a JSON schema object",
                    crate::text::tokenizer::json_kind(&other),
                ))
            }
        };
        Ok(ToolDeclaration {
            name: name.to_string(),
            description: description.map(str::to_string),
            parameters,
        })
    }

    /// The shape HF's templates take (`tools` of `apply_chat_template`: OpenAI's).
    pub fn to_template_value(&self) -> Value {
        let mut function = Map::new();
        function.insert("name".into(), self.name.clone().into());
        if let Some(d) = &self.description {
            function.insert("description".into(), d.clone().into());
        }
        function.insert("parameters".into(), self.parameters.clone());
        serde_json::json!({"type": "function", "function": function})
    }
}

/// One call the model made (or made earlier in the conversation).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "HfToolCall", try_from = "HfToolCall")]
pub struct ToolCall {
    /// The client's id of the call (OpenAI's `tool_calls[].id`), if any.
    pub id: Option<String>,
    pub name: String,
    pub arguments: Map<String, Value>,
}

/// HF's (and OpenAI's) shape of a call, with the arguments as a mapping, which is what
/// chat templates iterate over.
#[derive(Serialize, Deserialize)]
struct HfToolCall {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    id: Option<String>,
    #[serde(rename = "type", default = "function_type")]
    kind: String,
    function: HfFunction,
}

#[derive(Serialize, Deserialize)]
struct HfFunction {
    name: String,
    #[serde(default)]
    arguments: Map<String, Value>,
}

fn function_type() -> String {
    "function".into()
}

impl From<ToolCall> for HfToolCall {
    fn from(c: ToolCall) -> HfToolCall {
        HfToolCall {
            id: c.id,
            kind: function_type(),
            function: HfFunction {
                name: c.name,
                arguments: c.arguments,
            },
        }
    }
}

impl TryFrom<HfToolCall> for ToolCall {
    type Error = String;
    fn try_from(c: HfToolCall) -> std::result::Result<ToolCall, String> {
        if c.kind != "function" {
            return Err(format!(
                "tool call type: expected \"function\", found {:?}",
                c.kind
            ));
        }
        Ok(ToolCall {
            id: c.id,
            name: c.function.name,
            arguments: c.function.arguments,
        })
    }
}

/// A tool's answer to a call, given back to the model in its turn.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolResponse {
    /// The function that answered.
    pub name: String,
    /// An object is written as the response's fields; anything else as `{value: ...}`.
    pub response: Value,
}

fn check_name(name: &str, what: &str) -> Result<()> {
    if is_bare_key(name) && name.len() <= 64 {
        Ok(())
    } else {
        Err(Error::invalid(
            OP,
            what,
            "1 to 64 letters, digits, '_', '-' or '.'",
            format!("{name:?}"),
        ))
    }
}

/// `value` in Gemma's notation, appended to `out`; `upper_types` writes a schema's `type`
/// names upper-case, as Gemma 4's declarations do.
fn write_value(out: &mut String, value: &Value, upper_types: bool) {
    match value {
        Value::String(s) => {
            out.push_str(STRING_MARK);
            out.push_str(s);
            out.push_str(STRING_MARK);
        }
        Value::Array(items) => {
            out.push('[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(out, v, upper_types);
            }
            out.push(']');
        }
        Value::Object(map) => write_object(out, map, upper_types),
        other => out.push_str(&other.to_string()),
    }
}

fn write_object(out: &mut String, map: &Map<String, Value>, upper_types: bool) {
    out.push('{');
    for (i, (k, v)) in map.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        write_key(out, k);
        out.push(':');
        match v {
            Value::String(s) if upper_types && k == "type" => {
                write_value(out, &Value::String(s.to_uppercase()), upper_types)
            }
            _ => write_value(out, v, upper_types),
        }
    }
    out.push('}');
}

fn write_key(out: &mut String, key: &str) {
    if is_bare_key(key) {
        out.push_str(key);
    } else {
        write_value(out, &Value::String(key.to_string()), false);
    }
}

/// A value in Gemma's notation (what a call's arguments are written in).
pub fn format_value(value: &Value) -> String {
    let mut out = String::new();
    write_value(&mut out, value, false);
    out
}

/// `<|tool>declaration:NAME{description:...,parameters:{...}}<tool|>`.
pub fn render_declaration(tool: &ToolDeclaration) -> String {
    let mut out = format!("{TOOL_START}declaration:{}{{", tool.name);
    if let Some(d) = &tool.description {
        out.push_str("description:");
        write_value(&mut out, &Value::String(d.clone()), false);
        out.push(',');
    }
    out.push_str("parameters:");
    write_value(&mut out, &tool.parameters, true);
    out.push('}');
    out.push_str(TOOL_END);
    out
}

/// `<|tool_call>call:NAME{key:value,...}<tool_call|>`.
pub fn render_call(call: &ToolCall) -> String {
    let mut out = format!("{TOOL_CALL_START}call:{}", call.name);
    write_object(&mut out, &call.arguments, false);
    out.push_str(TOOL_CALL_END);
    out
}

/// `<|tool_response>response:NAME{...}<tool_response|>`.
pub fn render_response(response: &ToolResponse) -> String {
    let mut out = format!("{TOOL_RESPONSE_START}response:{}", response.name);
    match &response.response {
        Value::Object(map) => write_object(&mut out, map, false),
        other => {
            let mut map = Map::new();
            map.insert("value".into(), other.clone());
            write_object(&mut out, &map, false);
        }
    }
    out.push_str(TOOL_RESPONSE_END);
    out
}

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
    /// name and its arguments as JSON text so far ([`super::tool_json`]).
    pub fn open_call(&self) -> Option<super::tool_json::PartialCall> {
        if !self.in_call {
            return None;
        }
        super::tool_json::partial_call(&self.held[TOOL_CALL_START.len()..])
    }

    /// What is left when a reply is cut short (by its token budget) in the middle: the held
    /// text, and the call left open, as far as it was written (None when none is open, or
    /// when its name is not whole yet). A call's markup never comes back as text here.
    pub fn finish_cut(&mut self) -> (Vec<ReplyPiece>, Option<super::tool_json::PartialCall>) {
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
pub fn parse_cut_reply(
    text: &str,
) -> (String, Vec<ToolCall>, Option<super::tool_json::PartialCall>) {
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

/// A call's body (between its markers): `call:NAME{arguments}`.
pub fn parse_call(body: &str) -> Result<ToolCall> {
    let bad = |why: String| Error::invalid(OP, "tool call", "call:NAME{key:value,...}", why);
    let rest = body
        .trim()
        .strip_prefix("call:")
        .ok_or_else(|| bad("no `call:` at its start".into()))?;
    let open = rest
        .find('{')
        .ok_or_else(|| bad("no `{` after the name".into()))?;
    let name = rest[..open].trim();
    if !is_bare_key(name) {
        return Err(bad(format!("the name {name:?}")));
    }
    let mut cursor = Cursor {
        s: &rest[open..],
        pos: 0,
    };
    let arguments = match cursor.value(0).map_err(bad)? {
        Value::Object(map) => map,
        _ => unreachable!("a value starting with '{{' is an object"),
    };
    cursor.skip_ws();
    if cursor.pos != cursor.s.len() {
        return Err(bad(format!(
            "text after the arguments: {:?}",
            &cursor.s[cursor.pos..]
        )));
    }
    Ok(ToolCall {
        id: None,
        name: name.to_string(),
        arguments,
    })
}

/// A reader of Gemma's value notation (also taking JSON's quoted strings, which models
/// sometimes write).
struct Cursor<'a> {
    s: &'a str,
    pos: usize,
}

impl Cursor<'_> {
    fn rest(&self) -> &str {
        &self.s[self.pos..]
    }

    fn skip_ws(&mut self) {
        let trimmed = self.rest().trim_start();
        self.pos = self.s.len() - trimmed.len();
    }

    fn eat(&mut self, token: &str) -> bool {
        self.skip_ws();
        if self.rest().starts_with(token) {
            self.pos += token.len();
            true
        } else {
            false
        }
    }

    fn here(&self) -> String {
        let rest: String = self.rest().chars().take(20).collect();
        if rest.is_empty() {
            "the end".into()
        } else {
            format!("{rest:?}")
        }
    }

    fn value(&mut self, depth: usize) -> std::result::Result<Value, String> {
        if depth > MAX_DEPTH {
            return Err(format!("values nested deeper than {MAX_DEPTH}"));
        }
        self.skip_ws();
        if self.eat("{") {
            let mut map = Map::new();
            if self.eat("}") {
                return Ok(Value::Object(map));
            }
            loop {
                let key = self.key()?;
                if !self.eat(":") {
                    return Err(format!(
                        "expected ':' after key {key:?}, found {}",
                        self.here()
                    ));
                }
                let v = self.value(depth + 1)?;
                map.insert(key, v);
                if self.eat(",") {
                    continue;
                }
                if self.eat("}") {
                    return Ok(Value::Object(map));
                }
                return Err(format!("expected ',' or '}}', found {}", self.here()));
            }
        }
        if self.eat("[") {
            let mut items = Vec::new();
            if self.eat("]") {
                return Ok(Value::Array(items));
            }
            loop {
                items.push(self.value(depth + 1)?);
                if self.eat(",") {
                    continue;
                }
                if self.eat("]") {
                    return Ok(Value::Array(items));
                }
                return Err(format!("expected ',' or ']', found {}", self.here()));
            }
        }
        if let Some(s) = self.string()? {
            return Ok(Value::String(s));
        }
        for (word, v) in [
            ("true", Value::Bool(true)),
            ("false", Value::Bool(false)),
            ("null", Value::Null),
        ] {
            if self.rest().starts_with(word) {
                self.pos += word.len();
                return Ok(v);
            }
        }
        let len = self
            .rest()
            .find(|c: char| !matches!(c, '0'..='9' | '-' | '+' | '.' | 'e' | 'E'))
            .unwrap_or(self.rest().len());
        let number = &self.rest()[..len];
        match serde_json::from_str::<serde_json::Number>(number) {
            Ok(n) if len > 0 => {
                self.pos += len;
                Ok(Value::Number(n))
            }
            _ => Err(format!("expected a value, found {}", self.here())),
        }
    }

    /// A `<|"|>`-marked or JSON-quoted string, if one starts here.
    fn string(&mut self) -> std::result::Result<Option<String>, String> {
        self.skip_ws();
        if let Some(after) = self.rest().strip_prefix(STRING_MARK) {
            let end = after
                .find(STRING_MARK)
                .ok_or_else(|| "a string without its closing <|\"|>".to_string())?;
            let s = after[..end].to_string();
            self.pos += STRING_MARK.len() + end + STRING_MARK.len();
            return Ok(Some(s));
        }
        if self.rest().starts_with('"') {
            let mut de = serde_json::Deserializer::from_str(self.rest()).into_iter::<String>();
            return match de.next() {
                Some(Ok(s)) => {
                    self.pos += de.byte_offset();
                    Ok(Some(s))
                }
                _ => Err(format!("a malformed quoted string at {}", self.here())),
            };
        }
        Ok(None)
    }

    fn key(&mut self) -> std::result::Result<String, String> {
        if let Some(s) = self.string()? {
            return Ok(s);
        }
        let len = self
            .rest()
            .find(|c: char| matches!(c, ':' | ',' | '{' | '}' | '[' | ']') || c.is_whitespace())
            .unwrap_or(self.rest().len());
        let key = self.rest()[..len].to_string();
        if key.is_empty() || key.contains('<') {
            return Err(format!("expected a key, found {}", self.here()));
        }
        self.pos += len;
        Ok(key)
    }
}

/// Every string of `value` (keys too), for checks on text a template writes as markup.
pub fn strings_of<'a>(value: &'a Value, found: &mut Vec<&'a str>) {
    match value {
        Value::String(s) => found.push(s),
        Value::Array(items) => items.iter().for_each(|v| strings_of(v, found)),
        Value::Object(map) => {
            for (k, v) in map {
                found.push(k);
                strings_of(v, found);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn call(name: &str, args: Value) -> ToolCall {
        ToolCall {
            id: None,
            name: name.into(),
            arguments: args.as_object().unwrap().clone(),
        }
    }

    #[test]
    fn calls_render_in_gemma_notation_and_parse_back() {
        let c = call(
            "get_weather",
            json!({"city": "Paris, \"France\" {x}", "days": 3, "metric": true, "x": null,
                   "hours": [1, 2.5, -3e2], "opts": {"a b": "c", "n": {"d": []}}}),
        );
        let text = render_call(&c);
        assert!(text.starts_with("<|tool_call>call:get_weather{"), "{text}");
        assert!(
            text.contains(r#"city:<|"|>Paris, "France" {x}<|"|>"#),
            "{text}"
        );
        assert!(text.contains(r#"<|"|>a b<|"|>:<|"|>c<|"|>"#), "{text}");
        let (content, calls) = parse_reply(&format!("Let me look.{text}"));
        assert_eq!(content, "Let me look.");
        assert_eq!(calls, vec![c.clone()]);
        // Two calls, whitespace and JSON-quoted strings as models write them.
        let (content, calls) = parse_reply(
            "<|tool_call>call:f{ a : \"x\\\"y\" , b:[ 1 ,2 ] }<tool_call|>\
             <|tool_call>call:g{}<tool_call|>",
        );
        assert_eq!(content, "");
        assert_eq!(calls.len(), 2);
        assert_eq!(calls[0].arguments["a"], json!("x\"y"));
        assert_eq!(calls[0].arguments["b"], json!([1, 2]));
        assert_eq!(calls[1], call("g", json!({})));
    }

    #[test]
    fn declarations_and_responses_render() {
        let d = ToolDeclaration::new(
            "get_weather",
            Some("Weather now"),
            Some(
                json!({"type": "object", "properties": {"city": {"type": "string"}},
                        "required": ["city"]}),
            ),
        )
        .unwrap();
        // Key order is the map's (insertion or sorted, by serde_json's features).
        let text = render_declaration(&d);
        assert!(
            text.starts_with(
                "<|tool>declaration:get_weather{description:<|\"|>Weather now<|\"|>,parameters:{"
            ),
            "{text}"
        );
        assert!(text.ends_with("}}<tool|>"), "{text}");
        for part in [
            "type:<|\"|>OBJECT<|\"|>",
            "properties:{city:{type:<|\"|>STRING<|\"|>}}",
            "required:[<|\"|>city<|\"|>]",
        ] {
            assert!(text.contains(part), "{part} in {text}");
        }
        let r = ToolResponse {
            name: "get_weather".into(),
            response: json!("sunny"),
        };
        assert_eq!(
            render_response(&r),
            "<|tool_response>response:get_weather{value:<|\"|>sunny<|\"|>}<tool_response|>"
        );
        let r = ToolResponse {
            name: "f".into(),
            response: json!({"t": 21}),
        };
        assert_eq!(
            render_response(&r),
            "<|tool_response>response:f{t:21}<tool_response|>"
        );
        for bad in ["", "a b", "x<y", &"n".repeat(65)] {
            let e = ToolDeclaration::new(bad, None, None)
                .unwrap_err()
                .to_string();
            assert!(e.contains("tool name"), "{e}");
        }
        let e = ToolDeclaration::new("f", None, Some(json!([1])))
            .unwrap_err()
            .to_string();
        assert!(e.contains("parameters"), "{e}");
        // HF's shapes, for a checkpoint's template.
        assert_eq!(d.to_template_value()["function"]["name"], "get_weather");
        let hf = serde_json::to_value(call("f", json!({"a": 1}))).unwrap();
        assert_eq!(
            hf,
            json!({"type": "function", "function": {"name": "f", "arguments": {"a": 1}}})
        );
        let back: ToolCall = serde_json::from_value(hf).unwrap();
        assert_eq!(back, call("f", json!({"a": 1})));
    }

    #[test]
    fn streamed_pieces_hold_back_only_what_may_be_a_call() {
        let c = call("f", json!({"q": "a<b", "n": 1}));
        let text = format!("Hi <there>{} bye <|tool", render_call(&c));
        // Fed one character at a time, the pieces join to the same reply.
        let mut p = ToolCallParser::new();
        let mut pieces = Vec::new();
        for ch in text.chars() {
            let got = p.feed(&ch.to_string());
            // Text never includes a marker's beginning that may still complete.
            for piece in &got {
                if let ReplyPiece::Text(t) = piece {
                    assert!(!t.contains("<|tool_call"), "{t}");
                }
            }
            pieces.extend(got);
        }
        pieces.extend(p.finish());
        let mut joined = String::new();
        let mut calls = Vec::new();
        for piece in pieces {
            match piece {
                ReplyPiece::Text(t) => joined.push_str(&t),
                ReplyPiece::Call(c) => calls.push(c),
            }
        }
        assert_eq!(joined, "Hi <there> bye <|tool");
        assert_eq!(calls, vec![c]);
    }

    #[test]
    fn malformed_calls_stay_text_without_panicking() {
        let deep = format!(
            "<|tool_call>call:f{{a:{}1{}}}<tool_call|>",
            "[".repeat(500),
            "]".repeat(500)
        );
        for bad in [
            "<|tool_call>get_weather{}<tool_call|>",
            "<|tool_call>call:bad name{}<tool_call|>",
            "<|tool_call>call:f{a:<|\"|>open}<tool_call|>",
            "<|tool_call>call:f{a:1,}<tool_call|>",
            "<|tool_call>call:f{a:1} trailing<tool_call|>",
            "<|tool_call>call:f{a:tru}<tool_call|>",
            "<|tool_call>call:f{:1}<tool_call|>",
            "<|tool_call>call:f{a:\"x}<tool_call|>",
            "<|tool_call>call:f[1]<tool_call|>",
            "<|tool_call>call:f{a:1}",
            "<|tool_call>",
            deep.as_str(),
        ] {
            let (content, calls) = parse_reply(bad);
            assert!(calls.is_empty(), "{bad}: {calls:?}");
            assert_eq!(content, bad);
        }
        // A bad block does not hide a good one after it.
        let (content, calls) =
            parse_reply("<|tool_call>call:f{a:}<tool_call|>ok<|tool_call>call:g{}<tool_call|>");
        assert_eq!(content, "<|tool_call>call:f{a:}<tool_call|>ok");
        assert_eq!(calls, vec![call("g", json!({}))]);
    }

    #[test]
    fn an_open_call_gives_its_arguments_so_far() {
        let mut parser = ToolCallParser::new();
        parser.feed("Hi <|tool_call>call:f{a:1.50,b:<|\"|>x");
        let open = parser.open_call().unwrap();
        assert_eq!(
            (open.name.as_str(), open.arguments.as_str()),
            ("f", r#"{"a":1.5,"b":"x"#)
        );
        let pieces = parser.feed("y<|\"|>}<tool_call|>");
        let [ReplyPiece::Call(c)] = &pieces[..] else {
            panic!("{pieces:?}")
        };
        // The whole call's arguments continue what the open call gave.
        assert_eq!(
            Value::Object(c.arguments.clone()).to_string(),
            r#"{"a":1.5,"b":"xy"}"#
        );
        assert_eq!(parser.open_call(), None);
        // Cut short, the open call comes back as far as it was written, never as text.
        parser.feed("ok <|tool_call>call:g{n:1");
        assert_eq!(
            parser.finish_cut(),
            (
                Vec::new(),
                Some(super::super::tool_json::PartialCall {
                    name: "g".into(),
                    arguments: r#"{"n":"#.into()
                })
            )
        );
        parser.feed("<|tool_call>cal");
        assert_eq!(parser.finish_cut(), (Vec::new(), None));
    }
}
