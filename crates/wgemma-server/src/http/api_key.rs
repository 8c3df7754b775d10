//! The API key (`--api-key`): what a server may be given, and the `Authorization: Bearer
//! KEY` check of every request but `/health` and the chat page, compared in constant time.

use crate::error::ApiError;
use anyhow::{bail, Result};
use axum::http::{header, HeaderMap};

/// The API key a server can be given: what a client can send in `Authorization: Bearer
/// KEY` and have compared byte for byte (visible ASCII: header values are trimmed and
/// carry no other text reliably).
pub fn check_api_key(key: &str) -> Result<()> {
    if key.is_empty() {
        bail!("--api-key: expected a non-empty key, found an empty string");
    }
    if let Some(c) = key.chars().find(|c| !c.is_ascii_graphic()) {
        bail!(
            "--api-key: expected visible ASCII characters only (a key a client can send in a \
             header), found {c:?}"
        );
    }
    Ok(())
}

/// Refuses a request without the right bearer key (when the server has one).
pub fn authorize(key: Option<&str>, headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(key) = key else {
        return Ok(());
    };
    match headers
        .get(header::AUTHORIZATION)
        .map(|v| v.to_str().unwrap_or(""))
    {
        None => Err(ApiError::unauthorized(
            "missing API key: expected the header `Authorization: Bearer <key>`, found none",
        )),
        Some(v) => match v.strip_prefix("Bearer ") {
            Some(given) if constant_time_eq(given.trim().as_bytes(), key.as_bytes()) => Ok(()),
            Some(_) => Err(ApiError::unauthorized("incorrect API key provided")),
            None => Err(ApiError::unauthorized(
                "Authorization header: expected `Bearer <key>`, found another scheme",
            )),
        },
    }
}

/// Compares without an early exit, so the time taken does not tell how much of a guess
/// was right.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
