//! The OpenAI HTTP API's side of `wgemma serve`: request bodies checked field by field (an
//! error names the field, what was expected and what was found, as OpenAI-style JSON with a
//! 4xx status). The answers' JSON is [`crate::openai::response`]'s.

use crate::error::{check_keys, clip, kind_of, ApiError};
use crate::openai::fields::check_fields;
use crate::openai::response::Endpoint;
use crate::openai::structured::ResponseFormat;
use crate::openai::tools::{attach_tool_response, parse_message_calls, ToolRequest};
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::Value;
use wgemma::session::engine::{LogitAdjust, REPETITION_PENALTY_RANGE, TOOL_RESPONSE_START};
use wgemma::session::ChatMessage;

/// Stop strings a request may give (OpenAI's limit).
pub const MAX_STOP_STRINGS: usize = 4;

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
    /// Not OpenAI's (llama.cpp's, vLLM's).
    min_p: Option<f64>,
    /// Any 64-bit integer, signed (OpenAI's) or not (what this server reports).
    seed: Option<serde_json::Number>,
    stop: Option<Value>,
    stream: Option<bool>,
    stream_options: Option<StreamOptions>,
    n: Option<u64>,
    frequency_penalty: Option<f64>,
    presence_penalty: Option<f64>,
    /// Not OpenAI's (HF's, llama.cpp's, vLLM's).
    repetition_penalty: Option<f64>,
    logit_bias: Option<serde_json::Map<String, Value>>,
    logprobs: Option<Value>,
    top_logprobs: Option<u64>,
    user: Option<String>,
    safety_identifier: Option<String>,
    response_format: Option<Value>,
    /// llama.cpp's: whether to reuse a cached prompt prefix (a hint; this server keeps no
    /// prompt cache, so either value serves the same answer).
    #[allow(dead_code)]
    cache_prompt: Option<bool>,
    /// vLLM's and llama.cpp's: more variables for the chat template.
    chat_template_kwargs: Option<serde_json::Map<String, Value>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct StreamOptions {
    include_usage: Option<bool>,
}

/// The most alternatives `top_logprobs` (chat) may ask for, as OpenAI.
pub const MAX_TOP_LOGPROBS_CHAT: u64 = 20;
/// The most alternatives completions' `logprobs` may ask for, as OpenAI.
pub const MAX_TOP_LOGPROBS_COMPLETION: u64 = 5;

/// What a request asks for, checked.
#[derive(Debug, Clone)]
pub struct Sampling {
    /// None: up to the end of the context.
    pub max_tokens: Option<usize>,
    pub temperature: f32,
    pub top_p: f32,
    pub top_k: usize,
    pub min_p: f32,
    /// The request's, or a random one (reported in the `x-wgemma-seed` header).
    pub seed: u64,
    pub stop: Vec<String>,
    pub stream: bool,
    pub include_usage: bool,
    pub adjust: LogitAdjust,
    /// Each token's log-probability with this many alternatives.
    pub logprobs: Option<usize>,
    /// `user` / `safety_identifier`, for the log line.
    pub user: Option<String>,
    /// Structured output (chat).
    pub response_format: Option<ResponseFormat>,
    /// Tools the model may call (chat).
    pub tools: Option<ToolRequest>,
    /// More variables for the chat template (`chat_template_kwargs`).
    pub template_kwargs: serde_json::Map<String, Value>,
}

