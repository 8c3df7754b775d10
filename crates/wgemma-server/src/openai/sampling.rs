//! The sampling and length fields both endpoints share (`model`, `max_tokens`, penalties,
//! `logit_bias`, `stop`, `seed`, `logprobs`, `stream_options`, `response_format`, tools),
//! each checked by name.

use crate::error::{clip, kind_of, ApiError};
use crate::openai::body::typed;
use crate::openai::fields::check_fields;
use crate::openai::response::Endpoint;
use crate::openai::response_format::ResponseFormat;
use crate::openai::tools::ToolRequest;
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::Value;
use wgemma::generate::sampling::{LogitAdjust, REPETITION_PENALTY_RANGE};
use wgemma::text::tool_markers::TOOL_RESPONSE_START;

/// Stop strings a request may give (OpenAI's limit).
pub const MAX_STOP_STRINGS: usize = 4;

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

pub fn common(
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
