//! The OpenAI HTTP API's side of `wgemma serve`: request bodies checked field by field (an
//! error names the field, what was expected and what was found, as OpenAI-style JSON with a
//! 4xx status). The answers' JSON is [`crate::openai::response`]'s.

use crate::error::{check_keys, kind_of, ApiError};
use crate::openai::body::parse_body;
use crate::openai::response::Endpoint;
use crate::openai::sampling::{common, Sampling};
use crate::openai::tool_messages::{attach_tool_response, parse_message_calls};
use serde_json::Value;
use wgemma::session::ChatMessage;

/// The prompt of a request.
#[derive(Debug, Clone)]
pub enum Prompt {
    Messages(Vec<ChatMessage>),
    Text(String),
    Ids(Vec<u32>),
}

#[derive(Debug, Clone)]
pub struct Parsed {
    pub prompt: Prompt,
    pub sampling: Sampling,
}

/// Text of a message's `content`: a string, or an array of `{"type": "text", "text": ...}`
/// parts (joined); other part types (images, audio) are refused.
fn content_text(i: usize, content: Option<&Value>) -> Result<String, ApiError> {
    let param = format!("messages[{i}].content");
    match content {
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Array(parts)) => parts
            .iter()
            .enumerate()
            .map(|(j, part)| {
                let at = format!("{param}[{j}]");
                check_keys(part, &["type", "text"], &at)?;
                match (part.get("type").and_then(Value::as_str), part.get("text")) {
                    (Some("text"), Some(Value::String(t))) => Ok(t.clone()),
                    (Some("text"), other) => Err(ApiError::field(
                        &format!("{at}.text"),
                        "a string",
                        other.map_or("none".into(), kind_of),
                    )),
                    (other, _) => Err(ApiError::field(
                        &format!("{at}.type"),
                        "\"text\" (this server takes text only)",
                        other.map_or("none".into(), |t| format!("{t:?}")),
                    )),
                }
            })
            .collect::<Result<Vec<_>, _>>()
            .map(|texts| texts.concat()),
        Some(other) => Err(ApiError::field(
            &param,
            "a string or an array of text parts",
            kind_of(other),
        )),
        None => Err(ApiError::field(&param, "a string", "none")),
    }
}

/// `POST /v1/chat/completions`.
pub fn parse_chat(body: &[u8], models: &[impl AsRef<str>]) -> Result<Parsed, ApiError> {
    let body = parse_body(body)?;
    let sampling = common(&body, models, Endpoint::Chat)?;
    Ok(Parsed {
        prompt: Prompt::Messages(parse_messages(&body)?),
        sampling,
    })
}

/// The `messages` of a body (chat completions, `/apply-template`).
pub fn parse_messages(body: &serde_json::Map<String, Value>) -> Result<Vec<ChatMessage>, ApiError> {
    let messages = match body.get("messages") {
        Some(Value::Array(items)) if !items.is_empty() => items,
        Some(Value::Array(_)) => {
            return Err(ApiError::field(
                "messages",
                "at least one message",
                "an empty array",
            ))
        }
        Some(other) => {
            return Err(ApiError::field(
                "messages",
                "an array of messages",
                kind_of(other),
            ))
        }
        None => return Err(ApiError::field("messages", "an array of messages", "none")),
    };
    let mut out: Vec<ChatMessage> = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        let Some(fields) = m.as_object() else {
            return Err(ApiError::field(
                &format!("messages[{i}]"),
                "a message object",
                kind_of(m),
            ));
        };
        let role = match m.get("role") {
            Some(Value::String(r)) => r.as_str(),
            other => {
                return Err(ApiError::field(
                    &format!("messages[{i}].role"),
                    "a string",
                    other.map_or("none".into(), kind_of),
                ))
            }
        };
        // OpenAI's newer name for the system role.
        let role = match role {
            "developer" => "system",
            "system" | "user" | "assistant" | "tool" => role,
            other => {
                return Err(ApiError::field(
                    &format!("messages[{i}].role"),
                    "one of system, developer, user, assistant, tool",
                    format!("{other:?}"),
                ))
            }
        };
        // Nothing of a message goes unread: what the chat format cannot carry is refused.
        let extra: &[&str] = match role {
            "assistant" => &["tool_calls"],
            "tool" => &["tool_call_id"],
            _ => &[],
        };
        if let Some((key, _)) = fields.iter().find(|(k, v)| {
            !matches!(k.as_str(), "role" | "content" | "name")
                && !extra.contains(&k.as_str())
                && !v.is_null()
        }) {
            return Err(ApiError::invalid(
                &format!("messages[{i}].{key}"),
                format!(
                    "messages[{i}].{key}: not supported by this server (a message here is a \
                     role and a content, with tool_calls on an assistant message and \
                     tool_call_id on a tool message)"
                ),
            ));
        }
        let calls = match m.get("tool_calls") {
            Some(v) if role == "assistant" && !v.is_null() => parse_message_calls(i, v)?,
            _ => Vec::new(),
        };
        // An assistant message that only calls may have no content (OpenAI sends null).
        let content = match m.get("content") {
            None | Some(Value::Null) if !calls.is_empty() => String::new(),
            content => content_text(i, content)?,
        };
        if role == "tool" {
            attach_tool_response(&mut out, i, m.get("tool_call_id"), content)?;
            continue;
        }
        let mut message = ChatMessage::new(role, &content);
        message.tool_calls = calls;
        message.name = match m.get("name") {
            None | Some(Value::Null) => None,
            Some(Value::String(n)) => Some(n.clone()),
            Some(other) => {
                return Err(ApiError::field(
                    &format!("messages[{i}].name"),
                    "a string",
                    kind_of(other),
                ))
            }
        };
        out.push(message);
    }
    Ok(out)
}

