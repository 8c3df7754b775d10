//! A request body as JSON: an object, or a 400 naming what is wrong with it; typed fields
//! whose errors name the field.

use crate::error::{kind_of, ApiError};
use serde::Deserialize;
use serde_json::Value;

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
pub fn typed<T: for<'de> Deserialize<'de>>(
    body: &serde_json::Map<String, Value>,
) -> Result<T, ApiError> {
    let value = Value::Object(body.clone());
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let param = path.split(['.', '[']).next().unwrap_or("").to_string();
        ApiError::invalid(&param, format!("{path}: {}", e.inner()))
    })
}
