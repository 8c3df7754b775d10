//! Tool calling in `wgemma serve` (OpenAI's `tools`, `tool_choice`, `parallel_tool_calls`):
//! the tools go to the model through its chat template (Gemma 4's declarations, or the
//! checkpoint's template's own `tools`), its calls come back out of its text
//! ([`wgemma::text::tools`]) as `tool_calls` (whole, or as stream deltas), and `tool`
//! messages go back in as the responses of the assistant turn that made the calls.
//! `tool_choice` "required" or a named function forces a call by constrained decoding: a
//! Lark grammar of the call syntax with each function's argument schema
//! ([`wgemma::text::tool_grammar`]), run as structured output is.

use crate::error::{check_keys, clip, kind_of, ApiError};
use serde_json::{json, Map, Value};
use wgemma::session::{ChatMessage, ToolCall, ToolDeclaration, ToolResponse};
use wgemma::text::tool_grammar::{tool_call_grammar, tool_calls_or_answer_grammar};
use wgemma::text::tools::{parse_cut_reply, parse_reply};

/// What `tool_choice` asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolChoice {
    /// No tools: none are declared to the model.
    None,
    /// The model may answer or call.
    Auto,
    /// The model must call one (or more, with parallel calls) of the tools.
    Required,
    /// The model must call this function.
    Named(String),
}

/// A chat request's tools, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolRequest {
    pub tools: Vec<ToolDeclaration>,
    pub choice: ToolChoice,
    /// More than one call in a reply (`parallel_tool_calls`, default true).
    pub parallel: bool,
}

impl ToolRequest {
    /// The `tools`, `tool_choice` and `parallel_tool_calls` of a chat body; None when no
    /// tools are given (or an empty list) and nothing asks for a call.
    pub fn parse(body: &Map<String, Value>) -> Result<Option<ToolRequest>, ApiError> {
        let tools = parse_tools(body.get("tools"))?;
        let parallel = match body.get("parallel_tool_calls") {
            None | Some(Value::Null) => true,
            Some(Value::Bool(b)) => *b,
            Some(other) => {
                return Err(ApiError::field(
                    "parallel_tool_calls",
                    "a boolean",
                    kind_of(other),
                ))
            }
        };
        let choice = match body.get("tool_choice") {
            None | Some(Value::Null) if tools.is_empty() => ToolChoice::None,
            None | Some(Value::Null) => ToolChoice::Auto,
            Some(Value::String(s)) => match s.as_str() {
                "none" => ToolChoice::None,
                "auto" => ToolChoice::Auto,
                "required" => ToolChoice::Required,
                other => {
                    return Err(ApiError::field(
                        "tool_choice",
                        "\"none\", \"auto\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}",
                        format!("{other:?}"),
                    ))
                }
            },
            Some(v @ Value::Object(o)) => {
                let name = o
                    .get("function")
                    .and_then(|f| f.get("name"))
                    .and_then(Value::as_str);
                let keys_ok = o.keys().all(|k| matches!(k.as_str(), "type" | "function"))
                    && o.get("function")
                        .and_then(Value::as_object)
                        .is_some_and(|f| f.keys().all(|k| k == "name"));
                match (o.get("type").and_then(Value::as_str), name) {
                    (Some("function"), Some(name)) if keys_ok => ToolChoice::Named(name.into()),
                    _ => {
                        return Err(ApiError::field(
                            "tool_choice",
                            "{\"type\": \"function\", \"function\": {\"name\": ...}}",
                            v.to_string(),
                        ))
                    }
                }
            }
            Some(other) => {
                return Err(ApiError::field(
                    "tool_choice",
                    "a string or an object naming a function",
                    kind_of(other),
                ))
            }
        };
        match &choice {
            ToolChoice::Required | ToolChoice::Auto if tools.is_empty() => {
                return Err(ApiError::field(
                    "tool_choice",
                    "tools to choose from (the tools field)",
                    "none",
                ))
            }
            ToolChoice::Named(name) if !tools.iter().any(|t| &t.name == name) => {
                return Err(ApiError::field(
                    "tool_choice",
                    "the name of one of the tools",
                    format!("{name:?}"),
                ))
            }
            _ => {}
        }
        if tools.is_empty() {
            return Ok(None);
        }
        Ok(Some(ToolRequest {
            tools,
            choice,
            parallel,
        }))
    }

