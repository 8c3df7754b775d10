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
//!
//! Rendering is in `render`, the streamed split of a reply into text and calls in `stream`,
//! and the reading of a call's notation in `parse`.

mod parse;
mod render;
mod stream;

pub use parse::parse_call;
pub use render::{format_value, render_call, render_declaration, render_response};
pub use stream::{parse_cut_reply, parse_reply, ReplyPiece, ToolCallParser};

use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

pub(crate) use super::tool_markers::is_bare_key;

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
mod tests;
