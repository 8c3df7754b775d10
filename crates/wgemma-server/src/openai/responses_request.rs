//! `POST /v1/responses` (OpenAI's Responses API, what the OpenAI Agents SDK calls by default)
//! as the chat completion it asks for: the request's input items, instructions, tools,
//! tool choice and text format become a chat request's messages, tools, `tool_choice` and
//! `response_format`, which the chat endpoint then serves ([`super::responses`] turns its
//! answer back). Fields with no chat meaning are refused by name, as the chat endpoint's are.

use serde_json::{json, Map, Value};

/// A refusal: the field and the message (the route makes it a 400).
#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    pub param: String,
    pub message: String,
}

fn refuse(param: &str, expected: &str, found: impl std::fmt::Display) -> Refusal {
    Refusal {
        param: param.to_string(),
        message: format!("{param}: expected {expected}, found {found}"),
    }
}

fn kind(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(_) => "a boolean".into(),
        Value::Number(_) => "a number".into(),
        Value::String(s) => format!("{s:?}"),
        Value::Array(_) => "an array".into(),
        Value::Object(_) => "an object".into(),
    }
}

/// Fields passed to the chat request as they are (same name, same meaning).
const SAME: [&str; 6] = [
    "model",
    "temperature",
    "top_p",
    "parallel_tool_calls",
    "user",
    "safety_identifier",
];

/// Fields taken when they ask for nothing this server lacks.
fn accepted_as_default(key: &str, v: &Value) -> bool {
    match key {
        // Nothing is stored either way: a later request cannot refer to this one.
        "store" => v.is_boolean() || v.is_null(),
        "include" => v.as_array().is_some_and(|a| a.is_empty()) || v.is_null(),
        "truncation" => v.is_null() || v == "disabled",
        "reasoning" => {
            v.is_null()
                || v.as_object()
                    .is_some_and(|o| o.values().all(Value::is_null))
        }
        "service_tier" => v.is_null() || matches!(v.as_str(), Some("auto" | "default")),
        "background" => v.is_null() || v == false,
        "stream_options" => v.is_null() || v.is_object(),
        _ => false,
    }
}

/// The chat completion request a Responses request asks for.
pub fn chat_request(body: &Map<String, Value>) -> Result<Map<String, Value>, Refusal> {
    let mut chat = Map::new();
    let mut messages = Vec::new();
    for (key, v) in body {
        match key.as_str() {
            k if SAME.contains(&k) => {
                chat.insert(key.clone(), v.clone());
            }
            "input" => {}
            "instructions" => match v {
                Value::Null => {}
                Value::String(s) => messages.push(json!({"role": "system", "content": s})),
                other => return Err(refuse("instructions", "a string", kind(other))),
            },
            "max_output_tokens" => {
                chat.insert("max_tokens".into(), v.clone());
            }
            "stream" => {
                chat.insert("stream".into(), v.clone());
                if v == true {
                    // The closing response.completed event carries the usage.
                    chat.insert("stream_options".into(), json!({"include_usage": true}));
                }
            }
            "tools" => {
                chat.insert("tools".into(), tools(v)?);
            }
            "tool_choice" => {
                chat.insert("tool_choice".into(), tool_choice(v)?);
            }
            "text" => {
                if let Some(format) = text_format(v)? {
                    chat.insert("response_format".into(), format);
                }
            }
            "previous_response_id" | "conversation" if v.is_null() => {}
            "previous_response_id" | "conversation" => {
                return Err(refuse(
                    key,
                    "none (responses are not stored: send the whole conversation as input)",
                    kind(v),
                ))
            }
            k if accepted_as_default(k, v) => {}
            _ => {
                return Err(Refusal {
                    param: key.clone(),
                    message: format!(
                        "{key}: this server does not implement this field of the Responses API \
                         with the value given (found {})",
                        kind(v)
                    ),
                })
            }
        }
    }
    messages.extend(input_messages(body.get("input"))?);
    chat.insert("messages".into(), Value::Array(messages));
    Ok(chat)
}

/// `input`: a string (one user message) or a list of items.
fn input_messages(input: Option<&Value>) -> Result<Vec<Value>, Refusal> {
    let items = match input {
        Some(Value::String(s)) => return Ok(vec![json!({"role": "user", "content": s})]),
        Some(Value::Array(items)) => items,
        Some(other) => return Err(refuse("input", "a string or a list of items", kind(other))),
        None => return Err(refuse("input", "a string or a list of items", "none")),
    };
    let mut messages: Vec<Value> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let at = format!("input[{i}]");
        let Some(o) = item.as_object() else {
            return Err(refuse(&at, "an item object", kind(item)));
        };
        match o.get("type").and_then(Value::as_str).unwrap_or("message") {
            "message" => messages.push(message(&at, o)?),
            "function_call" => {
                let call = json!({
                    "id": text_field(&at, o, "call_id")?,
                    "type": "function",
                    "function": {"name": text_field(&at, o, "name")?,
                                 "arguments": text_field(&at, o, "arguments")?},
                });
                // Calls in a row (and after the assistant's text) are one assistant turn.
                match messages.last_mut() {
                    Some(m) if m["role"] == "assistant" => {
                        let calls = m
                            .as_object_mut()
                            .expect("a message is an object")
                            .entry("tool_calls")
                            .or_insert_with(|| json!([]));
                        calls
                            .as_array_mut()
                            .expect("tool_calls is a list")
                            .push(call);
                    }
                    _ => messages
                        .push(json!({"role": "assistant", "content": null, "tool_calls": [call]})),
                }
            }
            "function_call_output" => {
                let output = match o.get("output") {
                    Some(Value::String(s)) => s.clone(),
                    Some(parts @ Value::Array(_)) => text_of_parts(&format!("{at}.output"), parts)?,
                    other => {
                        return Err(refuse(
                            &format!("{at}.output"),
                            "a string or text parts",
                            other.map_or("none".into(), kind),
                        ))
                    }
                };
                messages.push(
                    json!({"role": "tool", "tool_call_id": text_field(&at, o, "call_id")?,
                                     "content": output}),
                );
            }
            other => {
                return Err(refuse(
                    &format!("{at}.type"),
                    "\"message\", \"function_call\" or \"function_call_output\" (text and \
                     function tools only)",
                    format!("{other:?}"),
                ))
            }
        }
    }
    Ok(messages)
}

