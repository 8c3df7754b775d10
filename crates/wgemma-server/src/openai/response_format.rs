//! `response_format` of a chat request, checked field by field: `text`, `json_object`, or
//! `json_schema` with its name, description, strict flag and a schema the grammar engine can
//! enforce ([`super::schema`]); compiled into token masks by [`super::structured`].

use super::schema::check_schema;
use crate::error::{clip, kind_of, ApiError};
use serde_json::{json, Value};

/// What `response_format` asks for, checked.
#[derive(Debug, Clone, PartialEq)]
pub enum ResponseFormat {
    /// Any JSON object.
    JsonObject,
    /// A JSON value valid under the schema.
    JsonSchema(Value),
}

impl ResponseFormat {
    /// `response_format` of a chat request: None for text (or absent).
    pub fn parse(value: Option<&Value>) -> Result<Option<ResponseFormat>, ApiError> {
        let Some(v) = value.filter(|v| !v.is_null()) else {
            return Ok(None);
        };
        let kind = v.get("type").and_then(Value::as_str);
        let unknown = |allowed: &[&str]| {
            v.as_object().and_then(|o| {
                o.keys().find(|k| !allowed.contains(&k.as_str())).map(|k| {
                    ApiError::invalid(
                        "response_format",
                        format!("response_format.{k}: unknown field (expected {allowed:?})"),
                    )
                })
            })
        };
        match kind {
            Some("text") => unknown(&["type"]).map_or(Ok(None), Err),
            Some("json_object") => {
                unknown(&["type"]).map_or(Ok(Some(ResponseFormat::JsonObject)), Err)
            }
            Some("json_schema") => {
                if let Some(e) = unknown(&["type", "json_schema"]) {
                    return Err(e);
                }
                let spec = v.get("json_schema").ok_or_else(|| {
                    ApiError::field(
                        "response_format",
                        "response_format.json_schema (an object with name and schema)",
                        "none",
                    )
                })?;
                let Some(spec) = spec.as_object() else {
                    return Err(ApiError::field(
                        "response_format",
                        "response_format.json_schema to be an object",
                        kind_of(spec),
                    ));
                };
                if let Some(k) = spec
                    .keys()
                    .find(|k| !matches!(k.as_str(), "name" | "description" | "schema" | "strict"))
                {
                    return Err(ApiError::invalid(
                        "response_format",
                        format!(
                            "response_format.json_schema.{k}: unknown field (expected name, \
                             description, schema, strict)"
                        ),
                    ));
                }
                check_schema_fields(spec)?;
                match spec.get("schema") {
                    Some(schema @ Value::Object(_)) => {
                        check_schema(
                            schema,
                            "response_format",
                            "response_format.json_schema.schema",
                        )?;
                        Ok(Some(ResponseFormat::JsonSchema(schema.clone())))
                    }
                    // OpenAI's default: any JSON.
                    None => Ok(Some(ResponseFormat::JsonSchema(json!({})))),
                    Some(other) => Err(ApiError::field(
                        "response_format",
                        "response_format.json_schema.schema to be a JSON schema object",
                        kind_of(other),
                    )),
                }
            }
            other => Err(ApiError::field(
                "response_format",
                "type \"text\", \"json_object\" or \"json_schema\"",
                other.map_or_else(|| kind_of(v), |t| format!("{t:?}")),
            )),
        }
    }

    /// The format as a rule of a Lark grammar (llguidance's `%json`), for a reply that may
    /// be tool calls or this answer.
    pub fn lark_rule(&self) -> String {
        format!("%json {}", self.schema())
    }

    /// The schema the grammar is compiled from, with the compact JSON options.
    pub(crate) fn schema(&self) -> Value {
        let mut schema = match self {
            ResponseFormat::JsonObject => json!({"type": "object"}),
            ResponseFormat::JsonSchema(s) => s.clone(),
        };
        if let Value::Object(o) = &mut schema {
            o.insert(
                "x-guidance".into(),
                json!({"whitespace_flexible": false, "item_separator": ", ", "key_separator": ": "}),
            );
        }
        schema
    }
}

/// `json_schema`'s `name` (OpenAI's: letters, digits, `_` and `-`, at most 64),
/// `description` (a string) and `strict` (a boolean; the grammar is strict either way).
fn check_schema_fields(spec: &serde_json::Map<String, Value>) -> Result<(), ApiError> {
    let at = |key: &str| format!("response_format.json_schema.{key}");
    match spec.get("name") {
        Some(Value::String(n))
            if (1..=64).contains(&n.len())
                && n.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-') => {}
        Some(Value::String(n)) => {
            return Err(ApiError::field(
                &at("name"),
                "1 to 64 letters, digits, _ or -",
                format!("{:?}", clip(n, 64)),
            ))
        }
        Some(other) => return Err(ApiError::field(&at("name"), "a string", kind_of(other))),
        None => {}
    }
    if let Some(d) = spec.get("description").filter(|d| !d.is_string()) {
        return Err(ApiError::field(&at("description"), "a string", kind_of(d)));
    }
    if let Some(b) = spec
        .get("strict")
        .filter(|b| !b.is_boolean() && !b.is_null())
    {
        return Err(ApiError::field(&at("strict"), "true or false", kind_of(b)));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn response_formats_parse_or_name_what_is_wrong() {
        let p = |s: &str| ResponseFormat::parse(Some(&serde_json::from_str(s).unwrap()));
        assert_eq!(p(r#"{"type": "text"}"#).unwrap(), None);
        assert_eq!(
            p(r#"{"type": "json_object"}"#).unwrap(),
            Some(ResponseFormat::JsonObject)
        );
        assert_eq!(
            p(
                r#"{"type": "json_schema", "json_schema": {"name": "a", "strict": true,
                 "schema": {"type": "integer"}}}"#
            )
            .unwrap(),
            Some(ResponseFormat::JsonSchema(json!({"type": "integer"})))
        );
        for (bad, needle) in [
            (r#"{"type": "xml"}"#, "\"xml\""),
            (r#"{"type": "json_schema"}"#, "json_schema"),
            (
                r#"{"type": "json_schema", "json_schema": {"schema": 3}}"#,
                "number",
            ),
            (
                r#"{"type": "json_schema", "json_schema": {"nme": "a"}}"#,
                "nme",
            ),
            (r#"{"type": "json_object", "schema": {}}"#, "schema"),
        ] {
            let e = p(bad).unwrap_err();
            assert_eq!(e.param.as_deref(), Some("response_format"), "{bad}");
            assert!(e.message.contains(needle), "{bad}: {}", e.message);
        }
    }
}
