//! Checks on a `response_format` JSON schema before its grammar is compiled: its size, and
//! that some finite JSON value satisfies it. A schema that only a value of infinite depth
//! could satisfy (`{"properties": {"next": {"$ref": "#"}}, "required": ["next"]}`), or
//! none at all (`{"$ref": "#"}`, `{"enum": []}`), compiles to a grammar that cannot end: its
//! answer would run until the grammar engine gives up mid-answer. Such schemas are the
//! request's error, named by field, before any work.
//!
//! Satisfiability is decided on the keywords that build structure (`$ref` to a local
//! pointer, `allOf`, `anyOf`, `oneOf`, `type`, `enum`, `const`, `properties`, `required`,
//! `additionalProperties`, `items`, `prefixItems`, `minItems`) as the least fixed point over
//! the schema's `$ref` targets: a target is satisfiable once a finite value is known for
//! it, so a cycle with no way out never becomes satisfiable. Value constraints (`minimum`,
//! `pattern`, ...) are left to the grammar engine, which refuses what it cannot compile.

use crate::error::ApiError;
use serde_json::Value;
use std::collections::HashMap;

/// Nesting depth a schema may have (objects and arrays of it).
pub const MAX_SCHEMA_DEPTH: usize = 32;
/// JSON values (objects, arrays, scalars) a schema may hold.
pub const MAX_SCHEMA_NODES: usize = 10_000;

/// Refuses a schema past the size limits or one no finite value satisfies. `param` names
/// the request's field, `at` the schema's place in the body.
pub fn check_schema(schema: &Value, param: &str, at: &str) -> Result<(), ApiError> {
    let (depth, nodes) = size_of(schema, 1);
    if depth > MAX_SCHEMA_DEPTH || nodes > MAX_SCHEMA_NODES {
        return Err(ApiError::invalid(
            param,
            format!(
                "{at}: expected a schema of at most {MAX_SCHEMA_DEPTH} levels and \
                 {MAX_SCHEMA_NODES} values, found {depth} levels and {nodes} values"
            ),
        ));
    }
    if !Satisfiable::solve(schema) {
        return Err(ApiError::invalid(
            param,
            format!(
                "{at}: expected a schema some finite JSON value satisfies, found one that \
                 none does (a $ref cycle with no way out, a required property nothing \
                 satisfies, or an empty enum)"
            ),
        ));
    }
    Ok(())
}

/// (Depth, values) of `v`, stopping early once past the limits.
fn size_of(v: &Value, depth: usize) -> (usize, usize) {
    if depth > MAX_SCHEMA_DEPTH {
        return (depth, 1);
    }
    let children: Box<dyn Iterator<Item = &Value>> = match v {
        Value::Object(o) => Box::new(o.values()),
        Value::Array(a) => Box::new(a.iter()),
        _ => return (depth, 1),
    };
    let (mut deepest, mut nodes) = (depth, 1);
    for child in children {
        let (d, n) = size_of(child, depth + 1);
        deepest = deepest.max(d);
        nodes += n;
        if deepest > MAX_SCHEMA_DEPTH || nodes > MAX_SCHEMA_NODES {
            break;
        }
    }
    (deepest, nodes)
}

/// The least fixed point of "has a finite value" over a schema's local `$ref` targets.
struct Satisfiable<'a> {
    root: &'a Value,
    /// Targets known to be satisfiable so far (by their `$ref` string).
    known: HashMap<&'a str, bool>,
}

impl<'a> Satisfiable<'a> {
    fn solve(root: &'a Value) -> bool {
        let mut s = Satisfiable {
            root,
            known: HashMap::new(),
        };
        let mut refs = Vec::new();
        collect_refs(root, &mut refs);
        refs.sort_unstable();
        refs.dedup();
        // Each round settles at least one more target or changes nothing.
        for _ in 0..=refs.len() {
            let mut changed = false;
            for &r in &refs {
                let now = s.resolve(r).is_none_or(|target| s.value(target));
                if now && !s.known.get(r).copied().unwrap_or(false) {
                    s.known.insert(r, true);
                    changed = true;
                }
            }
            if !changed {
                break;
            }
        }
        s.value(root)
    }

