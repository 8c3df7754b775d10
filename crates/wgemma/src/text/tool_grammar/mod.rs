//! A grammar (llguidance's Lark syntax) of the tool calls a request allows, in Gemma 4's
//! notation ([`super::tools`]), each call's arguments following its function's JSON schema:
//! what a server compiles to force a call (`tool_choice` "required" or a named function) by
//! constrained decoding.
//!
//! The schema subset: `type` (one or a list) object, string, integer, number, boolean,
//! null, array; `properties` with `required` (properties are written in the schema's order,
//! optional ones may be left out); `items`; `enum` and `const`; `anyOf`. Keywords that only
//! describe (`description`, `title`, `default`, `examples`, `$comment`) are read past;
//! `additionalProperties` is taken as false (only declared properties are written). Any
//! other keyword (`pattern`, `minimum`, `$ref`...) is refused by name, since a grammar that
//! ignored it would let through arguments the schema forbids.

use super::tool_markers::{STRING_MARK, TOOL_CALL_END, TOOL_CALL_START};
use super::tools::{format_value, ToolDeclaration};
use crate::error::{Error, Result};
use serde_json::Value;

const OP: &str = "tool grammar";

/// Keywords that change nothing a grammar enforces.
const DESCRIPTIVE: [&str; 6] = [
    "description",
    "title",
    "default",
    "examples",
    "$comment",
    "additionalProperties",
];

/// The grammar of one call of any of `tools` (`parallel`: one or more calls in a row),
/// and nothing else. `path_of(i)` names tool `i` in errors (a server's `tools[i]`).
pub fn tool_call_grammar(
    tools: &[(usize, &ToolDeclaration)],
    parallel: bool,
    path_of: &dyn Fn(usize) -> String,
) -> Result<String> {
    if tools.is_empty() {
        return Err(Error::invalid(OP, "tools", "at least one tool", "none"));
    }
    let mut g = Grammar::default();
    let mut alternatives = Vec::new();
    for &(i, tool) in tools {
        let args = g.value(
            &tool.parameters,
            &format!("{}.function.parameters", path_of(i)),
            0,
        )?;
        let rule = g.fresh();
        g.rules.push(format!(
            "{rule}: {} {args} {}",
            lit(&format!("{TOOL_CALL_START}call:{}", tool.name)),
            lit(TOOL_CALL_END)
        ));
        alternatives.push(rule);
    }
    let start = if parallel { "call+" } else { "call" };
    let mut out = format!("start: {start}\ncall: {}\n", alternatives.join(" | "));
    for rule in &g.rules {
        out.push_str(rule);
        out.push('\n');
    }
    if g.uses_string {
        // One lexeme from mark to mark: the body may hold anything but the closing mark.
        out.push_str(&format!(
            "STRING: {mark} STRING_BODY {mark}\nSTRING_BODY: /(?s:.*)/ & ~/(?s:.*){rx}(?s:.*)/\n",
            mark = lit(STRING_MARK),
            // STRING_MARK, escaped for a regex.
            rx = r#"<\|"\|>"#,
        ));
    }
    Ok(out)
}

/// A Lark string literal (JSON's escapes, which llguidance's Lark reads).
fn lit(s: &str) -> String {
    serde_json::to_string(s).expect("a string serialises")
}

#[derive(Default)]
struct Grammar {
    rules: Vec<String>,
    next: usize,
    uses_string: bool,
}

/// Schemas nest at most this deep.
const MAX_DEPTH: usize = 32;

impl Grammar {
    fn fresh(&mut self) -> String {
        self.next += 1;
        format!("r{}", self.next)
    }

    fn refuse(path: &str, expected: &str, found: impl std::fmt::Display) -> Error {
        Error::invalid(OP, path, expected, found.to_string())
    }

