//! Schema keywords to grammar rules: the dispatch over a schema's keywords, references,
//! objects, arrays and numbers (strings are [`super::strings`]).

use super::{Grammar, MAX_DEPTH};
use crate::error::Result;
use crate::text::tokenizer::json_kind;
use crate::text::tools::{format_value, is_bare_key};
use serde_json::{json, Map, Value};

/// Any JSON number without an exponent's excess: at most 18 digits before the point.
pub(super) const NUMBER: &str = r"/-?(0|[1-9][0-9]{0,17})(\.[0-9]{1,17})?([eE][-+]?[0-9]{1,3})?/";
/// Any i64 written without an exponent (at most 18 digits).
const INTEGER: &str = r"/-?(0|[1-9][0-9]{0,17})/";
/// A key written bare (letters, digits, `_`, `-`, `.`), as the notation writes one.
pub(super) const BARE_KEY: &str = r"/[A-Za-z0-9_.\-]+/";
/// The bound given to an integer without one, so that a small model cannot write digits
/// until its budget ends.
const INTEGER_LIMIT: i64 = 999_999_999_999_999_999;

/// The keywords of a number's range, given to llguidance as they are.
const NUMBER_BOUNDS: [&str; 5] = [
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
];

/// Keywords that change nothing a grammar enforces.
const DESCRIPTIVE: &[&str] = &[
    "description",
    "title",
    "default",
    "examples",
    "$comment",
    "$schema",
    "$id",
    "$defs",
    "definitions",
    "additionalProperties",
    "discriminator",
    "deprecated",
    "readOnly",
    "writeOnly",
];

/// Keywords the grammar enforces.
const ENFORCED: &[&str] = &[
    "type",
    "properties",
    "required",
    "items",
    "prefixItems",
    "minItems",
    "maxItems",
    "enum",
    "const",
    "anyOf",
    "oneOf",
    "allOf",
    "$ref",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "minLength",
    "maxLength",
    "pattern",
    "format",
];

fn is_descriptive(key: &str) -> bool {
    DESCRIPTIVE.contains(&key) || key.starts_with("x-")
}

impl Grammar {
    /// A rule name for values valid under `schema`.
    pub(super) fn value(&mut self, schema: &Value, path: &str, depth: usize) -> Result<String> {
        if depth > MAX_DEPTH {
            return Err(Self::refuse(
                path,
                &format!("a schema nested at most {MAX_DEPTH} deep"),
                "a deeper one",
            ));
        }
        let map = match schema {
            Value::Bool(true) => return Ok(self.any()),
            Value::Object(map) => map,
            other => return Err(Self::refuse(path, "a JSON schema object", json_kind(other))),
        };
        if let Some(key) = map
            .keys()
            .find(|k| !is_descriptive(k) && !ENFORCED.contains(&k.as_str()))
        {
            return Err(Self::refuse(
                &format!("{path}.{key}"),
                "keywords a grammar can enforce in a call's schema (type, properties, \
                 required, items, prefixItems, min/maxItems, enum, const, anyOf, oneOf, \
                 allOf, $ref, numeric bounds, min/maxLength, pattern, format) and \
                 descriptive ones",
                format!("the keyword {key:?}"),
            ));
        }
        if let Some(r) = map.get("$ref") {
            self.only_beside(map, "$ref", path)?;
            return self.reference(r, &format!("{path}.$ref"));
        }
        if let Some(all) = map.get("allOf") {
            self.only_beside(map, "allOf", path)?;
            return match all.as_array().map(Vec::as_slice) {
                Some([one]) => self.value(one, &format!("{path}.allOf[0]"), depth + 1),
                _ => Err(Self::refuse(
                    &format!("{path}.allOf"),
                    "an allOf of one schema",
                    format!("{} of them", all.as_array().map_or(0, Vec::len)),
                )),
            };
        }
        let body = self.body(map, path, depth)?;
        let rule = self.fresh();
        self.rules.push(format!("{rule}: {body}"));
        Ok(rule)
    }

    /// `keyword` takes the whole schema: anything beside it but descriptions is refused.
    fn only_beside(&self, map: &Map<String, Value>, keyword: &str, path: &str) -> Result<()> {
        match map.keys().find(|k| *k != keyword && !is_descriptive(k)) {
            Some(other) => Err(Self::refuse(
                &format!("{path}.{other}"),
                &format!("only descriptive keywords beside {keyword}"),
                format!("the keyword {other:?}"),
            )),
            None => Ok(()),
        }
    }

