//! A call's body read back from Gemma's notation (model output: untrusted, so nesting is
//! bounded and every malformed piece is an error naming it).

use super::{is_bare_key, ToolCall, MAX_DEPTH, OP};
use crate::error::{Error, Result};
use crate::text::tool_markers::STRING_MARK;
use serde_json::{Map, Value};

/// A call's body (between its markers): `call:NAME{arguments}`.
pub fn parse_call(body: &str) -> Result<ToolCall> {
    let bad = |why: String| Error::invalid(OP, "tool call", "call:NAME{key:value,...}", why);
    let rest = body
        .trim()
        .strip_prefix("call:")
        .ok_or_else(|| bad("no `call:` at its start".into()))?;
    let open = rest
        .find('{')
        .ok_or_else(|| bad("no `{` after the name".into()))?;
    let name = rest[..open].trim();
    if !is_bare_key(name) {
        return Err(bad(format!("the name {name:?}")));
    }
    let mut cursor = Cursor {
        s: &rest[open..],
        pos: 0,
    };
    let arguments = match cursor.value(0).map_err(bad)? {
        Value::Object(map) => map,
        _ => unreachable!("a value starting with '{{' is an object"),
    };
    cursor.skip_ws();
    if cursor.pos != cursor.s.len() {
        return Err(bad(format!(
            "text after the arguments: {:?}",
            &cursor.s[cursor.pos..]
        )));
    }
    Ok(ToolCall {
        id: None,
        name: name.to_string(),
        arguments,
    })
}

/// A reader of Gemma's value notation (also taking JSON's quoted strings, which models
/// sometimes write).
struct Cursor<'a> {
    s: &'a str,
    pos: usize,
}

impl Cursor<'_> {
    fn rest(&self) -> &str {
        &self.s[self.pos..]
    }

    fn skip_ws(&mut self) {
        let trimmed = self.rest().trim_start();
        self.pos = self.s.len() - trimmed.len();
    }

    fn eat(&mut self, token: &str) -> bool {
        self.skip_ws();
        if self.rest().starts_with(token) {
            self.pos += token.len();
            true
        } else {
            false
        }
    }

    fn here(&self) -> String {
        let rest: String = self.rest().chars().take(20).collect();
        if rest.is_empty() {
            "the end".into()
        } else {
            format!("{rest:?}")
        }
    }

    fn value(&mut self, depth: usize) -> std::result::Result<Value, String> {
        if depth > MAX_DEPTH {
            return Err(format!("values nested deeper than {MAX_DEPTH}"));
        }
        self.skip_ws();
        if self.eat("{") {
            let mut map = Map::new();
            if self.eat("}") {
                return Ok(Value::Object(map));
            }
            loop {
                let key = self.key()?;
                if !self.eat(":") {
                    return Err(format!(
                        "expected ':' after key {key:?}, found {}",
                        self.here()
                    ));
                }
                let v = self.value(depth + 1)?;
                map.insert(key, v);
                if self.eat(",") {
                    continue;
                }
                if self.eat("}") {
                    return Ok(Value::Object(map));
                }
                return Err(format!("expected ',' or '}}', found {}", self.here()));
            }
        }
        if self.eat("[") {
            let mut items = Vec::new();
            if self.eat("]") {
                return Ok(Value::Array(items));
            }
            loop {
                items.push(self.value(depth + 1)?);
                if self.eat(",") {
                    continue;
                }
                if self.eat("]") {
                    return Ok(Value::Array(items));
                }
                return Err(format!("expected ',' or ']', found {}", self.here()));
            }
        }
        if let Some(s) = self.string()? {
            return Ok(Value::String(s));
        }
        for (word, v) in [
            ("true", Value::Bool(true)),
            ("false", Value::Bool(false)),
            ("null", Value::Null),
        ] {
            if self.rest().starts_with(word) {
                self.pos += word.len();
                return Ok(v);
            }
        }
        let len = self
            .rest()
            .find(|c: char| !matches!(c, '0'..='9' | '-' | '+' | '.' | 'e' | 'E'))
            .unwrap_or(self.rest().len());
        let number = &self.rest()[..len];
        match serde_json::from_str::<serde_json::Number>(number) {
            Ok(n) if len > 0 => {
                self.pos += len;
                Ok(Value::Number(n))
            }
            _ => Err(format!("expected a value, found {}", self.here())),
        }
    }

    /// A `<|"|>`-marked or JSON-quoted string, if one starts here.
    fn string(&mut self) -> std::result::Result<Option<String>, String> {
        self.skip_ws();
        if let Some(after) = self.rest().strip_prefix(STRING_MARK) {
            let end = after
                .find(STRING_MARK)
                .ok_or_else(|| "a string without its closing <|\"|>".to_string())?;
            let s = after[..end].to_string();
            self.pos += STRING_MARK.len() + end + STRING_MARK.len();
            return Ok(Some(s));
        }
        if self.rest().starts_with('"') {
            let mut de = serde_json::Deserializer::from_str(self.rest()).into_iter::<String>();
            return match de.next() {
                Some(Ok(s)) => {
                    self.pos += de.byte_offset();
                    Ok(Some(s))
                }
                _ => Err(format!("a malformed quoted string at {}", self.here())),
            };
        }
        Ok(None)
    }

    fn key(&mut self) -> std::result::Result<String, String> {
        if let Some(s) = self.string()? {
            return Ok(s);
        }
        let len = self
            .rest()
            .find(|c: char| matches!(c, ':' | ',' | '{' | '}' | '[' | ']') || c.is_whitespace())
            .unwrap_or(self.rest().len());
        let key = self.rest()[..len].to_string();
        if key.is_empty() || key.contains('<') {
            return Err(format!("expected a key, found {}", self.here()));
        }
        self.pos += len;
        Ok(key)
    }
}
