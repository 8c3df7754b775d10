//! A grammar (llguidance's Lark syntax) of the tool calls a request allows, in Gemma 4's
//! notation ([`super::tools`]), each call's arguments following its function's JSON schema:
//! what a server compiles to force a call (`tool_choice` "required" or a named function) by
//! constrained decoding, or to let the model either call a tool or give an answer of its own
//! grammar (a `response_format` beside `tools`).
//!
//! The schema subset is what Pydantic, zod and the OpenAI SDK write:
//! - `type` (one or a list) object, string, integer, number, boolean, null, array;
//! - objects: `properties` with `required` (written in the schema's order, optional ones may
//!   be left out, no others), or `additionalProperties` with a schema and no `properties`
//!   (a map of any keys to that schema's values);
//! - `$ref` to a local definition (`#`, `#/$defs/...`, `#/definitions/...`), recursive ones
//!   included (a grammar rule may refer to itself), `allOf` of one schema;
//! - `enum`, `const`, `anyOf`, and `oneOf` (as `anyOf`: the alternatives Pydantic and zod
//!   write are told apart by a tag or a type, so a value matches one of them);
//! - numbers: `minimum`, `maximum`, `exclusiveMinimum`, `exclusiveMaximum`, `multipleOf`
//!   (compiled by llguidance's JSON schema compiler, whose numbers are Gemma's numbers);
//! - arrays: `items`, `prefixItems` (tuples of exactly those items), `minItems`, `maxItems`;
//! - strings: `minLength`, `maxLength`, `pattern`, and the `format`s date-time, date, time,
//!   duration, email, hostname, ipv4, uuid and uri ([`strings`]).
//!
//! Keywords that only describe (`description`, `title`, `default`, `examples`,
//! `discriminator`...) are read past; `additionalProperties` beside `properties` is taken as
//! false (only declared properties are written). Any other keyword (`uniqueItems`,
//! `patternProperties`, an unknown `format`...) is refused by its path, since a grammar that
//! ignored it would let through arguments the schema forbids.

mod strings;
mod values;

#[cfg(test)]
mod tests;

use super::tool_markers::{TOOL_CALL_END, TOOL_CALL_START};
use super::tools::ToolDeclaration;
use crate::error::{Error, Result};
use serde_json::Value;
use std::collections::HashMap;

const OP: &str = "tool grammar";

/// The grammar of one call of any of `tools` (`parallel`: one or more calls in a row),
/// and nothing else. `path_of(i)` names tool `i` in errors (a server's `tools[i]`).
pub fn tool_call_grammar(
    tools: &[(usize, &ToolDeclaration)],
    parallel: bool,
    path_of: &dyn Fn(usize) -> String,
) -> Result<String> {
    calls_grammar(tools, parallel, path_of, None)
}

/// The grammar of a reply that is either calls of `tools` (as [`tool_call_grammar`]) or
/// an answer following `answer`, a Lark rule body (a server's `%json {...}` of its
/// `response_format`): one or the other, chosen by the model's first token.
pub fn tool_calls_or_answer_grammar(
    tools: &[(usize, &ToolDeclaration)],
    parallel: bool,
    path_of: &dyn Fn(usize) -> String,
    answer: &str,
) -> Result<String> {
    calls_grammar(tools, parallel, path_of, Some(answer))
}

/// The grammar of a reply under `tool_choice: "auto"` with strict tools: free text in which
/// each `<|tool_call>` opens a call of one of `tools` (one call in all unless `parallel`).
/// A tool marked strict (the `bool`) has its arguments follow its schema; another's are any
/// object. Text holds no `<|tool_call>` but a call's, so once a call starts it is held to
/// its grammar.
pub fn tool_calls_in_text_grammar(
    tools: &[(usize, &ToolDeclaration, bool)],
    parallel: bool,
    path_of: &dyn Fn(usize) -> String,
) -> Result<String> {
    let mut g = Grammar::default();
    let alternatives = g.calls(tools, path_of, "call:")?;
    let start = if parallel {
        "start: TEXT | (lead call)+ TEXT"
    } else {
        "start: TEXT | lead call TEXT"
    };
    // `lead` ends at the first marker (lazy); TEXT never holds one.
    let marker = regex_literal(TOOL_CALL_START);
    let mut out = format!(
        "{start}\nlead[lazy]: /(?s:.*){marker}/\nTEXT: /(?s:.*)/ & ~/(?s:.*){marker}(?s:.*)/\n"
    );
    g.write(&mut out, &alternatives);
    Ok(out)
}

