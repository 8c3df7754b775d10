//! The router: every route, the guard before them, and OpenAI-style JSON errors, an
//! `x-request-id` and a log line for every answer.

use crate::app::{App, Logged, REQUEST_ID};
use crate::error::ApiError;
use crate::handlers::{self, endpoints};
use crate::http::admission;
use axum::extract::DefaultBodyLimit;
use axum::extract::Request;
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use std::sync::Arc;
use std::time::Instant;

/// The method each route takes (a 405 names it).
const ROUTE_METHODS: &[(&str, &str)] = &[
    ("/", "GET"),
    ("/health", "GET"),
    ("/metrics", "GET"),
    ("/v1/models", "GET"),
    ("/v1/chat/completions", "POST"),
    ("/v1/completions", "POST"),
    ("/v1/responses", "POST"),
    ("/tokenize", "POST"),
    ("/detokenize", "POST"),
    ("/apply-template", "POST"),
    ("/props", "GET"),
    ("/slots", "GET"),
];

fn method_of(path: &str) -> Option<&'static str> {
    ROUTE_METHODS
        .iter()
        .find(|(p, _)| *p == path)
        .map(|(_, m)| *m)
}

/// The router: every route, JSON errors and a log line for every answer.
pub fn router(app: Arc<App>, guard: Arc<admission::Guard>) -> Router {
    Router::new()
        .route("/", get(handlers::chat_page))
        .route("/health", get(handlers::health))
        .route("/metrics", get(handlers::metrics))
        .route("/v1/models", get(handlers::models))
        .route("/v1/models/{id}", get(handlers::model))
        .route("/v1/chat/completions", post(handlers::chat_completions))
        .route("/v1/completions", post(handlers::completions))
        .route("/v1/responses", post(handlers::responses::responses))
        .route("/tokenize", post(endpoints::tokenize))
        .route("/detokenize", post(endpoints::detokenize))
        .route("/apply-template", post(endpoints::apply_template))
        .route("/props", get(endpoints::props))
        .route("/slots", get(endpoints::slots))
        .fallback(handlers::not_found)
        // The guard reads bodies itself, within its per-route bound; its refusals are
        // JSON already and get their request id and log line from the outer layer.
        .layer(DefaultBodyLimit::disable())
        .layer(axum::middleware::from_fn_with_state(
            guard,
            admission::check,
        ))
        .layer(axum::middleware::from_fn(json_errors_and_log))
        .with_state(app)
}

/// Turns every error answer that is not JSON yet (axum's 405 and body rejections, say) into
/// OpenAI-style JSON naming the method and path, gives every answer an `x-request-id`, and
/// writes the log line of every request whose handler did not.
async fn json_errors_and_log(request: Request, next: Next) -> Response {
    let (method, path) = (request.method().clone(), request.uri().path().to_string());
    let started = Instant::now();
    let mut response = next.run(request).await;
    let status = response.status();
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if (status.is_client_error() || status.is_server_error()) && !is_json {
        let allow = response
            .headers()
            .get(header::ALLOW)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
            .or_else(|| method_of(&path).map(str::to_string));
        let body = axum::body::to_bytes(std::mem::take(response.body_mut()), 64 * 1024)
            .await
            .unwrap_or_default();
        let detail = String::from_utf8_lossy(&body).trim().to_string();
        let message = match (status, allow) {
            (StatusCode::METHOD_NOT_ALLOWED, Some(allow)) => {
                format!("{method} {path}: expected the method {allow}, found {method}")
            }
            _ if detail.is_empty() => format!(
                "{method} {path}: {}",
                status.canonical_reason().unwrap_or("error")
            ),
            _ => format!("{method} {path}: {detail}"),
        };
        let mut json = ApiError::invalid("", message)
            .with_status(status, "request_error")
            .into_response();
        if status == StatusCode::METHOD_NOT_ALLOWED {
            if let Some(allow) = method_of(&path) {
                json.headers_mut()
                    .insert(header::ALLOW, HeaderValue::from_static(allow));
            }
        }
        response = json;
    }
    if !response.headers().contains_key(REQUEST_ID) {
        let id = format!("req-{:024x}", rand::random::<u128>() >> 32);
        if let Ok(v) = HeaderValue::from_str(&id) {
            response.headers_mut().insert(REQUEST_ID, v);
        }
    }
    if response.extensions().get::<Logged>().is_none() {
        let id = response
            .headers()
            .get(REQUEST_ID)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        let path = crate::error::clip(&path, crate::handlers::answer::MAX_LOG_FIELD_CHARS);
        eprintln!(
            "wgemma serve: {id} {method} {path} {} {:.1} ms",
            status.as_u16(),
            started.elapsed().as_secs_f64() * 1e3
        );
    }
    response
}
