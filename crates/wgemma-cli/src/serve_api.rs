//! The OpenAI HTTP API's side of `wgemma serve`: request bodies checked field by field (an
//! error names the field, what was expected and what was found, as OpenAI-style JSON with a
//! 4xx status), and the response and stream-chunk JSON of chat completions and completions.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{json, Value};
use wgemma::session::{ChatMessage, FinishReason};

/// Stop strings a request may give (OpenAI's limit).
pub const MAX_STOP_STRINGS: usize = 4;

/// An error answer: status, OpenAI's `error` object.
#[derive(Debug, Clone)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    pub kind: &'static str,
    pub param: Option<String>,
    pub code: Option<&'static str>,
}

impl ApiError {
    /// 400: a field (`param`) is wrong.
    pub fn invalid(param: &str, message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
            kind: "invalid_request_error",
            param: (!param.is_empty()).then(|| param.to_string()),
            code: None,
        }
    }

    /// `{field}: expected {expected}, found {found}`.
    pub fn field(
        param: &str,
        expected: impl std::fmt::Display,
        found: impl std::fmt::Display,
    ) -> ApiError {
        ApiError::invalid(
            param,
            format!("{param}: expected {expected}, found {found}"),
        )
    }

    pub fn with_status(mut self, status: StatusCode, code: &'static str) -> ApiError {
        self.status = status;
        self.code = Some(code);
        self
    }

    pub fn unauthorized(message: impl Into<String>) -> ApiError {
        ApiError::invalid("", message).with_status(StatusCode::UNAUTHORIZED, "invalid_api_key")
    }

    pub fn overloaded(message: impl Into<String>) -> ApiError {
        ApiError {
            kind: "server_error",
            ..ApiError::invalid("", message)
                .with_status(StatusCode::SERVICE_UNAVAILABLE, "overloaded")
        }
    }

    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError {
            kind: "server_error",
            ..ApiError::invalid("", message)
                .with_status(StatusCode::INTERNAL_SERVER_ERROR, "internal_error")
        }
    }

    pub fn to_json(&self) -> Value {
        json!({"error": {
            "message": self.message,
            "type": self.kind,
            "param": self.param,
            "code": self.code,
        }})
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, axum::Json(self.to_json())).into_response()
    }
}

/// A JSON value's kind, in words, for error messages.
pub fn kind_of(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => format!("the boolean {b}"),
        Value::Number(n) => format!("the number {n}"),
        Value::String(s) if s.chars().count() > 40 => "a string".into(),
        Value::String(s) => format!("the string {s:?}"),
        Value::Array(_) => "an array".into(),
        Value::Object(_) => "an object".into(),
    }
}

/// The body as a JSON object, or a 400 naming what is wrong with it.
pub fn parse_body(body: &[u8]) -> Result<serde_json::Map<String, Value>, ApiError> {
    let value: Value = serde_json::from_slice(body).map_err(|e| {
        ApiError::invalid(
            "",
            format!("request body: expected JSON, found invalid JSON ({e})"),
        )
    })?;
    match value {
        Value::Object(map) => Ok(map),
        other => Err(ApiError::invalid(
            "",
            format!(
                "request body: expected a JSON object, found {}",
                kind_of(&other)
            ),
        )),
    }
}

/// Typed fields: `serde_path_to_error` names the field of a wrong type.
fn typed<T: for<'de> Deserialize<'de>>(
    body: &serde_json::Map<String, Value>,
) -> Result<T, ApiError> {
    let value = Value::Object(body.clone());
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let param = path.split(['.', '[']).next().unwrap_or("").to_string();
        ApiError::invalid(&param, format!("{path}: {}", e.inner()))
    })
}

/// The sampling and length fields both endpoints share.
#[derive(Debug, Deserialize)]
struct CommonFields {
    model: Option<Value>,
    max_tokens: Option<u64>,
    max_completion_tokens: Option<u64>,
    temperature: Option<f64>,
    top_p: Option<f64>,
    /// Not OpenAI's; llama.cpp's and vLLM's servers take it too.
    top_k: Option<u64>,
    seed: Option<i64>,
    stop: Option<Value>,
    stream: Option<bool>,
    stream_options: Option<StreamOptions>,
    n: Option<u64>,
    logprobs: Option<Value>,
    echo: Option<bool>,
}

#[derive(Debug, Deserialize)]
struct StreamOptions {
    include_usage: Option<bool>,
}

