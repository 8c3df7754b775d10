//! llama-server's utility endpoints of `wgemma serve`, answered with the model's detached
//! tokenizer and chat template (they never wait for a decode step; tokenising and rendering
//! run on tokio's blocking threads, so a 4 MiB body never stalls the HTTP runtime):
//!
//! - `POST /tokenize` `{"content": TEXT, "add_special": false, "with_pieces": false}` ->
//!   `{"tokens": [ids]}` (or `[{"id", "piece"}]`); `add_special` prepends `<bos>`.
//! - `POST /detokenize` `{"tokens": [ids]}` -> `{"content": TEXT}` (special tokens skipped).
//! - `POST /apply-template` `{"messages": [...], "tools": [...]}` -> `{"prompt": TEXT}`: the
//!   conversation (and the tools, as chat completions take them) as the model sees it,
//!   ready for its answer.
//! - `GET /props`: the model, adapter, context, slots, speculative mode and the sampling
//!   defaults.
//! - `GET /slots`: each KV slot and the request holding it.
//!
//! Each body is checked as the completions' are: unknown fields and wrong types are 400s
//! that name the field.

use crate::app::App;
use crate::error::{kind_of, ApiError};
use crate::handlers::prompt::{check_message_count, check_text_bytes, tokenizer_turn};
use crate::openai::response::SYSTEM_FINGERPRINT;
use crate::openai::tools::ToolRequest;
use crate::openai::{body, request};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};
use std::sync::Arc;
use wgemma::text::tokenizer::Tokenizer;

/// The body as `T`, refusing unknown fields by name.
fn body_of<T: for<'de> Deserialize<'de>>(body: &[u8]) -> Result<T, ApiError> {
    let map = body::parse_body(body)?;
    serde_path_to_error::deserialize(Value::Object(map)).map_err(|e| {
        let path = e.path().to_string();
        let param = path.split(['.', '[']).next().unwrap_or("").to_string();
        ApiError::invalid(&param, format!("{path}: {}", e.inner()))
    })
}

/// Key, readiness and the tokenizer (a model without one has no text side).
fn tokenizer_of(app: &App, headers: &HeaderMap) -> Result<Arc<Tokenizer>, ApiError> {
    app.authorize(headers)?;
    app.ready()?.text.tokenizer.clone().ok_or_else(|| {
        ApiError::invalid(
            "",
            "this model has no tokenizer (tokenizer.json); send token ids instead",
        )
    })
}

/// `work` on tokio's blocking threads: text work whose time grows with the body (up to
/// 4 MiB) must not hold one of the few threads that serve every connection.
async fn off_the_runtime<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| ApiError::internal(format!("text work stopped: {e}")))?
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TokenizeBody {
    content: String,
    #[serde(default)]
    add_special: bool,
    #[serde(default)]
    with_pieces: bool,
}

pub async fn tokenize(State(app): State<Arc<App>>, headers: HeaderMap, body: Bytes) -> Response {
    let checked = (|| {
        let tok = tokenizer_of(&app, &headers)?;
        let b: TokenizeBody = body_of(&body)?;
        check_text_bytes("content", b.content.len(), app.ready()?.info.context)?;
        Ok::<_, ApiError>((tok, b))
    })();
    let answer = match checked {
        Ok((tok, b)) => {
            let _turn = tokenizer_turn().await;
            off_the_runtime(move || tokens_of(&tok, &b)).await
        }
        Err(e) => Err(e),
    };
    respond(answer)
}