    /// The tools declared to the model: none with `tool_choice` "none".
    pub fn declared(&self) -> &[ToolDeclaration] {
        match self.choice {
            ToolChoice::None => &[],
            _ => &self.tools,
        }
    }

    pub fn forces_call(&self) -> bool {
        matches!(self.choice, ToolChoice::Required | ToolChoice::Named(_))
    }

    /// True when the reply follows a grammar of calls: a forced call, or `auto` beside a
    /// response format (`answers`: the reply may then be calls or an answer in that format).
    pub fn constrains(&self, answers: bool) -> bool {
        self.forces_call() || (answers && self.choice == ToolChoice::Auto)
    }

    /// The Lark grammar of the reply: the calls a forced choice allows (the turn must call,
    /// so `answer` does not apply to it); with `auto` and an `answer` rule (a response
    /// format's), calls of any tool or an answer following that rule, as vLLM does. None when
    /// nothing constrains the reply.
    pub fn grammar(&self, answer: Option<&str>) -> Result<Option<String>, ApiError> {
        let path = |i| format!("tools[{i}]");
        let all: Vec<(usize, &ToolDeclaration)> = self.tools.iter().enumerate().collect();
        let allowed: Vec<(usize, &ToolDeclaration)> = match (&self.choice, answer) {
            (ToolChoice::Auto, Some(answer)) => {
                return tool_calls_or_answer_grammar(&all, self.parallel, &path, answer)
                    .map(Some)
                    .map_err(|e| {
                        ApiError::invalid(
                            "tools",
                            format!("tools: calls beside a response_format need argument schemas it can enforce: {e}"),
                        )
                    })
            }
            (ToolChoice::None | ToolChoice::Auto, _) => return Ok(None),
            (ToolChoice::Required, _) => all,
            (ToolChoice::Named(name), _) => self
                .tools
                .iter()
                .enumerate()
                .filter(|(_, t)| &t.name == name)
                .collect(),
        };
        tool_call_grammar(&allowed, self.parallel, &path)
            .map(Some)
            .map_err(|e| {
                ApiError::invalid(
                    "tools",
                    format!("tools: a forced call (tool_choice) needs argument schemas it can enforce: {e}"),
                )
            })
    }
}

