//! The server's error answer: an HTTP status and OpenAI's `error` object, which every
//! refusal (a field, a header, the queue, the loading model) becomes.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

/// An error answer: status, OpenAI's `error` object.
#[derive(Debug, Clone)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    pub kind: &'static str,
    pub param: Option<String>,
    pub code: Option<&'static str>,
    /// Seconds a client should wait before it retries (the `Retry-After` header).
    pub retry_after: Option<u64>,
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
            retry_after: None,
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

    /// 503 with `Retry-After`: `retry_after` seconds, the queue's expected wait.
    pub fn overloaded(message: impl Into<String>, retry_after: u64) -> ApiError {
        ApiError {
            kind: "server_error",
            retry_after: Some(retry_after.max(1)),
            ..ApiError::invalid("", message)
                .with_status(StatusCode::SERVICE_UNAVAILABLE, "overloaded")
        }
    }

    /// 503 while the model loads.
    pub fn unavailable(message: impl Into<String>) -> ApiError {
        ApiError {
            kind: "server_error",
            retry_after: Some(1),
            ..ApiError::invalid("", message).with_status(StatusCode::SERVICE_UNAVAILABLE, "loading")
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
        let mut response = (self.status, axum::Json(self.to_json())).into_response();
        if let Some(s) = self.retry_after {
            response
                .headers_mut()
                .insert(axum::http::header::RETRY_AFTER, s.into());
        }
        response
    }
}

/// Refuses a key of the object `value` outside `allowed` (a nested field the server would
/// otherwise read past), naming it as `at.key`.
pub fn check_keys(value: &Value, allowed: &[&str], at: &str) -> Result<(), ApiError> {
    let unknown = value
        .as_object()
        .and_then(|o| o.keys().find(|k| !allowed.contains(&k.as_str())));
    match unknown {
        Some(key) => Err(ApiError::invalid(
            &format!("{at}.{}", clip(key, 64)),
            format!(
                "{at}.{}: unknown field (expected one of {})",
                clip(key, 64),
                allowed.join(", ")
            ),
        )),
        None => Ok(()),
    }
}

/// `text` cut to `chars` characters (with `...` when cut), for an error message or a log
/// line: a client's field can be megabytes.
pub fn clip(text: &str, chars: usize) -> String {
    match text.char_indices().nth(chars) {
        Some((cut, _)) => format!("{}...", &text[..cut]),
        None => text.to_string(),
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