/// What a request asks for, checked.
#[derive(Debug, Clone)]
pub struct Sampling {
    /// None: up to the end of the context.
    pub max_tokens: Option<usize>,
    pub temperature: f32,
    pub top_p: f32,
    pub top_k: usize,
    pub seed: u64,
    pub stop: Vec<String>,
    pub stream: bool,
    pub include_usage: bool,
}

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

fn common(body: &serde_json::Map<String, Value>, model: &str) -> Result<Sampling, ApiError> {
    let f: CommonFields = typed(body)?;
    match &f.model {
        Some(Value::String(m)) if m == model => {}
        Some(Value::String(m)) => {
            return Err(ApiError::invalid(
                "model",
                format!("model: expected {model:?} (the model this server runs; GET /v1/models), found {m:?}"),
            )
            .with_status(StatusCode::NOT_FOUND, "model_not_found"))
        }
        Some(other) => return Err(ApiError::field("model", "a string", kind_of(other))),
        None => return Err(ApiError::field("model", format!("a model id ({model:?})"), "none")),
    }
    let max_tokens = match (f.max_tokens, f.max_completion_tokens) {
        (Some(_), Some(_)) => {
            return Err(ApiError::invalid(
                "max_tokens",
                "max_tokens and max_completion_tokens: expected one of them, found both",
            ))
        }
        (Some(0), _) => return Err(ApiError::field("max_tokens", "at least 1", 0)),
        (_, Some(0)) => return Err(ApiError::field("max_completion_tokens", "at least 1", 0)),
        (a, b) => a.or(b).map(|v| usize::try_from(v).unwrap_or(usize::MAX)),
    };
    let temperature = f.temperature.unwrap_or(1.0);
    if !(0.0..=2.0).contains(&temperature) {
        return Err(ApiError::field(
            "temperature",
            "a number in [0, 2]",
            temperature,
        ));
    }
    let top_p = f.top_p.unwrap_or(1.0);
    // Sampling runs in f32: a top_p that rounds to 0 there is as invalid as 0.
    if !(top_p > 0.0 && top_p <= 1.0 && top_p as f32 > 0.0) {
        return Err(ApiError::field(
            "top_p",
            "a number in (0, 1] (at least about 1e-45, f32's smallest)",
            top_p,
        ));
    }
    if let Some(n) = f.n.filter(|&n| n != 1) {
        return Err(ApiError::field("n", "1 (one choice per request)", n));
    }
    if let Some(v) = f
        .logprobs
        .as_ref()
        .filter(|v| !matches!(v, Value::Null | Value::Bool(false)))
    {
        return Err(ApiError::field(
            "logprobs",
            "false or absent (not supported)",
            kind_of(v),
        ));
    }
    if f.echo == Some(true) {
        return Err(ApiError::field(
            "echo",
            "false or absent (not supported)",
            true,
        ));
    }
    let stop = match f.stop {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(s)) => vec![s],
        Some(Value::Array(items)) => {
            if items.len() > MAX_STOP_STRINGS {
                return Err(ApiError::field(
                    "stop",
                    format!("at most {MAX_STOP_STRINGS} strings"),
                    items.len(),
                ));
            }
            items
                .iter()
                .enumerate()
                .map(|(i, v)| match v {
                    Value::String(s) => Ok(s.clone()),
                    other => Err(ApiError::field(
                        &format!("stop[{i}]"),
                        "a string",
                        kind_of(other),
                    )),
                })
                .collect::<Result<_, _>>()?
        }
        Some(other) => {
            return Err(ApiError::field(
                "stop",
                "a string or an array of strings",
                kind_of(&other),
            ))
        }
    };
    let stream = f.stream.unwrap_or(false);
    Ok(Sampling {
        max_tokens,
        temperature: temperature as f32,
        top_p: top_p as f32,
        top_k: f
            .top_k
            .map_or(0, |k| usize::try_from(k).unwrap_or(usize::MAX)),
        seed: f.seed.map_or(0, |s| s as u64),
        stop,
        stream,
        include_usage: stream
            && f.stream_options
                .and_then(|o| o.include_usage)
                .unwrap_or(false),
    })
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
pub fn parse_chat(body: &[u8], model: &str) -> Result<Parsed, ApiError> {
    let body = parse_body(body)?;
    let sampling = common(&body, model)?;
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
    let messages = messages
        .iter()
        .enumerate()
        .map(|(i, m)| {
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
                "system" | "user" | "assistant" => role,
                other => {
                    return Err(ApiError::field(
                        &format!("messages[{i}].role"),
                        "one of system, developer, user, assistant",
                        format!("{other:?}"),
                    ))
                }
            };
            Ok(ChatMessage::new(role, &content_text(i, m.get("content"))?))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Parsed {
        prompt: Prompt::Messages(messages),
        sampling,
    })
}