/// A message item: its role and its text (a string, or input_text / output_text parts).
fn message(at: &str, o: &Map<String, Value>) -> Result<Value, Refusal> {
    let role = text_field(at, o, "role")?;
    if !matches!(role.as_str(), "user" | "system" | "developer" | "assistant") {
        return Err(refuse(
            &format!("{at}.role"),
            "user, system, developer or assistant",
            format!("{role:?}"),
        ));
    }
    let content = match o.get("content") {
        Some(Value::String(s)) => s.clone(),
        Some(parts @ Value::Array(_)) => text_of_parts(&format!("{at}.content"), parts)?,
        other => {
            return Err(refuse(
                &format!("{at}.content"),
                "a string or text parts",
                other.map_or("none".into(), kind),
            ))
        }
    };
    Ok(json!({"role": role, "content": content}))
}

/// The text of `input_text` / `output_text` parts, joined.
fn text_of_parts(at: &str, parts: &Value) -> Result<String, Refusal> {
    let mut text = String::new();
    for (j, part) in parts.as_array().into_iter().flatten().enumerate() {
        let kind_of_part = part.get("type").and_then(Value::as_str).unwrap_or("");
        match (kind_of_part, part.get("text").and_then(Value::as_str)) {
            ("input_text" | "output_text" | "text", Some(t)) => text.push_str(t),
            _ => {
                return Err(refuse(
                    &format!("{at}[{j}]"),
                    "an input_text or output_text part (text only)",
                    format!("type {kind_of_part:?}"),
                ))
            }
        }
    }
    Ok(text)
}

fn text_field(at: &str, o: &Map<String, Value>, key: &str) -> Result<String, Refusal> {
    match o.get(key) {
        Some(Value::String(s)) => Ok(s.clone()),
        other => Err(refuse(
            &format!("{at}.{key}"),
            "a string",
            other.map_or("none".into(), kind),
        )),
    }
}

/// Function tools (`{"type": "function", "name", "description", "parameters", "strict"}`)
/// in the chat shape.
fn tools(v: &Value) -> Result<Value, Refusal> {
    let Some(items) = v.as_array() else {
        return Err(refuse("tools", "a list of tools", kind(v)));
    };
    let mut out = Vec::new();
    for (i, t) in items.iter().enumerate() {
        let at = format!("tools[{i}]");
        let Some(o) = t.as_object() else {
            return Err(refuse(&at, "a tool object", kind(t)));
        };
        if o.get("type").and_then(Value::as_str) != Some("function") {
            return Err(refuse(
                &format!("{at}.type"),
                "\"function\" (the only kind of tool this server runs)",
                o.get("type").map_or("none".into(), kind),
            ));
        }
        let mut function = o.clone();
        function.remove("type");
        out.push(json!({"type": "function", "function": function}));
    }
    Ok(Value::Array(out))
}

fn tool_choice(v: &Value) -> Result<Value, Refusal> {
    match v {
        Value::String(_) | Value::Null => Ok(v.clone()),
        Value::Object(o) if o.get("type").and_then(Value::as_str) == Some("function") => {
            let name = o.get("name").cloned().unwrap_or(Value::Null);
            Ok(json!({"type": "function", "function": {"name": name}}))
        }
        other => Err(refuse(
            "tool_choice",
            "\"auto\", \"none\", \"required\" or {\"type\": \"function\", \"name\": ...}",
            other.to_string(),
        )),
    }
}

/// `text.format` as a chat `response_format` (None: plain text).
fn text_format(v: &Value) -> Result<Option<Value>, Refusal> {
    let Some(o) = v.as_object() else {
        return if v.is_null() {
            Ok(None)
        } else {
            Err(refuse("text", "an object", kind(v)))
        };
    };
    if let Some(k) = o.keys().find(|k| *k != "format" && !o[*k].is_null()) {
        return Err(refuse(
            &format!("text.{k}"),
            "only text.format",
            "another setting",
        ));
    }
    let Some(format) = o.get("format").filter(|f| !f.is_null()) else {
        return Ok(None);
    };
    match format.get("type").and_then(Value::as_str) {
        Some("text") => Ok(None),
        Some("json_object") => Ok(Some(json!({"type": "json_object"}))),
        Some("json_schema") => {
            let mut spec = format.as_object().cloned().unwrap_or_default();
            spec.remove("type");
            Ok(Some(json!({"type": "json_schema", "json_schema": spec})))
        }
        _ => Err(refuse(
            "text.format",
            "a format of type text, json_object or json_schema",
            format.to_string(),
        )),
    }
}
