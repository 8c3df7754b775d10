//! `POST /v1/responses`: the Responses API (what the OpenAI Agents SDK calls by default),
//! served by the chat endpoint. The request becomes a chat completion request
//! ([`crate::openai::responses_request`]); the chat answer comes back as a response object,
//! or its stream of chunks as the Responses events ([`crate::openai::responses`]). Its log
//! line and metrics are the chat endpoint's.

use crate::app::App;
use crate::error::ApiError;
use crate::handlers::answer;
use crate::openai::body::parse_body;
use crate::openai::request;
use crate::openai::response::Endpoint;
use crate::openai::responses::{response_of, EventStream};
use crate::openai::responses_request::chat_request;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use serde_json::{json, Map, Value};
use std::convert::Infallible;
use std::sync::Arc;

/// The most bytes of a whole chat answer read back (its JSON: text, calls, logprobs).
const ANSWER_BYTES: usize = 64 << 20;

pub async fn responses(State(app): State<Arc<App>>, headers: HeaderMap, body: Bytes) -> Response {
    let request = match app.authorize(&headers).and_then(|()| parse_body(&body)) {
        Ok(request) => request,
        Err(e) => return e.into_response(),
    };
    let chat = match chat_request(&request) {
        Ok(chat) => chat,
        Err(refusal) => return ApiError::invalid(&refusal.param, refusal.message).into_response(),
    };
    let stream = chat.get("stream") == Some(&Value::Bool(true));
    let chat_body = Value::Object(chat).to_string();
    let parsed = app
        .ready()
        .map(|_| ())
        .and_then(|()| request::parse_chat(chat_body.as_bytes(), &app.model_ids()));
    let answer = answer::answer(app.clone(), Endpoint::Chat, parsed).await;
    if !answer.status().is_success() {
        return answer;
    }
    if stream {
        events(answer, request)
    } else {
        whole(answer, &request).await
    }
}

/// A whole chat completion as a response object (headers and log marks kept).
async fn whole(answer: Response, request: &Map<String, Value>) -> Response {
    let (mut parts, body) = answer.into_parts();
    let completion = match axum::body::to_bytes(body, ANSWER_BYTES).await {
        Ok(bytes) => serde_json::from_slice::<Value>(&bytes).map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    };
    let completion = match completion {
        Ok(c) => c,
        Err(e) => {
            return ApiError::internal(format!("reading the chat answer: {e}")).into_response()
        }
    };
    parts.headers.remove(header::CONTENT_LENGTH);
    let body = response_of(&completion, request).to_string();
    Response::from_parts(parts, Body::from(body))
}

/// The chat answer's server-sent chunks as Responses events (`event:` and `data:` lines).
fn events(answer: Response, request: Map<String, Value>) -> Response {
    let (parts, body) = answer.into_parts();
    let mut stream = EventStream::new(request);
    let mut buffer = String::new();
    let mut failed = false;
    let frames = body.into_data_stream().map(move |chunk| {
        let mut out = String::new();
        let Ok(chunk) = chunk else {
            return Ok::<_, Infallible>(Bytes::new());
        };
        buffer.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = buffer.find("\n\n") {
            let frame: String = buffer.drain(..end + 2).collect();
            for data in frame.lines().filter_map(|l| l.strip_prefix("data:")) {
                let events = match data.trim() {
                    "[DONE]" if failed => Vec::new(),
                    "[DONE]" => stream.finish(),
                    data => match serde_json::from_str::<Value>(data) {
                        Ok(v) if v.get("error").is_some() => {
                            failed = true;
                            let e = &v["error"];
                            vec![
                                stream.error(json!({"code": e["code"], "message": e["message"],
                                                     "param": e["param"]})),
                            ]
                        }
                        Ok(v) => stream.on_chunk(&v),
                        Err(_) => Vec::new(),
                    },
                };
                for (kind, v) in events {
                    out.push_str(&format!("event: {kind}\ndata: {v}\n\n"));
                }
            }
        }
        Ok(Bytes::from(out))
    });
    Response::from_parts(parts, Body::from_stream(frames))
}