/// OpenAI's `tools`: `[{"type": "function", "function": {"name", "description",
/// "parameters", "strict"}}]`.
fn parse_tools(value: Option<&Value>) -> Result<Vec<ToolDeclaration>, ApiError> {
    let items = match value {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(items)) => items,
        Some(other) => {
            return Err(ApiError::field(
                "tools",
                "an array of tools",
                kind_of(other),
            ))
        }
    };
    let mut tools: Vec<ToolDeclaration> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let at = format!("tools[{i}]");
        let Some(o) = item.as_object() else {
            return Err(ApiError::field(&at, "a tool object", kind_of(item)));
        };
        if let Some(k) = o
            .keys()
            .find(|k| !matches!(k.as_str(), "type" | "function"))
        {
            return Err(ApiError::invalid(
                "tools",
                format!("{at}.{k}: unknown field (a tool is type and function)"),
            ));
        }
        match o.get("type") {
            Some(Value::String(t)) if t == "function" => {}
            other => {
                return Err(ApiError::field(
                    "tools",
                    format!("{at}.type \"function\" (the only kind of tool)"),
                    other.map_or("none".into(), kind_of),
                ))
            }
        }
        let Some(f) = o.get("function").and_then(Value::as_object) else {
            return Err(ApiError::field(
                "tools",
                format!("{at}.function to be an object"),
                o.get("function").map_or("none".into(), kind_of),
            ));
        };
        if let Some(k) = f
            .keys()
            .find(|k| !matches!(k.as_str(), "name" | "description" | "parameters" | "strict"))
        {
            return Err(ApiError::invalid(
                "tools",
                format!(
                    "{at}.function.{k}: unknown field (expected name, description, parameters, \
                     strict)"
                ),
            ));
        }
        let text = |key: &str| -> Result<Option<&str>, ApiError> {
            match f.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.as_str())),
                Some(other) => Err(ApiError::field(
                    "tools",
                    format!("{at}.function.{key} to be a string"),
                    kind_of(other),
                )),
            }
        };
        let name = text("name")?
            .ok_or_else(|| ApiError::field("tools", format!("{at}.function.name"), "none"))?;
        // `strict` asks that arguments follow the schema: they always do when a call is
        // forced, and are the model's own otherwise; either value is taken.
        if let Some(s) = f.get("strict").filter(|s| !s.is_null() && !s.is_boolean()) {
            return Err(ApiError::field(
                "tools",
                format!("{at}.function.strict to be a boolean"),
                kind_of(s),
            ));
        }
        let decl = ToolDeclaration::new(name, text("description")?, f.get("parameters").cloned())
            .map_err(|e| ApiError::invalid("tools", format!("{at}.function: {e}")))?;
        if tools.iter().any(|t| t.name == decl.name) {
            return Err(ApiError::field(
                "tools",
                format!("{at}.function.name unique among the tools"),
                format!("{name:?} a second time"),
            ));
        }
        tools.push(decl);
    }
    Ok(tools)
}

/// An assistant message's `tool_calls` (OpenAI's: `arguments` a JSON text of an object).
pub fn parse_message_calls(i: usize, value: &Value) -> Result<Vec<ToolCall>, ApiError> {
    let param = format!("messages[{i}].tool_calls");
    let Some(items) = value.as_array() else {
        return Err(ApiError::field(&param, "an array of calls", kind_of(value)));
    };
    items
        .iter()
        .enumerate()
        .map(|(j, c)| {
            let at = format!("{param}[{j}]");
            check_keys(c, &["id", "type", "function"], &at)?;
            check_keys(
                &c["function"],
                &["name", "arguments"],
                &format!("{at}.function"),
            )?;
            match c.get("type") {
                None | Some(Value::Null) => {}
                Some(Value::String(t)) if t == "function" => {}
                Some(other) => {
                    return Err(ApiError::field(
                        &format!("{at}.type"),
                        "\"function\" (the only kind of call this server makes)",
                        match other {
                            Value::String(t) => format!("{:?}", clip(t, 64)),
                            other => kind_of(other),
                        },
                    ))
                }
            }
            let id = c.get("id").and_then(Value::as_str);
            let name = c
                .get("function")
                .and_then(|f| f.get("name"))
                .and_then(Value::as_str);
            let arguments = c
                .get("function")
                .and_then(|f| f.get("arguments"))
                .and_then(Value::as_str);
            let (Some(id), Some(name), Some(arguments)) = (id, name, arguments) else {
                return Err(ApiError::field(
                    &at,
                    "{\"id\", \"type\": \"function\", \"function\": {\"name\", \"arguments\"}} \
                     with strings",
                    kind_of(c),
                ));
            };
            let arguments = match serde_json::from_str::<Value>(arguments) {
                Ok(Value::Object(map)) => map,
                Ok(other) => {
                    return Err(ApiError::field(
                        &format!("{at}.function.arguments"),
                        "a JSON object",
                        kind_of(&other),
                    ))
                }
                Err(e) => {
                    return Err(ApiError::field(
                        &format!("{at}.function.arguments"),
                        "a JSON object's text",
                        format!("invalid JSON ({e})"),
                    ))
                }
            };
            ToolDeclaration::new(name, None, None)
                .map_err(|e| ApiError::invalid(&at, format!("{at}.function.name: {e}")))?;
            Ok(ToolCall {
                id: Some(id.to_string()),
                name: name.to_string(),
                arguments,
            })
        })
        .collect()
}