    /// The alternatives of one schema object (no `$ref`, no `allOf`).
    fn body(&mut self, map: &Map<String, Value>, path: &str, depth: usize) -> Result<String> {
        if let Some(c) = map.get("const") {
            return Ok(self.notation(&format_value(c)));
        }
        if let Some(e) = map.get("enum") {
            let Some(values) = e.as_array().filter(|v| !v.is_empty()) else {
                return Err(Self::refuse(
                    &format!("{path}.enum"),
                    "a non-empty array",
                    json_kind(e),
                ));
            };
            let literals: Vec<String> = values
                .iter()
                .map(|v| self.notation(&format_value(v)))
                .collect();
            return Ok(literals.join(" | "));
        }
        for keyword in ["anyOf", "oneOf"] {
            if let Some(options) = map.get(keyword) {
                return self.alternatives(options, &format!("{path}.{keyword}"), depth);
            }
        }
        let types: Vec<&str> = match map.get("type") {
            None => return Ok(self.any()),
            Some(Value::String(t)) => vec![t.as_str()],
            Some(Value::Array(ts)) if !ts.is_empty() && ts.iter().all(Value::is_string) => {
                ts.iter().filter_map(Value::as_str).collect()
            }
            Some(other) => {
                return Err(Self::refuse(
                    &format!("{path}.type"),
                    "a type name or a list of them",
                    json_kind(other),
                ))
            }
        };
        let mut alternatives = Vec::new();
        for t in types {
            alternatives.push(self.typed(t, map, path, depth)?);
        }
        Ok(alternatives.join(" | "))
    }

    fn alternatives(&mut self, options: &Value, path: &str, depth: usize) -> Result<String> {
        let Some(options) = options.as_array().filter(|v| !v.is_empty()) else {
            return Err(Self::refuse(path, "a non-empty array", json_kind(options)));
        };
        let mut names = Vec::new();
        for (j, option) in options.iter().enumerate() {
            names.push(self.value(option, &format!("{path}[{j}]"), depth + 1)?);
        }
        Ok(names.join(" | "))
    }

    /// The rule of a local reference (`#`, `#/$defs/Name`, any JSON pointer into the
    /// root), written once per pointer: a reference inside its own target is recursion,
    /// which a grammar rule may have.
    fn reference(&mut self, r: &Value, path: &str) -> Result<String> {
        let Some(pointer) = r.as_str().and_then(|r| r.strip_prefix('#')) else {
            return Err(Self::refuse(
                path,
                "a local reference (\"#\" or \"#/$defs/Name\")",
                format_value(r),
            ));
        };
        if let Some(rule) = self.refs.get(pointer) {
            return Ok(rule.clone());
        }
        let Some(target) = self.root.pointer(pointer).cloned() else {
            return Err(Self::refuse(
                path,
                "a reference to a definition in the schema",
                format!("{pointer:?}, which is not there"),
            ));
        };
        let rule = self.fresh();
        self.refs.insert(pointer.to_string(), rule.clone());
        let inner = self.value(&target, &format!("{path}({pointer})"), 0)?;
        self.rules.push(format!("{rule}: {inner}"));
        Ok(rule)
    }