    /// A rule name for values valid under `schema`.
    fn value(&mut self, schema: &Value, path: &str, depth: usize) -> Result<String> {
        if depth > MAX_DEPTH {
            return Err(Self::refuse(
                path,
                &format!("a schema nested at most {MAX_DEPTH} deep"),
                "a deeper one",
            ));
        }
        let map = match schema {
            Value::Bool(true) => return Ok(self.any(path, depth)),
            Value::Object(map) => map,
            other => {
                return Err(Self::refuse(
                    path,
                    "a JSON schema object",
                    crate::text::tokenizer::json_kind(other),
                ))
            }
        };
        for key in map.keys() {
            let known = DESCRIPTIVE.contains(&key.as_str())
                || matches!(
                    key.as_str(),
                    "type" | "properties" | "required" | "items" | "enum" | "const" | "anyOf"
                );
            if !known {
                return Err(Self::refuse(
                    &format!("{path}.{key}"),
                    "only type, properties, required, items, enum, const, anyOf and \
                     descriptive keywords in a forced call's schema",
                    format!("the keyword {key:?}"),
                ));
            }
        }
        let rule = self.fresh();
        let body = if let Some(c) = map.get("const") {
            lit(&format_value(c))
        } else if let Some(e) = map.get("enum") {
            let Some(values) = e.as_array().filter(|v| !v.is_empty()) else {
                return Err(Self::refuse(
                    &format!("{path}.enum"),
                    "a non-empty array",
                    crate::text::tokenizer::json_kind(e),
                ));
            };
            values
                .iter()
                .map(|v| lit(&format_value(v)))
                .collect::<Vec<_>>()
                .join(" | ")
        } else if let Some(any_of) = map.get("anyOf") {
            let Some(options) = any_of.as_array().filter(|v| !v.is_empty()) else {
                return Err(Self::refuse(
                    &format!("{path}.anyOf"),
                    "a non-empty array",
                    crate::text::tokenizer::json_kind(any_of),
                ));
            };
            let mut names = Vec::new();
            for (j, option) in options.iter().enumerate() {
                names.push(self.value(option, &format!("{path}.anyOf[{j}]"), depth + 1)?);
            }
            names.join(" | ")
        } else {
            let types: Vec<&str> = match map.get("type") {
                None => return Ok(self.any(path, depth)),
                Some(Value::String(t)) => vec![t.as_str()],
                Some(Value::Array(ts)) if !ts.is_empty() && ts.iter().all(Value::is_string) => {
                    ts.iter().filter_map(Value::as_str).collect()
                }
                Some(other) => {
                    return Err(Self::refuse(
                        &format!("{path}.type"),
                        "a type name or a list of them",
                        crate::text::tokenizer::json_kind(other),
                    ))
                }
            };
            let mut alternatives = Vec::new();
            for t in types {
                alternatives.push(self.typed(t, map, path, depth)?);
            }
            alternatives.join(" | ")
        };
        self.rules.push(format!("{rule}: {body}"));
        Ok(rule)
    }

