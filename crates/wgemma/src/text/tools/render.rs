//! Declarations, calls and responses written in Gemma's notation.

use super::{is_bare_key, ToolCall, ToolDeclaration, ToolResponse};
use crate::text::tool_markers::{
    STRING_MARK, TOOL_CALL_END, TOOL_CALL_START, TOOL_END, TOOL_RESPONSE_END, TOOL_RESPONSE_START,
    TOOL_START,
};
use serde_json::{Map, Value};

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