/// `/tokenize`'s answer to a checked body.
fn tokens_of(tok: &Tokenizer, b: &TokenizeBody) -> Result<Value, ApiError> {
    let ids = if b.add_special {
        tok.encode_prompt(&b.content)
    } else {
        tok.encode(&b.content)
    }
    .map_err(|e| ApiError::invalid("content", format!("content: {e}")))?;
    let tokens: Vec<Value> = if b.with_pieces {
        ids.iter()
            .map(|&id| json!({"id": id, "piece": tok.decode(&[id]).unwrap_or_default()}))
            .collect()
    } else {
        ids.iter().map(|&id| json!(id)).collect()
    };
    Ok(json!({"tokens": tokens}))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DetokenizeBody {
    tokens: Vec<u32>,
}

pub async fn detokenize(State(app): State<Arc<App>>, headers: HeaderMap, body: Bytes) -> Response {
    let answer = (|| {
        let tok = tokenizer_of(&app, &headers)?;
        let b: DetokenizeBody = body_of(&body)?;
        let vocab = app.ready()?.info.vocab_size;
        if let Some((i, id)) = b
            .tokens
            .iter()
            .enumerate()
            .find(|(_, &t)| t as usize >= vocab)
        {
            return Err(ApiError::field(
                &format!("tokens[{i}]"),
                format!("a token id < {vocab} (the vocabulary size)"),
                id,
            ));
        }
        let content = tok
            .decode(&b.tokens)
            .map_err(|e| ApiError::invalid("tokens", format!("tokens: {e}")))?;
        Ok(json!({"content": content}))
    })();
    respond(answer)
}

pub async fn apply_template(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let checked = (|| {
        app.authorize(&headers)?;
        let ready = app.ready()?;
        let map = body::parse_body(&body)?;
        if let Some((key, value)) = map.iter().find(|(k, _)| {
            !matches!(
                k.as_str(),
                "messages" | "tools" | "tool_choice" | "parallel_tool_calls"
            )
        }) {
            return Err(ApiError::invalid(
                key,
                format!(
                    "{key}: unknown field; /apply-template takes messages, tools, tool_choice \
                     and parallel_tool_calls (found {})",
                    kind_of(value)
                ),
            ));
        }
        let messages = request::parse_messages(&map)?;
        check_message_count(messages.len(), ready.info.context)?;
        let tools = ToolRequest::parse(&map)?;
        let declared = tools.as_ref().map_or(&[][..], ToolRequest::declared);
        Ok((ready.text.clone(), messages, declared.to_vec()))
    })();
    let answer = match checked {
        Ok((text, messages, declared)) => {
            off_the_runtime(move || {
                let prompt = text
                    .render_chat(&messages, &declared)
                    .map_err(|e| ApiError::invalid("messages", format!("messages: {e}")))?;
                Ok(json!({"prompt": prompt}))
            })
            .await
        }
        Err(e) => Err(e),
    };
    respond(answer)
}

pub async fn props(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    let answer = (|| {
        app.authorize(&headers)?;
        let info = &app.ready()?.info;
        Ok(json!({
            "model": app.model_name,
            "model_description": info.model,
            "adapter": info.adapter,
            "context": info.context,
            "vocab_size": info.vocab_size,
            "total_slots": info.slots,
            "speculative": info.speculative,
            "chat_format": info.chat_template,
            "structured_output": info.structured_output,
            "build": SYSTEM_FINGERPRINT,
            // What a request gets for each field it leaves out.
            "default_generation_settings": {
                "max_tokens": "the rest of the context",
                "temperature": 1.0, "top_p": 1.0, "top_k": 0, "min_p": 0.0,
                "frequency_penalty": 0.0, "presence_penalty": 0.0, "repetition_penalty": 1.0,
                "seed": "random, reported in the x-wgemma-seed header",
            },
        }))
    })();
    respond(answer)
}

pub async fn slots(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    let answer = (|| {
        app.authorize(&headers)?;
        let context = app.ready()?.info.context;
        let slots: Vec<Value> = app
            .metrics
            .slot_states()
            .into_iter()
            .map(|s| {
                json!({
                    "id": s.id,
                    "is_processing": s.request.is_some(),
                    "request_id": s.request,
                    "speculative": s.speculative,
                    "n_ctx": context,
                    "prompt_tokens": s.prompt_tokens,
                    "generated_tokens": s.generated_tokens,
                })
            })
            .collect();
        Ok(Value::Array(slots))
    })();
    respond(answer)
}

fn respond(answer: Result<Value, ApiError>) -> Response {
    match answer {
        Ok(v) => Json(v).into_response(),
        Err(e) => e.into_response(),
    }
}