impl Sampling {
    /// Tools are declared to the model: its replies are read for calls.
    pub fn declares_tools(&self) -> bool {
        self.tools
            .as_ref()
            .is_some_and(|t| !t.declared().is_empty())
    }
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

fn common(
    body: &serde_json::Map<String, Value>,
    models: &[impl AsRef<str>],
    endpoint: Endpoint,
) -> Result<Sampling, ApiError> {
    check_fields(body, endpoint)?;
    let f: CommonFields = typed(body)?;
    check_model(f.model.as_ref(), models)?;
    let max_tokens = max_tokens_of(f.max_tokens, f.max_completion_tokens)?;
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
    let min_p = f.min_p.unwrap_or(0.0);
    if !(0.0..=1.0).contains(&min_p) {
        return Err(ApiError::field("min_p", "a number in [0, 1]", min_p));
    }
    if let Some(n) = f.n.filter(|&n| n != 1) {
        return Err(ApiError::field("n", "1 (one choice per request)", n));
    }
    let adjust = logit_adjust_of(&f)?;
    let logprobs = logprobs_of(endpoint, f.logprobs.as_ref(), f.top_logprobs)?;
    let stop = stop_of(f.stop)?;
    let tools = match endpoint {
        Endpoint::Chat => ToolRequest::parse(body)?,
        Endpoint::Completion => None,
    };
    let response_format = ResponseFormat::parse(f.response_format.as_ref())?;
    let mut stop = stop;
    if let Some(t) = &tools {
        if !t.declared().is_empty() {
            // Gemma 4 opens a tool response after its calls: the reply ends there, and the
            // client runs the calls.
            stop.push(TOOL_RESPONSE_START.to_string());
        }
    }
    let stream = f.stream.unwrap_or(false);
    if f.stream_options.is_some() && !stream {
        return Err(ApiError::invalid(
            "stream_options",
            "stream_options: expected stream: true with it, found stream absent or false",
        ));
    }
    Ok(Sampling {
        max_tokens,
        temperature: temperature as f32,
        top_p: top_p as f32,
        top_k: f
            .top_k
            .map_or(0, |k| usize::try_from(k).unwrap_or(usize::MAX)),
        min_p: min_p as f32,
        seed: seed_of(f.seed.as_ref())?,
        stop,
        stream,
        include_usage: stream
            && f.stream_options
                .and_then(|o| o.include_usage)
                .unwrap_or(false),
        adjust,
        logprobs,
        user: f.user.or(f.safety_identifier),
        response_format,
        tools,
        template_kwargs: f.chat_template_kwargs.unwrap_or_default(),
    })
}

/// The request's `model`, if given, must be one of the names this server runs its model
/// under (its name and `--alias`es); without one, the one model answers (as llama-server).
fn check_model(given: Option<&Value>, models: &[impl AsRef<str>]) -> Result<(), ApiError> {
    match given {
        None | Some(Value::Null) => {}
        Some(Value::String(m)) if models.iter().any(|n| n.as_ref() == m) => {}
        Some(Value::String(m)) => {
            let names: Vec<&str> = models.iter().map(AsRef::as_ref).collect();
            return Err(ApiError::invalid(
                "model",
                format!("model: expected one of {names:?} (the model this server runs; GET /v1/models), found {m:?}"),
            )
            .with_status(StatusCode::NOT_FOUND, "model_not_found"));
        }
        Some(other) => return Err(ApiError::field("model", "a string", kind_of(other))),
    }
    Ok(())
}

/// `max_tokens` or `max_completion_tokens` (not both; at least 1).
fn max_tokens_of(
    max_tokens: Option<u64>,
    max_completion_tokens: Option<u64>,
) -> Result<Option<usize>, ApiError> {
    Ok(match (max_tokens, max_completion_tokens) {
        (Some(_), Some(_)) => {
            return Err(ApiError::invalid(
                "max_tokens",
                "max_tokens and max_completion_tokens: expected one of them, found both",
            ))
        }
        (Some(0), _) => return Err(ApiError::field("max_tokens", "at least 1", 0)),
        (_, Some(0)) => return Err(ApiError::field("max_completion_tokens", "at least 1", 0)),
        (a, b) => a.or(b).map(|v| usize::try_from(v).unwrap_or(usize::MAX)),
    })
}

/// The penalties and `logit_bias` of a request, each checked against its range.
fn logit_adjust_of(f: &CommonFields) -> Result<LogitAdjust, ApiError> {
    let mut adjust = LogitAdjust::default();
    for (name, value, slot) in [
        (
            "frequency_penalty",
            f.frequency_penalty,
            &mut adjust.frequency_penalty,
        ),
        (
            "presence_penalty",
            f.presence_penalty,
            &mut adjust.presence_penalty,
        ),
    ] {
        match value {
            Some(v) if !(-2.0..=2.0).contains(&v) => {
                return Err(ApiError::field(name, "a number in [-2, 2]", v))
            }
            Some(v) => *slot = v as f32,
            None => {}
        }
    }
    let (low, high) = (
        REPETITION_PENALTY_RANGE.start(),
        REPETITION_PENALTY_RANGE.end(),
    );
    match f.repetition_penalty {
        Some(v) if !REPETITION_PENALTY_RANGE.contains(&(v as f32)) => {
            return Err(ApiError::field(
                "repetition_penalty",
                format!("a number in [{low}, {high}] (1 = off)"),
                format!("{v:?}"),
            ))
        }
        Some(v) => adjust.repetition_penalty = v as f32,
        None => {}
    }
    for (key, value) in f.logit_bias.iter().flatten() {
        let param = format!("logit_bias.{key}");
        // One spelling per id: "5", "05" and "+5" would each add their bias to token 5.
        let canonical =
            key == "0" || (!key.starts_with('0') && key.bytes().all(|b| b.is_ascii_digit()));
        let id: u32 = key.parse().ok().filter(|_| canonical).ok_or_else(|| {
            ApiError::invalid(
                "logit_bias",
                format!(
                    "logit_bias: expected token ids as keys, written as plain decimal integers \
                     (no sign, no leading zero), found {:?}",
                    clip(key, 32)
                ),
            )
        })?;
        let bias = match value.as_f64() {
            Some(b) if (-100.0..=100.0).contains(&b) => b as f32,
            _ => {
                return Err(ApiError::invalid(
                    "logit_bias",
                    format!(
                        "{param}: expected a number in [-100, 100], found {}",
                        kind_of(value)
                    ),
                ))
            }
        };
        adjust.logit_bias.push((id, bias));
    }
    adjust.logit_bias.sort_unstable_by_key(|b| b.0);
    Ok(adjust)
}

/// `stop`: absent, one string or up to [`MAX_STOP_STRINGS`] strings.
fn stop_of(stop: Option<Value>) -> Result<Vec<String>, ApiError> {
    Ok(match stop {
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
    })
}

/// The request's seed (a negative one as its two's complement), or with none a fresh one
/// per request (two calls differ), reported with the answer; below 2^63, so a client that
/// types seeds as signed 64-bit integers can send it back.
fn seed_of(seed: Option<&serde_json::Number>) -> Result<u64, ApiError> {
    match seed {
        None => Ok(rand::random::<u64>() >> 1),
        Some(n) => n
            .as_u64()
            .or_else(|| n.as_i64().map(|s| s as u64))
            .ok_or_else(|| {
                ApiError::field(
                    "seed",
                    "an integer in -2^63..2^64 (64 bits)",
                    format!("the number {n}"),
                )
            }),
    }
}

/// `logprobs` (chat: a boolean, with `top_logprobs` alternatives; completions: the number
/// of alternatives) as the alternatives to report, None for none.
fn logprobs_of(
    endpoint: Endpoint,
    logprobs: Option<&Value>,
    top_logprobs: Option<u64>,
) -> Result<Option<usize>, ApiError> {
    match endpoint {
        Endpoint::Chat => {
            let on = match logprobs {
                None | Some(Value::Null) => false,
                Some(Value::Bool(b)) => *b,
                Some(other) => {
                    return Err(ApiError::field("logprobs", "a boolean", kind_of(other)))
                }
            };
            match top_logprobs {
                Some(n) if n > MAX_TOP_LOGPROBS_CHAT => Err(ApiError::field(
                    "top_logprobs",
                    format!("an integer in 0..={MAX_TOP_LOGPROBS_CHAT}"),
                    n,
                )),
                Some(_) if !on => Err(ApiError::invalid(
                    "top_logprobs",
                    "top_logprobs: expected logprobs: true with it, found logprobs absent or false",
                )),
                n => Ok(on.then_some(n.unwrap_or(0) as usize)),
            }
        }
        Endpoint::Completion => match logprobs {
            None | Some(Value::Null) => Ok(None),
            Some(v) => match v.as_u64() {
                Some(n) if n <= MAX_TOP_LOGPROBS_COMPLETION => Ok(Some(n as usize)),
                _ => Err(ApiError::field(
                    "logprobs",
                    format!("an integer in 0..={MAX_TOP_LOGPROBS_COMPLETION}"),
                    kind_of(v),
                )),
            },
        },
    }
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
                     role, a content and a name, with tool_calls on an assistant message and \
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
        // Without `model` the one model answers; an alias names it too.
        let body = br#"{"messages": [{"role": "user", "content": "x"}]}"#;
        assert!(parse_chat(body, &["m"]).is_ok());
        let aliased = br#"{"model": "alias", "messages": [{"role": "user", "content": "x"}]}"#;
        assert!(parse_chat(aliased, &["m", "alias"]).is_ok());
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
        let e = chat(r#", "messages": [{"role": "user", "content": "x", "name": 5}]"#).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("messages[0].name"));
        let p = chat(
            r#", "messages": [{"role": "user", "content": "x", "name": "n"}],
            "chat_template_kwargs": {"enable_thinking": false}, "cache_prompt": true"#,
        )
        .unwrap();
        let Prompt::Messages(m) = &p.prompt else {
            panic!()
        };
        assert_eq!(m[0].name.as_deref(), Some("n"));
        assert_eq!(p.sampling.template_kwargs["enable_thinking"], false);
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