/// `POST /v1/completions`: `prompt` is a string, token ids, or an array of one of either.
pub fn parse_completion(body: &[u8], model: &str) -> Result<Parsed, ApiError> {
    let body = parse_body(body)?;
    let sampling = common(&body, model)?;
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

pub fn finish_reason(r: FinishReason) -> &'static str {
    match r {
        FinishReason::Stop => "stop",
        // A cancelled request has no client left to read it.
        FinishReason::Length | FinishReason::Cancelled => "length",
    }
}

pub fn usage(prompt: usize, completion: usize) -> Value {
    json!({"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion})
}

/// Which endpoint a response is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    Chat,
    Completion,
}

impl Endpoint {
    pub fn label(self) -> &'static str {
        match self {
            Endpoint::Chat => "chat_completions",
            Endpoint::Completion => "completions",
        }
    }

    pub fn id(self, n: u64) -> String {
        match self {
            Endpoint::Chat => format!("chatcmpl-{n}"),
            Endpoint::Completion => format!("cmpl-{n}"),
        }
    }

    /// The whole response of a non-streaming request.
    pub fn response(
        self,
        id: &str,
        created: u64,
        model: &str,
        text: &str,
        finish: &str,
        usage: Value,
    ) -> Value {
        match self {
            Endpoint::Chat => json!({
                "id": id, "object": "chat.completion", "created": created, "model": model,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                             "logprobs": null, "finish_reason": finish}],
                "usage": usage,
            }),
            Endpoint::Completion => json!({
                "id": id, "object": "text_completion", "created": created, "model": model,
                "choices": [{"index": 0, "text": text, "logprobs": null, "finish_reason": finish}],
                "usage": usage,
            }),
        }
    }

    /// One stream chunk: `text` (the chat's first chunk also carries the role), or the last
    /// one with `finish`.
    pub fn chunk(
        self,
        id: &str,
        created: u64,
        model: &str,
        text: Option<&str>,
        first: bool,
        finish: Option<&str>,
    ) -> Value {
        match self {
            Endpoint::Chat => {
                let mut delta = serde_json::Map::new();
                if first {
                    delta.insert("role".into(), "assistant".into());
                }
                if let Some(t) = text {
                    delta.insert("content".into(), t.into());
                }
                json!({
                    "id": id, "object": "chat.completion.chunk", "created": created, "model": model,
                    "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}],
                })
            }
            Endpoint::Completion => json!({
                "id": id, "object": "text_completion", "created": created, "model": model,
                "choices": [{"index": 0, "text": text.unwrap_or(""), "logprobs": null, "finish_reason": finish}],
            }),
        }
    }

    /// The usage chunk (`stream_options.include_usage`): no choices.
    pub fn usage_chunk(self, id: &str, created: u64, model: &str, usage: Value) -> Value {
        let object = match self {
            Endpoint::Chat => "chat.completion.chunk",
            Endpoint::Completion => "text_completion",
        };
        json!({"id": id, "object": object, "created": created, "model": model, "choices": [], "usage": usage})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chat_err(body: &str) -> ApiError {
        parse_chat(body.as_bytes(), "m").unwrap_err()
    }

    #[test]
    fn bad_chat_bodies_name_the_field() {
        for (body, param, needle) in [
            ("{", None, "expected JSON"),
            ("[1]", None, "a JSON object"),
            (r#"{"messages": []}"#, Some("model"), "found none"),
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
    fn good_bodies_parse() {
        let p = parse_chat(
            br#"{"model": "m", "messages": [{"role": "developer", "content": "s"},
                {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}],
                "max_tokens": 5, "temperature": 0, "seed": -1, "stop": "x", "stream": true,
                "stream_options": {"include_usage": true}, "user": "ignored"}"#,
            "m",
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
                "m",
            )
            .unwrap();
            match (p.prompt, ids) {
                (Prompt::Ids(got), Some(want)) => assert_eq!(got, want),
                (Prompt::Text(t), None) => assert_eq!(t, "t"),
                (other, _) => panic!("{prompt}: {other:?}"),
            }
        }
        let e = parse_completion(br#"{"model": "m", "prompt": ["a", "b"]}"#, "m").unwrap_err();
        assert!(e.message.contains("batches"), "{}", e.message);
        let huge = parse_completion(
            br#"{"model": "m", "prompt": "a", "max_tokens": 18446744073709551615}"#,
            "m",
        )
        .unwrap();
        assert!(huge.sampling.max_tokens.unwrap() > 1 << 40);
    }
}
