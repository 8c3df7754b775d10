//! The route handlers: the chat page, health, metrics and models here; the completions'
//! answers in [`answer`], llama-server's extra endpoints in [`endpoints`].

pub mod answer;
pub mod endpoints;
pub mod prompt;
pub mod responses;

use crate::app::App;
use crate::error::ApiError;
use crate::openai::request;
use crate::openai::response::Endpoint;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use std::sync::Arc;

/// The chat page: static, so it needs no key (it asks for one when the API does).
pub async fn chat_page() -> Response {
    (
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        include_str!("page.html"),
    )
        .into_response()
}

pub async fn health(State(app): State<Arc<App>>) -> Response {
    if app.ready.get().is_some() {
        Json(serde_json::json!({"status": "ok"})).into_response()
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(serde_json::json!({"status": "loading"})),
        )
            .into_response()
    }
}

pub async fn not_found() -> Response {
    ApiError::invalid("", "no such endpoint: this server has /v1/chat/completions, /v1/completions, /v1/models, /health, /metrics, /tokenize, /detokenize, /apply-template, /props and /slots")
        .with_status(StatusCode::NOT_FOUND, "not_found")
        .into_response()
}

pub async fn metrics(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    if let Err(e) = app.authorize(&headers) {
        return e.into_response();
    }
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        app.metrics.render(app.kv_slots()),
    )
        .into_response()
}

pub async fn models(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    if let Err(e) = app.authorize(&headers) {
        return e.into_response();
    }
    let data: Vec<_> = app
        .model_ids()
        .into_iter()
        .map(|id| model_object(&app, id))
        .collect();
    Json(serde_json::json!({"object": "list", "data": data})).into_response()
}

fn model_object(app: &App, id: &str) -> serde_json::Value {
    serde_json::json!({"id": id, "object": "model", "created": app.created, "owned_by": "wgemma"})
}

/// `GET /v1/models/{id}`: the model under one of its names, or a 404 naming the names.
pub async fn model(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    if let Err(e) = app.authorize(&headers) {
        return e.into_response();
    }
    if app.model_ids().contains(&id.as_str()) {
        return Json(model_object(&app, &id)).into_response();
    }
    ApiError::invalid(
        "model",
        format!(
            "model: expected one of {:?} (the model this server runs), found {id:?}",
            app.model_ids()
        ),
    )
    .with_status(StatusCode::NOT_FOUND, "model_not_found")
    .into_response()
}

pub async fn chat_completions(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let parsed = app
        .authorize(&headers)
        .and_then(|()| app.ready().map(|_| ()))
        .and_then(|()| request::parse_chat(&body, &app.model_ids()));
    answer::answer(app, Endpoint::Chat, parsed).await
}

pub async fn completions(State(app): State<Arc<App>>, headers: HeaderMap, body: Bytes) -> Response {
    let parsed = app
        .authorize(&headers)
        .and_then(|()| app.ready().map(|_| ()))
        .and_then(|()| request::parse_completion(&body, &app.model_ids()));
    answer::answer(app, Endpoint::Completion, parsed).await
}