fn calls_grammar(
    tools: &[(usize, &ToolDeclaration)],
    parallel: bool,
    path_of: &dyn Fn(usize) -> String,
    answer: Option<&str>,
) -> Result<String> {
    let mut g = Grammar::default();
    let strict: Vec<(usize, &ToolDeclaration, bool)> =
        tools.iter().map(|&(i, tool)| (i, tool, true)).collect();
    let alternatives = g.calls(&strict, path_of, &format!("{TOOL_CALL_START}call:"))?;
    let calls = if parallel { "call+" } else { "call" };
    let mut out = match answer {
        None => format!("start: {calls}\n"),
        Some(body) => format!("start: {calls} | answer\nanswer: {body}\n"),
    };
    g.write(&mut out, &alternatives);
    Ok(out)
}

/// `text` as a regex matching it literally (for Lark's `/.../`): its regex metacharacters
/// and the `/` that would end the regex escaped (`\<` would be a word boundary).
fn regex_literal(text: &str) -> String {
    let mut out = String::new();
    for c in text.chars() {
        if r"\.+*?()|[]{}^$/".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// A Lark string literal (JSON's escapes, which llguidance's Lark reads).
fn lit(s: &str) -> String {
    serde_json::to_string(s).expect("a string serialises")
}

/// Rules written so far for the schemas of one request's tools.
#[derive(Default)]
struct Grammar {
    rules: Vec<String>,
    next: usize,
    /// The schema `$ref`s resolve in (the tool's `parameters`).
    root: Value,
    /// Rule names of the references seen in this root, by pointer (a recursive reference
    /// finds its own rule here).
    refs: HashMap<String, String>,
    /// Terminal names of the string lexemes written, by body regex.
    strings: HashMap<String, String>,
    has_any: bool,
}

/// Schemas nest at most this deep.
const MAX_DEPTH: usize = 32;

impl Grammar {
    /// One rule per tool: `opening` and its name, its arguments (following its schema when
    /// strict, any object otherwise), the closing marker. Returns the rules' names.
    fn calls(
        &mut self,
        tools: &[(usize, &ToolDeclaration, bool)],
        path_of: &dyn Fn(usize) -> String,
        opening: &str,
    ) -> Result<Vec<String>> {
        if tools.is_empty() {
            return Err(Error::invalid(OP, "tools", "at least one tool", "none"));
        }
        let mut alternatives = Vec::new();
        for &(i, tool, strict) in tools {
            let args = if strict {
                self.start_schema(&tool.parameters);
                self.value(
                    &tool.parameters,
                    &format!("{}.function.parameters", path_of(i)),
                    0,
                )?
            } else {
                self.any();
                "any_object".to_string()
            };
            let rule = self.fresh();
            self.rules.push(format!(
                "{rule}: {} {args} {}",
                lit(&format!("{opening}{}", tool.name)),
                lit(TOOL_CALL_END)
            ));
            alternatives.push(rule);
        }
        Ok(alternatives)
    }

    /// The `call` rule of `alternatives` and every rule written, after `out`'s start.
    fn write(&self, out: &mut String, alternatives: &[String]) {
        out.push_str(&format!("call: {}\n", alternatives.join(" | ")));
        for rule in &self.rules {
            out.push_str(rule);
            out.push('\n');
        }
    }

    fn fresh(&mut self) -> String {
        self.next += 1;
        format!("r{}", self.next)
    }

    fn start_schema(&mut self, root: &Value) {
        self.root = root.clone();
        self.refs.clear();
    }

    fn refuse(path: &str, expected: &str, found: impl std::fmt::Display) -> Error {
        Error::invalid(OP, path, expected, found.to_string())
    }

    /// Any value (a schema without a type).
    fn any(&mut self) -> String {
        let string = self.any_string();
        if !self.has_any {
            self.has_any = true;
            self.rules.push(format!(
                r#"any_value: {string} | {} | "true" | "false" | "null" | "[" (any_value ("," any_value)*)? "]" | any_object"#,
                values::NUMBER
            ));
            self.rules.push(format!(
                r#"any_object: "{{" (any_pair ("," any_pair)*)? "}}"
any_pair: ({} | {string}) ":" any_value"#,
                values::BARE_KEY
            ));
        }
        "any_value".into()
    }
}