/// `POST /v1/completions`: `prompt` is a string, token ids, or an array of one of either.
pub fn parse_completion(body: &[u8], models: &[impl AsRef<str>]) -> Result<Parsed, ApiError> {
    let body = parse_body(body)?;
    let sampling = common(&body, models, Endpoint::Completion)?;
    let ids = |items: &[Value]| -> Option<Vec<u32>> {
        items
            .iter()
            .map(|v| v.as_u64().and_then(|n| u32::try_from(n).ok()))
            .collect()
    };
    let prompt = match body.get("prompt") {
        Some(Value::String(s)) => Prompt::Text(s.clone()),
        Some(Value::Array(items)) if !items.is_empty() && items.iter().all(Value::is_number) => {
            Prompt::Ids(ids(items).ok_or_else(|| {
                ApiError::field(
                    "prompt",
                    "token ids (integers 0..=4294967295)",
                    "another number",
                )
            })?)
        }
        Some(Value::Array(items)) if items.len() == 1 => match &items[0] {
            Value::String(s) => Prompt::Text(s.clone()),
            Value::Array(inner) if !inner.is_empty() => {
                Prompt::Ids(ids(inner).ok_or_else(|| {
                    ApiError::field(
                        "prompt[0]",
                        "token ids (integers 0..=4294967295)",
                        "another value",
                    )
                })?)
            }
            other => {
                return Err(ApiError::field(
                    "prompt[0]",
                    "a string or token ids",
                    kind_of(other),
                ))
            }
        },
        Some(Value::Array(items)) => {
            return Err(ApiError::field(
                "prompt",
                "one prompt (a string or token ids; batches are not supported)",
                format!("an array of {} items", items.len()),
            ))
        }
        Some(other) => {
            return Err(ApiError::field(
                "prompt",
                "a string or token ids",
                kind_of(other),
            ))
        }
        None => return Err(ApiError::field("prompt", "a string or token ids", "none")),
    };
    Ok(Parsed { prompt, sampling })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::openai::fields::FieldUse::Refused;
    use crate::openai::fields::{CHAT_FIELDS, COMPLETION_FIELDS, SHARED_FIELDS};
    use axum::http::StatusCode;

    fn chat_err(body: &str) -> ApiError {
        parse_chat(body.as_bytes(), &["m"]).unwrap_err()
    }

    #[test]
    fn bad_chat_bodies_name_the_field() {
        for (body, param, needle) in [
            ("{", None, "expected JSON"),
            ("[1]", None, "a JSON object"),
            (r#"{"messages": []}"#, Some("messages"), "an empty array"),
            (
                r#"{"model": 3, "messages": []}"#,
                Some("model"),
                "the number 3",
            ),
            (
                r#"{"model": "m", "messages": []}"#,
                Some("messages"),
                "an empty array",
            ),
            (
                r#"{"model": "m", "messages": "hi"}"#,
                Some("messages"),
                "the string",
            ),
            (
                r#"{"model": "m", "messages": [{"role": "bot", "content": "x"}]}"#,
                Some("messages[0].role"),
                "\"bot\"",
            ),
            (
                r#"{"model": "m", "messages": [{"role": "user"}]}"#,
                Some("messages[0].content"),
                "none",
            ),
            (
                r#"{"model": "m", "messages": [{"role": "user", "content": [{"type": "image_url"}]}]}"#,
                Some("messages[0].content[0].type"),
                "image_url",
            ),
            (
                r#"{"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": "9"}"#,
                Some("max_tokens"),
                "invalid type",
            ),
            (
                r#"{"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": 0}"#,
                Some("max_tokens"),
                "at least 1",
            ),
            (
                r#"{"model": "m", "messages": [{"role": "user", "content": "x"}], "temperature": 3}"#,
                Some("temperature"),
                "[0, 2]",
            ),
            (
                r#"{"model": "m", "messages": [{"role": "user", "content": "x"}], "top_p": 0}"#,
                Some("top_p"),
                "(0, 1]",
            ),
            (
                r#"{"model": "m", "messages": [{"role": "user", "content": "x"}], "n": 2}"#,
                Some("n"),
                "found 2",
            ),
            (
                r#"{"model": "m", "messages": [{"role": "user", "content": "x"}], "stop": 5}"#,
                Some("stop"),
                "the number 5",
            ),
            (
                r#"{"model": "m", "messages": [{"role": "user", "content": "x"}], "stop": ["a", 1]}"#,
                Some("stop[1]"),
                "a string",
            ),
            (
                r#"{"model": "m", "messages": [{"role": "user", "content": "x"}], "stream": "yes"}"#,
                Some("stream"),
                "invalid type",
            ),
        ] {
            let e = chat_err(body);
            assert_eq!(e.status, StatusCode::BAD_REQUEST, "{body}");
            assert_eq!(e.param.as_deref(), param, "{body}: {}", e.message);
            assert!(e.message.contains(needle), "{body}: {}", e.message);
        }
        let e = chat_err(r#"{"model": "other", "messages": [{"role": "user", "content": "x"}]}"#);
        assert_eq!(
            (e.status, e.code),
            (StatusCode::NOT_FOUND, Some("model_not_found"))
        );
        assert!(e.message.contains("\"other\""), "{}", e.message);
    }

    #[test]
    fn sampling_fields_are_checked_and_kept() {
        let chat = |extra: &str| {
            parse_chat(
                format!(
                    r#"{{"model": "m", "messages": [{{"role": "user", "content": "x"}}]{extra}}}"#
                )
                .as_bytes(),
                &["m"],
            )
        };
        let p = chat(
            r#", "frequency_penalty": 0.5, "presence_penalty": -1, "repetition_penalty": 1.3,
               "min_p": 0.05, "logit_bias": {"12": -100, "3": 2.5}, "logprobs": true,
               "top_logprobs": 4, "user": "u""#,
        )
        .unwrap();
        let s = &p.sampling;
        assert_eq!(
            (
                s.adjust.frequency_penalty,
                s.adjust.presence_penalty,
                s.adjust.repetition_penalty
            ),
            (0.5, -1.0, 1.3)
        );
        assert_eq!(s.adjust.logit_bias, vec![(3, 2.5), (12, -100.0)]);
        assert_eq!(
            (s.min_p, s.logprobs, s.user.as_deref()),
            (0.05, Some(4), Some("u"))
        );
        for (extra, param) in [
            (r#", "frequency_penalty": 2.5"#, "frequency_penalty"),
            (r#", "presence_penalty": -3"#, "presence_penalty"),
            (r#", "repetition_penalty": 0"#, "repetition_penalty"),
            (r#", "min_p": 1.5"#, "min_p"),
            (r#", "logit_bias": {"a": 1}"#, "logit_bias"),
            (r#", "logit_bias": {"1": 200}"#, "logit_bias"),
            (r#", "logprobs": 3"#, "logprobs"),
            (r#", "top_logprobs": 2"#, "top_logprobs"),
            (r#", "logprobs": true, "top_logprobs": 21"#, "top_logprobs"),
            (
                r#", "stream_options": {"include_usage": true}"#,
                "stream_options",
            ),
            (
                r#", "stream": true, "stream_options": {"include_obfuscation": true}"#,
                "stream_options",
            ),
        ] {
            let e = chat(extra).unwrap_err();
            assert_eq!(e.param.as_deref(), Some(param), "{extra}: {}", e.message);
        }
        // No seed: a random one below 2^63, so two requests differ.
        let (a, b) = (chat("").unwrap(), chat("").unwrap());
        assert_ne!(a.sampling.seed, b.sampling.seed);
        assert!(a.sampling.seed < 1 << 63 && b.sampling.seed < 1 << 63);
        // Any 64-bit seed is taken back as it was reported.
        let big = chat(r#", "seed": 11370070643807128939"#).unwrap();
        assert_eq!(big.sampling.seed, 11370070643807128939);
        let e = chat(r#", "seed": 1.5"#).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("seed"), "{}", e.message);
        let c =
            parse_completion(br#"{"model": "m", "prompt": "x", "logprobs": 0}"#, &["m"]).unwrap();
        assert_eq!(c.sampling.logprobs, Some(0));
        let e = parse_completion(br#"{"model": "m", "prompt": "x", "logprobs": 6}"#, &["m"])
            .unwrap_err();
        assert_eq!(e.param.as_deref(), Some("logprobs"));
        let e = chat(r#", "messages": [{"role": "user", "content": "x", "name": 5}]"#);
        assert!(e.is_err());
    }

    #[test]
    fn good_bodies_parse() {
        let p = parse_chat(
            br#"{"model": "m", "messages": [{"role": "developer", "content": "s"},
                {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}],
                "max_tokens": 5, "temperature": 0, "seed": -1, "stop": "x", "stream": true,
                "stream_options": {"include_usage": true}, "user": "ignored"}"#,
            &["m"],
        )
        .unwrap();
        let Prompt::Messages(m) = &p.prompt else {
            panic!()
        };
        assert_eq!(
            m,
            &vec![
                ChatMessage::new("system", "s"),
                ChatMessage::new("user", "ab")
            ]
        );
        let s = &p.sampling;
        assert_eq!(
            (s.max_tokens, s.temperature, s.seed),
            (Some(5), 0.0, u64::MAX)
        );
        assert_eq!(s.stop, vec!["x".to_string()]);
        assert!(s.stream && s.include_usage);
        for (prompt, ids) in [
            ("[5, 6]", Some(vec![5, 6])),
            ("[[7]]", Some(vec![7])),
            ("\"t\"", None),
            ("[\"t\"]", None),
        ] {
            let p = parse_completion(
                format!(r#"{{"model": "m", "prompt": {prompt}}}"#).as_bytes(),
                &["m"],
            )
            .unwrap();
            match (p.prompt, ids) {
                (Prompt::Ids(got), Some(want)) => assert_eq!(got, want),
                (Prompt::Text(t), None) => assert_eq!(t, "t"),
                (other, _) => panic!("{prompt}: {other:?}"),
            }
        }
        let e = parse_completion(br#"{"model": "m", "prompt": ["a", "b"]}"#, &["m"]).unwrap_err();
        assert!(e.message.contains("batches"), "{}", e.message);
        let huge = parse_completion(
            br#"{"model": "m", "prompt": "a", "max_tokens": 18446744073709551615}"#,
            &["m"],
        )
        .unwrap();
        assert!(huge.sampling.max_tokens.unwrap() > 1 << 40);
    }

    #[test]
    fn every_field_is_used_or_refused_by_name() {
        for (endpoint, own, base) in [
            (
                Endpoint::Chat,
                CHAT_FIELDS,
                r#""messages": [{"role": "user", "content": "x"}]"#,
            ),
            (Endpoint::Completion, COMPLETION_FIELDS, r#""prompt": "x""#),
        ] {
            let parse = |extra: &str| {
                let body = format!(r#"{{"model": "m", {base}{extra}}}"#);
                match endpoint {
                    Endpoint::Chat => parse_chat(body.as_bytes(), &["m"]),
                    Endpoint::Completion => parse_completion(body.as_bytes(), &["m"]),
                }
            };
            for (name, u) in SHARED_FIELDS.iter().chain(own) {
                // Null is the field's default: taken for all but the required ones.
                let required = matches!(*name, "messages" | "prompt");
                let null = parse(&format!(r#", "{name}": null"#));
                assert_eq!(null.is_ok(), !required, "{name}: null");
                if let Refused { .. } = u {
                    let e = parse(&format!(r#", "{name}": {{"x": 1}}"#)).unwrap_err();
                    assert_eq!(e.param.as_deref(), Some(*name), "{}", e.message);
                    assert!(e.message.contains("not supported"), "{}", e.message);
                }
            }
            let e = parse(r#", "mirostat": 1"#).unwrap_err();
            assert_eq!(e.param.as_deref(), Some("mirostat"));
            assert!(e.message.contains("unknown field"), "{}", e.message);
            for allowed in [
                r#", "n": 1"#,
                r#", "store": false"#,
                r#", "service_tier": "auto""#,
                r#", "best_of": 1"#,
                r#", "echo": false"#,
                r#", "response_format": {"type": "text"}"#,
                r#", "response_format": {"type": "json_object"}"#,
                r#", "tools": []"#,
            ] {
                let known = SHARED_FIELDS
                    .iter()
                    .chain(own)
                    .any(|(n, _)| allowed.contains(&format!("\"{n}\"")));
                assert_eq!(parse(allowed).is_ok(), known, "{allowed}");
            }
        }
    }
}