    /// The schema a local `$ref` (`#`, `#/$defs/a`) points at; None for any other
    /// reference (left to the grammar engine).
    fn resolve(&self, reference: &str) -> Option<&'a Value> {
        let pointer = reference.strip_prefix('#')?;
        if pointer.is_empty() {
            return Some(self.root);
        }
        self.root.pointer(pointer)
    }

    /// Whether `schema` has a finite value, with `$ref` targets as known so far.
    fn value(&self, schema: &'a Value) -> bool {
        let o = match schema {
            Value::Bool(b) => return *b,
            Value::Object(o) => o,
            // Not a schema: the grammar engine names it.
            _ => return true,
        };
        if let Some(Value::String(r)) = o.get("$ref") {
            let known = self.known.get(r.as_str()).copied();
            if self.resolve(r).is_some() && !known.unwrap_or(false) {
                return false;
            }
        }
        let list = |key: &str| o.get(key).and_then(Value::as_array);
        if list("allOf").is_some_and(|all| !all.iter().all(|s| self.value(s))) {
            return false;
        }
        for key in ["anyOf", "oneOf"] {
            if list(key).is_some_and(|any| !any.iter().any(|s| self.value(s))) {
                return false;
            }
        }
        if o.contains_key("const") {
            return true;
        }
        if let Some(values) = list("enum") {
            return !values.is_empty();
        }
        let types: Vec<&str> = match o.get("type") {
            Some(Value::String(t)) => vec![t.as_str()],
            Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
            // Any type: a scalar satisfies what only constrains objects and arrays.
            _ => return true,
        };
        types.iter().any(|t| match *t {
            "object" => self.object_value(o),
            "array" => self.array_value(o),
            _ => true,
        })
    }

    /// An object of the required properties, each with a finite value.
    fn object_value(&self, o: &'a serde_json::Map<String, Value>) -> bool {
        let properties = o.get("properties").and_then(Value::as_object);
        let closed = o.get("additionalProperties") == Some(&Value::Bool(false));
        let Some(required) = o.get("required").and_then(Value::as_array) else {
            return true;
        };
        required.iter().filter_map(Value::as_str).all(|name| {
            match properties.and_then(|p| p.get(name)) {
                Some(s) => self.value(s),
                None => !closed,
            }
        })
    }

    /// An array of `minItems` items, each with a finite value.
    fn array_value(&self, o: &'a serde_json::Map<String, Value>) -> bool {
        let min = o.get("minItems").and_then(Value::as_u64).unwrap_or(0) as usize;
        let prefix = o.get("prefixItems").and_then(Value::as_array);
        let prefix_len = prefix.map_or(0, Vec::len);
        if prefix.is_some_and(|p| !p.iter().take(min).all(|s| self.value(s))) {
            return false;
        }
        if min <= prefix_len {
            return true;
        }
        o.get("items").is_none_or(|items| self.value(items))
    }
}

fn collect_refs<'a>(v: &'a Value, out: &mut Vec<&'a str>) {
    match v {
        Value::Object(o) => {
            if let Some(Value::String(r)) = o.get("$ref") {
                out.push(r);
            }
            o.values().for_each(|c| collect_refs(c, out));
        }
        Value::Array(a) => a.iter().for_each(|c| collect_refs(c, out)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn check(schema: Value) -> Result<(), String> {
        check_schema(
            &schema,
            "response_format",
            "response_format.json_schema.schema",
        )
        .map_err(|e| e.to_json().to_string())
    }

    #[test]
    fn schemas_no_finite_value_satisfies_are_refused() {
        for schema in [
            json!({"$ref": "#"}),
            json!({"type": "object", "properties": {"next": {"$ref": "#"}}, "required": ["next"]}),
            json!({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}},
                   "$ref": "#/$defs/a"}),
            json!({"type": "array", "items": {"$ref": "#"}, "minItems": 1}),
            json!({"enum": []}),
            json!({"type": "object", "required": ["a"], "additionalProperties": false}),
            json!({"anyOf": [{"$ref": "#"}, false]}),
            json!(false),
        ] {
            let err = check(schema.clone()).unwrap_err();
            assert!(
                err.contains("finite") && err.contains("response_format"),
                "{schema}: {err}"
            );
        }
    }

    #[test]
    fn recursive_schemas_with_a_way_out_pass() {
        for schema in [
            json!({}),
            json!({"type": "object", "properties": {"next": {"$ref": "#"}}}),
            json!({"$defs": {"tree": {"type": "object", "properties": {
                       "children": {"type": "array", "items": {"$ref": "#/$defs/tree"}}},
                       "required": ["children"]}}, "$ref": "#/$defs/tree"}),
            json!({"anyOf": [{"type": "null"}, {"type": "array", "items": {"$ref": "#"},
                   "minItems": 1}]}),
            json!({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}),
            json!({"$ref": "https://example.com/schema"}),
        ] {
            check(schema.clone()).unwrap_or_else(|e| panic!("{schema}: {e}"));
        }
    }

    #[test]
    fn oversized_schemas_are_refused() {
        let mut deep = json!({"type": "string"});
        for _ in 0..40 {
            deep = json!({"type": "array", "items": deep});
        }
        let err = check(deep).unwrap_err();
        assert!(err.contains("levels"), "{err}");
        let wide: serde_json::Map<String, Value> = (0..MAX_SCHEMA_NODES)
            .map(|i| (format!("p{i}"), json!({"type": "integer"})))
            .collect();
        let err = check(json!({"type": "object", "properties": wide})).unwrap_err();
        assert!(err.contains("values"), "{err}");
    }
}
