//! CORS for the origins the guard lets through ([`super::admission`]): a page of this
//! server's own origin, or one of `--cors-origins`, gets `Access-Control-Allow-Origin` on
//! its answers and an answered preflight; a refused origin gets neither.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

/// Whether `origin` is this server's own (`http://` and the request's `Host`, port
/// included): a page it served itself.
pub fn same_origin(origin: &str, host: &str) -> bool {
    origin
        .strip_prefix("http://")
        .is_some_and(|authority| authority.eq_ignore_ascii_case(host.trim()))
}

pub fn preflight() -> Response {
    (
        StatusCode::NO_CONTENT,
        [
            (header::ACCESS_CONTROL_ALLOW_METHODS, "GET, POST, OPTIONS"),
            (
                header::ACCESS_CONTROL_ALLOW_HEADERS,
                "authorization, content-type",
            ),
            (header::ACCESS_CONTROL_MAX_AGE, "600"),
        ],
    )
        .into_response()
}

/// CORS headers for an origin the guard let through (a refused one never gets here with
/// a response a page can read: it gets no `Access-Control-Allow-Origin`).
pub fn with_cors(mut response: Response, origin: Option<HeaderValue>) -> Response {
    if let Some(origin) = origin {
        if response.status() != StatusCode::FORBIDDEN {
            let h = response.headers_mut();
            h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
            h.insert(header::VARY, HeaderValue::from_static("Origin"));
        }
    }
    response
}