    fn typed(
        &mut self,
        kind: &str,
        map: &Map<String, Value>,
        path: &str,
        depth: usize,
    ) -> Result<String> {
        Ok(match kind {
            "string" => self.string(map, path)?,
            "integer" | "number" => self.number(kind, map),
            "boolean" => r#""true" | "false""#.into(),
            "null" => r#""null""#.into(),
            "array" => self.array(map, path, depth)?,
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

    /// A number: bounded ones by llguidance's JSON compiler (`%json`), whose numbers are
    /// the notation's; an integer bounded on one side gets [`INTEGER_LIMIT`] on the other.
    fn number(&mut self, kind: &str, map: &Map<String, Value>) -> String {
        let bounds: Vec<&str> = NUMBER_BOUNDS
            .iter()
            .copied()
            .filter(|b| map.contains_key(*b))
            .collect();
        if bounds.is_empty() {
            return if kind == "integer" { INTEGER } else { NUMBER }.into();
        }
        let mut schema = json!({"type": kind});
        for b in &bounds {
            schema[*b] = map[*b].clone();
        }
        if kind == "integer" {
            let has = |a: &str, b: &str| bounds.contains(&a) || bounds.contains(&b);
            if !has("minimum", "exclusiveMinimum") {
                schema["minimum"] = json!(-INTEGER_LIMIT);
            }
            if !has("maximum", "exclusiveMaximum") {
                schema["maximum"] = json!(INTEGER_LIMIT);
            }
        }
        let rule = self.fresh();
        self.rules.push(format!("{rule}: %json {schema}"));
        rule
    }

    fn array(&mut self, map: &Map<String, Value>, path: &str, depth: usize) -> Result<String> {
        let count = |key: &str| -> Result<Option<usize>> {
            match map.get(key) {
                None => Ok(None),
                Some(v) => v.as_u64().map(|n| Some(n as usize)).ok_or_else(|| {
                    Self::refuse(
                        &format!("{path}.{key}"),
                        "a non-negative integer",
                        format_value(v),
                    )
                }),
            }
        };
        let (min, max) = (count("minItems")?.unwrap_or(0), count("maxItems")?);
        if max.is_some_and(|max| max < min) {
            return Err(Self::refuse(
                &format!("{path}.maxItems"),
                "maxItems at least minItems",
                format!("{max:?} below {min}"),
            ));
        }
        if let Some(prefix) = map.get("prefixItems") {
            return self.tuple(prefix, map, (min, max), path, depth);
        }
        let item = match map.get("items") {
            Some(items) => self.value(items, &format!("{path}.items"), depth + 1)?,
            None => self.any(),
        };
        // The items after the first: at least `lo`, at most `hi` (llguidance takes no
        // repetition of at most 0).
        let more = |lo: usize, hi: Option<usize>| match hi {
            Some(0) => String::new(),
            Some(hi) if hi == lo => format!(r#"("," {item}){{{lo}}}"#),
            Some(hi) => format!(r#"("," {item}){{{lo},{hi}}}"#),
            None => format!(r#"("," {item}){{{lo},}}"#),
        };
        Ok(match (min, max) {
            (_, Some(0)) => r#""[" "]""#.into(),
            (0, max) => format!(r#""[" ({item} {})? "]""#, more(0, max.map(|m| m - 1))),
            (min, max) => format!(r#""[" {item} {} "]""#, more(min - 1, max.map(|m| m - 1))),
        })
    }

    /// `prefixItems` as a tuple of exactly those items (Pydantic's tuples).
    fn tuple(
        &mut self,
        prefix: &Value,
        map: &Map<String, Value>,
        (min, max): (usize, Option<usize>),
        path: &str,
        depth: usize,
    ) -> Result<String> {
        let Some(items) = prefix.as_array() else {
            return Err(Self::refuse(
                &format!("{path}.prefixItems"),
                "an array of schemas",
                json_kind(prefix),
            ));
        };
        let n = items.len();
        let closed = matches!(map.get("items"), None | Some(Value::Bool(false)))
            && (min == n || map.get("items") == Some(&Value::Bool(false)))
            && max.is_none_or(|m| m == n);
        if !closed {
            return Err(Self::refuse(
                &format!("{path}.prefixItems"),
                "a tuple of exactly its items (items false or absent, min/maxItems its length)",
                "more or fewer items allowed",
            ));
        }
        let mut parts = Vec::new();
        for (j, item) in items.iter().enumerate() {
            parts.push(self.value(item, &format!("{path}.prefixItems[{j}]"), depth + 1)?);
        }
        Ok(format!(r#""[" {} "]""#, parts.join(r#" "," "#)))
    }

    /// `{key:value,...}` with the declared properties in order, the required ones always;
    /// without properties, a map of any keys to `additionalProperties`' schema.
    fn object(&mut self, map: &Map<String, Value>, path: &str, depth: usize) -> Result<String> {
        let Some(properties) = map.get("properties") else {
            return self.map_of(map.get("additionalProperties"), path, depth);
        };
        let Some(properties) = properties.as_object() else {
            return Err(Self::refuse(
                &format!("{path}.properties"),
                "an object",
                json_kind(properties),
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
                    json_kind(other),
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
            members.push((
                format!("{} {value}", self.notation(&format!("{}:", key_text(key)))),
                required.contains(&key.as_str()),
            ));
        }
        Ok(self.members_in_order(&members))
    }

    /// Rules writing `members` in order, each optional one maybe left out, with commas
    /// between those written; the object's body.
    fn members_in_order(&mut self, members: &[(String, bool)]) -> String {
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
        format!(r#""{{" {} "}}""#, first[0])
    }

    /// An object of any keys whose values follow `values` (absent or `true`: any value).
    fn map_of(&mut self, values: Option<&Value>, path: &str, depth: usize) -> Result<String> {
        let value = match values {
            None | Some(Value::Bool(true)) => {
                self.any();
                return Ok("any_object".into());
            }
            Some(Value::Bool(false)) => return Ok(r#""{" "}""#.into()),
            Some(schema) => {
                self.value(schema, &format!("{path}.additionalProperties"), depth + 1)?
            }
        };
        let string = self.any_string();
        let pair = self.fresh();
        self.rules
            .push(format!(r#"{pair}: ({BARE_KEY} | {string}) ":" {value}"#));
        Ok(format!(r#""{{" ({pair} ("," {pair})*)? "}}""#))
    }
}

/// A property's key as the notation writes it: bare, or as a string.
fn key_text(key: &str) -> String {
    if is_bare_key(key) {
        key.to_string()
    } else {
        format_value(&Value::String(key.to_string()))
    }
}
