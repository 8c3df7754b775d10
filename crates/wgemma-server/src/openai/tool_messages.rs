//! A conversation's tool traffic in (OpenAI's shapes to the library's [`ChatMessage`]): an
//! assistant message's `tool_calls`, and each `tool` message as the response to the call
//! it answers, on the turn that made the call.

use crate::error::{check_keys, clip, kind_of, ApiError};
use serde_json::Value;
use wgemma::session::{ChatMessage, ToolCall, ToolDeclaration, ToolResponse};

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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