    fn typed(
        &mut self,
        kind: &str,
        map: &serde_json::Map<String, Value>,
        path: &str,
        depth: usize,
    ) -> Result<String> {
        Ok(match kind {
            "string" => {
                self.uses_string = true;
                "STRING".into()
            }
            // At most 18 digits: any i64 written without an exponent.
            "integer" => r"/-?(0|[1-9][0-9]{0,17})/".into(),
            "number" => r"/-?(0|[1-9][0-9]{0,17})(\.[0-9]{1,17})?([eE][-+]?[0-9]{1,3})?/".into(),
            "boolean" => r#""true" | "false""#.into(),
            "null" => r#""null""#.into(),
            "array" => {
                let item = match map.get("items") {
                    Some(items) => self.value(items, &format!("{path}.items"), depth + 1)?,
                    None => self.any(path, depth),
                };
                format!(r#""[" ({item} ("," {item})*)? "]""#)
            }
            "object" => self.object(map, path, depth)?,
            other => {
                return Err(Self::refuse(
                    &format!("{path}.type"),
                    "object, string, integer, number, boolean, null or array",
                    format!("{other:?}"),
                ))
            }
        })
    }

    /// `{key:value,...}` with the declared properties in order, the required ones always.
    fn object(
        &mut self,
        map: &serde_json::Map<String, Value>,
        path: &str,
        depth: usize,
    ) -> Result<String> {
        let Some(properties) = map.get("properties") else {
            return Ok(self.any_object(path, depth));
        };
        let Some(properties) = properties.as_object() else {
            return Err(Self::refuse(
                &format!("{path}.properties"),
                "an object",
                crate::text::tokenizer::json_kind(properties),
            ));
        };
        let required: Vec<&str> = match map.get("required") {
            None => Vec::new(),
            Some(Value::Array(r)) if r.iter().all(Value::is_string) => {
                r.iter().filter_map(Value::as_str).collect()
            }
            Some(other) => {
                return Err(Self::refuse(
                    &format!("{path}.required"),
                    "an array of property names",
                    crate::text::tokenizer::json_kind(other),
                ))
            }
        };
        if let Some(missing) = required.iter().find(|r| !properties.contains_key(**r)) {
            return Err(Self::refuse(
                &format!("{path}.required"),
                "names of declared properties",
                format!("{missing:?}, which is not in properties"),
            ));
        }
        let mut members = Vec::new();
        for (key, schema) in properties {
            let value = self.value(schema, &format!("{path}.properties.{key}"), depth + 1)?;
            let mut name = String::new();
            if super::tools::is_bare_key(key) {
                name.push_str(key);
            } else {
                name = format_value(&Value::String(key.clone()));
            }
            members.push((
                format!("{} {value}", lit(&format!("{name}:"))),
                required.contains(&key.as_str()),
            ));
        }
        // first[i]: members i.. with none written yet; after[i]: with one written (so each
        // one written is preceded by a comma). Both empty past the end.
        let n = members.len();
        let first: Vec<String> = (0..=n).map(|_| self.fresh()).collect();
        let after: Vec<String> = (0..=n).map(|_| self.fresh()).collect();
        for (i, (member, required)) in members.iter().enumerate() {
            let (f, a, f1, a1) = (&first[i], &after[i], &first[i + 1], &after[i + 1]);
            if *required {
                self.rules.push(format!("{f}: {member} {a1}"));
                self.rules.push(format!(r#"{a}: "," {member} {a1}"#));
            } else {
                self.rules.push(format!("{f}: {member} {a1} | {f1}"));
                self.rules.push(format!(r#"{a}: "," {member} {a1} | {a1}"#));
            }
        }
        self.rules.push(format!(r#"{}: """#, first[n]));
        self.rules.push(format!(r#"{}: """#, after[n]));
        Ok(format!(r#""{{" {} "}}""#, first[0]))
    }

    /// Any value (a schema without a type).
    fn any(&mut self, _path: &str, _depth: usize) -> String {
        self.uses_string = true;
        if !self.rules.iter().any(|r| r.starts_with("any_value:")) {
            self.rules.push(
                r#"any_value: STRING | /-?(0|[1-9][0-9]{0,17})(\.[0-9]{1,17})?([eE][-+]?[0-9]{1,3})?/ | "true" | "false" | "null" | "[" (any_value ("," any_value)*)? "]" | any_object"#
                    .into(),
            );
            self.rules.push(
                r#"any_object: "{" (any_pair ("," any_pair)*)? "}"
any_pair: /[A-Za-z0-9_.\-]+/ ":" any_value"#
                    .into(),
            );
        }
        "any_value".into()
    }

    fn any_object(&mut self, path: &str, depth: usize) -> String {
        self.any(path, depth);
        "any_object".into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn decl(params: Value) -> ToolDeclaration {
        ToolDeclaration::new("f", None, Some(params)).unwrap()
    }

    fn grammar(params: Value) -> Result<String> {
        let d = decl(params);
        tool_call_grammar(&[(0, &d)], false, &|i| format!("tools[{i}]"))
    }

    #[test]
    fn unsupported_keywords_are_refused_by_path() {
        for (schema, path) in [
            (
                json!({"type": "object", "properties": {"a": {"type": "string", "pattern": "x"}}}),
                "tools[0].function.parameters.properties.a.pattern",
            ),
            (
                json!({"type": "object", "properties": {"a": {"$ref": "#/x"}}}),
                "tools[0].function.parameters.properties.a.$ref",
            ),
            (
                json!({"type": "object", "properties": {"a": {"type": "date"}}}),
                "tools[0].function.parameters.properties.a.type",
            ),
            (
                json!({"type": "object", "properties": {}, "required": ["b"]}),
                "tools[0].function.parameters.required",
            ),
            (
                json!({"type": "object", "properties": {"a": {"enum": []}}}),
                "tools[0].function.parameters.properties.a.enum",
            ),
        ] {
            let e = grammar(schema).unwrap_err().to_string();
            assert!(e.contains(path), "{path}: {e}");
        }
        let ok = grammar(json!({"type": "object", "properties": {
            "a": {"type": "string", "description": "d"}, "b": {"enum": ["x", 2]},
            "c": {"type": ["integer", "null"]}, "d": {"type": "array", "items": {"type": "number"}},
            "e": {"anyOf": [{"type": "boolean"}, {"const": "k"}]}, "f": {}},
            "required": ["a"]}))
        .unwrap();
        assert!(ok.contains("STRING_BODY"), "{ok}");
    }
}