/// A `tool` message (its `tool_call_id` and content) as the response to the call it
/// answers, on the assistant message that made it (the latest with calls, with only tool
/// messages after it).
pub fn attach_tool_response(
    messages: &mut [ChatMessage],
    i: usize,
    call_id: Option<&Value>,
    content: String,
) -> Result<(), ApiError> {
    let param = format!("messages[{i}].tool_call_id");
    let Some(Value::String(call_id)) = call_id else {
        return Err(ApiError::field(
            &param,
            "the id of the call this answers (a string)",
            call_id.map_or("none".into(), kind_of),
        ));
    };
    let Some(turn) = messages.last_mut().filter(|m| !m.tool_calls.is_empty()) else {
        return Err(ApiError::invalid(
            &format!("messages[{i}]"),
            format!(
                "messages[{i}]: expected a tool message right after an assistant message with \
                 tool_calls (or its other tool messages), found one elsewhere"
            ),
        ));
    };
    let Some(call) = turn
        .tool_calls
        .iter()
        .find(|c| c.id.as_deref() == Some(call_id))
    else {
        return Err(ApiError::field(
            &param,
            "the id of one of the preceding assistant message's tool_calls",
            format!("{call_id:?}"),
        ));
    };
    // A JSON object is given to the model as its fields, anything else as text.
    let response = match serde_json::from_str::<Value>(&content) {
        Ok(v @ Value::Object(_)) => v,
        _ => Value::String(content),
    };
    turn.tool_responses.push(ToolResponse {
        name: call.name.clone(),
        response,
    });
    Ok(())
}

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

    fn parse(extra: &str) -> Result<Option<ToolRequest>, ApiError> {
        let body: Value = serde_json::from_str(&format!("{{{extra}}}")).unwrap();
        ToolRequest::parse(body.as_object().unwrap())
    }

    const WEATHER: &str = r#""tools": [{"type": "function", "function": {"name": "get_weather",
        "description": "Weather now", "parameters": {"type": "object",
        "properties": {"city": {"type": "string", "enum": ["Paris", "Rome"]}}, "required": ["city"]}}}]"#;

    #[test]
    fn tool_fields_parse_or_name_what_is_wrong() {
        let t = parse(WEATHER).unwrap().unwrap();
        assert_eq!(t.choice, ToolChoice::Auto);
        assert!(t.parallel && !t.forces_call());
        assert_eq!(t.declared().len(), 1);
        assert_eq!(t.grammar(None).unwrap(), None);
        // Beside a response format, `auto` lets the model call or answer in that format.
        let either = t.grammar(Some("%json {}")).unwrap().unwrap();
        assert!(either.starts_with("start: call+ | answer"), "{either}");
        let none = parse(&format!(r#"{WEATHER}, "tool_choice": "none""#))
            .unwrap()
            .unwrap();
        assert!(none.declared().is_empty());
        let named = parse(&format!(
            r#"{WEATHER}, "tool_choice": {{"type": "function", "function": {{"name": "get_weather"}}}},
               "parallel_tool_calls": false"#
        ))
        .unwrap()
        .unwrap();
        assert!(named.forces_call() && !named.parallel);
        let lark = named.grammar(None).unwrap().unwrap();
        assert!(lark.contains("call:get_weather"), "{lark}");
        // A forced call is the turn's whole reply, with a response format too.
        assert_eq!(named.grammar(Some("%json {}")).unwrap(), Some(lark));
        assert_eq!(parse(r#""tools": []"#).unwrap(), None);
        assert_eq!(parse(r#""tool_choice": "none""#).unwrap(), None);
        for (extra, param, needle) in [
            (r#""tools": {}"#, "tools", "an object"),
            (
                r#""tools": [{"type": "code_interpreter"}]"#,
                "tools",
                "\"function\"",
            ),
            (
                r#""tools": [{"type": "function", "function": {"name": "a b"}}]"#,
                "tools",
                "tool name",
            ),
            (
                r#""tools": [{"type": "function", "function": {"name": "f", "parameters": 3}}]"#,
                "tools",
                "parameters",
            ),
            (
                r#""tools": [{"type": "function", "function": {"name": "f", "x": 1}}]"#,
                "tools",
                "tools[0].function.x",
            ),
            (
                r#""tool_choice": "required""#,
                "tool_choice",
                "tools to choose",
            ),
            (
                &format!(r#"{WEATHER}, "tool_choice": "always""#),
                "tool_choice",
                "\"always\"",
            ),
            (
                &format!(
                    r#"{WEATHER}, "tool_choice": {{"type": "function", "function": {{"name": "f"}}}}"#
                ),
                "tool_choice",
                "\"f\"",
            ),
            (
                &format!(r#"{WEATHER}, "parallel_tool_calls": 1"#),
                "parallel_tool_calls",
                "a boolean",
            ),
        ] {
            let e = parse(extra).unwrap_err();
            assert_eq!(e.param.as_deref(), Some(param), "{extra}: {}", e.message);
            assert!(e.message.contains(needle), "{extra}: {}", e.message);
        }
        // A schema a grammar cannot enforce is refused only when a call is forced.
        let unique = r#""tools": [{"type": "function", "function": {"name": "f", "parameters":
            {"type": "object", "properties": {"a": {"type": "array", "uniqueItems": true}}}}}]"#;
        assert!(parse(unique)
            .unwrap()
            .unwrap()
            .grammar(None)
            .unwrap()
            .is_none());
        let forced = parse(&format!(r#"{unique}, "tool_choice": "required""#))
            .unwrap()
            .unwrap();
        let e = forced.grammar(None).unwrap_err();
        assert!(e.message.contains("uniqueItems"), "{}", e.message);
    }

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

    #[test]
    fn tool_messages_attach_to_the_call_they_answer() {
        let calls = parse_message_calls(
            1,
            &json!([{"id": "c1", "type": "function",
                     "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]),
        )
        .unwrap();
        let mut turn = ChatMessage::new("assistant", "");
        turn.tool_calls = calls;
        let mut messages = vec![ChatMessage::new("user", "weather?"), turn];
        attach_tool_response(&mut messages, 2, Some(&json!("c1")), "{\"t\": 21}".into()).unwrap();
        attach_tool_response(&mut messages, 3, Some(&json!("c1")), "sunny".into()).unwrap();
        assert_eq!(
            messages[1].tool_responses,
            vec![
                ToolResponse {
                    name: "get_weather".into(),
                    response: json!({"t": 21})
                },
                ToolResponse {
                    name: "get_weather".into(),
                    response: json!("sunny")
                }
            ]
        );
        let e = attach_tool_response(&mut messages, 4, Some(&json!("c9")), "x".into()).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("messages[4].tool_call_id"));
        let e = attach_tool_response(&mut messages[..1], 1, Some(&json!("c1")), "x".into())
            .unwrap_err();
        assert_eq!(e.param.as_deref(), Some("messages[1]"));
        for (bad, param) in [
            (json!({}), "messages[1].tool_calls"),
            (json!([{"id": "c"}]), "messages[1].tool_calls[0]"),
            (
                json!([{"id": "c", "function": {"name": "f", "arguments": "[1]"}}]),
                "messages[1].tool_calls[0].function.arguments",
            ),
            (
                json!([{"id": "c", "function": {"name": "f", "arguments": "{"}}]),
                "messages[1].tool_calls[0].function.arguments",
            ),
        ] {
            let e = parse_message_calls(1, &bad).unwrap_err();
            assert_eq!(e.param.as_deref(), Some(param), "{bad}: {}", e.message);
        }
    }
}
