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
mod special_tests;
#[cfg(test)]
mod tests;

use super::tool_markers::{STRING_MARK, TOOL_CALL_END, TOOL_CALL_START, TOOL_RESPONSE_START};
use super::tools::ToolDeclaration;
use crate::error::{Error, Result};
use serde_json::Value;
use std::collections::HashMap;

const OP: &str = "tool grammar";

/// Which markers of the call syntax the vocabulary holds as special tokens: Gemma 4's own
/// vocabulary holds them all, a byte-level one may spell them as text (the default). A
/// grammar writes a special marker as a reference to its token (llguidance's `<name>`), which
/// only that token matches: text spelling it out does not, and a regex over text cannot.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SpecialMarkers {
    /// `<|tool_call>`, which opens a call.
    pub call_start: bool,
    /// `<tool_call|>`, which closes one.
    pub call_end: bool,
    /// `<|tool_response>`, which the model writes after its calls (a server stops there).
    pub tool_response: bool,
    /// `<|"|>`, which opens and closes a string value.
    pub string: bool,
}

impl SpecialMarkers {
    /// The markers that `is_special` says are special tokens of the vocabulary.
    pub fn of_vocabulary(is_special: impl Fn(&str) -> bool) -> SpecialMarkers {
        SpecialMarkers {
            call_start: is_special(TOOL_CALL_START),
            call_end: is_special(TOOL_CALL_END),
            tool_response: is_special(TOOL_RESPONSE_START),
            string: is_special(STRING_MARK),
        }
    }

    /// `marker` as a Lark expression: its token when special, its text otherwise.
    fn marker(special: bool, marker: &str) -> String {
        if special {
            marker.to_string()
        } else {
            lit(marker)
        }
    }

    fn open(&self) -> String {
        Self::marker(self.call_start, TOOL_CALL_START)
    }

    fn close(&self) -> String {
        Self::marker(self.call_end, TOOL_CALL_END)
    }

    /// The tool response's opening token, which the model writes after its calls, where
    /// it is special (text holds it as text otherwise): a reply may end with it, as the
    /// model would end it (a server stops there).
    fn tool_response(&self) -> Option<&'static str> {
        self.tool_response.then_some(TOOL_RESPONSE_START)
    }
}

/// The grammar of one call of any of `tools` (`parallel`: one or more calls in a row),
/// and nothing else. `path_of(i)` names tool `i` in errors (a server's `tools[i]`).
pub fn tool_call_grammar(
    tools: &[(usize, &ToolDeclaration)],
    parallel: bool,
    path_of: &dyn Fn(usize) -> String,
    markers: SpecialMarkers,
) -> Result<String> {
    calls_grammar(tools, parallel, path_of, markers, None)
}

/// The grammar of a reply that is either calls of `tools` (as [`tool_call_grammar`]) or
/// an answer following `answer`, a Lark rule body (a server's `%json {...}` of its
/// `response_format`): one or the other, chosen by the model's first token.
pub fn tool_calls_or_answer_grammar(
    tools: &[(usize, &ToolDeclaration)],
    parallel: bool,
    path_of: &dyn Fn(usize) -> String,
    markers: SpecialMarkers,
    answer: &str,
) -> Result<String> {
    calls_grammar(tools, parallel, path_of, markers, Some(answer))
}

/// The grammar of a reply under `tool_choice: "auto"` with strict tools: free text in which
/// each `<|tool_call>` opens a call of one of `tools` (one call in all unless `parallel`).
/// A tool marked strict (the `bool`) has its arguments follow its schema; another's are any
/// object. Text holds no `<|tool_call>` but a call's (neither spelled out nor, where the
/// vocabulary holds it as a special token, that token), so once a call starts it is held
/// to its grammar.
pub fn tool_calls_in_text_grammar(
    tools: &[(usize, &ToolDeclaration, bool)],
    parallel: bool,
    path_of: &dyn Fn(usize) -> String,
    markers: SpecialMarkers,
) -> Result<String> {
    let mut g = Grammar::new(markers);
    let marker = regex_literal(TOOL_CALL_START);
    let text = format!("TEXT: /(?s:.*)/ & ~/(?s:.*){marker}(?s:.*)/\n");
    if markers.call_start {
        // The call opens with its token, which no text matches: text, then calls.
        let alternatives = g.calls(tools, path_of, &markers.open(), &markers.close())?;
        let calls = if parallel {
            "(TEXT call)+"
        } else {
            "TEXT call"
        };
        let end = match markers.tool_response() {
            Some(response) => format!("end\nend: TEXT | {response}"),
            None => "TEXT".into(),
        };
        Ok(g.write(
            format!("start: TEXT | {calls} {end}\n{text}"),
            &alternatives,
        ))
    } else {
        // `lead` ends at the first marker (lazy); TEXT never holds one.
        let alternatives = g.calls(tools, path_of, "", &markers.close())?;
        let start = if parallel {
            "start: TEXT | (lead call)+ TEXT"
        } else {
            "start: TEXT | lead call TEXT"
        };
        let lead = format!("lead[lazy]: /(?s:.*){marker}/");
        Ok(g.write(format!("{start}\n{lead}\n{text}"), &alternatives))
    }
}

fn calls_grammar(
    tools: &[(usize, &ToolDeclaration)],
    parallel: bool,
    path_of: &dyn Fn(usize) -> String,
    markers: SpecialMarkers,
    answer: Option<&str>,
) -> Result<String> {
    let mut g = Grammar::new(markers);
    let strict: Vec<(usize, &ToolDeclaration, bool)> =
        tools.iter().map(|&(i, tool)| (i, tool, true)).collect();
    let alternatives = g.calls(&strict, path_of, &markers.open(), &markers.close())?;
    let calls = if parallel { "call+" } else { "call" };
    let after = markers
        .tool_response()
        .map_or(String::new(), |r| format!(" {r}?"));
    let out = match answer {
        None => format!("start: {calls}{after}\n"),
        Some(body) => format!("start: {calls}{after} | answer\nanswer: {body}\n"),
    };
    Ok(g.write(out, &alternatives))
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
    /// Names of the string values' terminals (or rules) written, by body regex.
    strings: HashMap<String, String>,
    has_any: bool,
    /// `<|"|>` is a special token: strings are written with it.
    string_mark_special: bool,
}

/// Schemas nest at most this deep.
const MAX_DEPTH: usize = 32;

impl Grammar {
    fn new(markers: SpecialMarkers) -> Grammar {
        Grammar {
            string_mark_special: markers.string,
            ..Grammar::default()
        }
    }

    /// `text` of the call notation (a constant value, a key) as a Lark expression: its
    /// literal, or where the string mark is a special token, literals between its tokens.
    fn notation(&self, text: &str) -> String {
        if !self.string_mark_special {
            return lit(text);
        }
        let mut parts = Vec::new();
        for (i, part) in text.split(STRING_MARK).enumerate() {
            if i > 0 {
                parts.push(STRING_MARK.to_string());
            }
            if !part.is_empty() {
                parts.push(lit(part));
            }
        }
        match parts.as_slice() {
            [] => lit(""),
            [one] => one.clone(),
            _ => format!("({})", parts.join(" ")),
        }
    }

    /// One rule per tool: `open` (a Lark expression: the opening marker, or nothing where
    /// the text before has it), `call:` and its name, its arguments (following its schema
    /// when strict, any object otherwise), `close` (the closing marker's expression).
    /// Returns the rules' names.
    fn calls(
        &mut self,
        tools: &[(usize, &ToolDeclaration, bool)],
        path_of: &dyn Fn(usize) -> String,
        open: &str,
        close: &str,
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
            let name = lit(&format!("call:{}", tool.name));
            let parts = [open, &name, &args, close];
            let body: Vec<&str> = parts.into_iter().filter(|p| !p.is_empty()).collect();
            self.rules.push(format!("{rule}: {}", body.join(" ")));
            alternatives.push(rule);
        }
        Ok(alternatives)
    }

    /// `out` (the start rule and its own rules), then the `call` rule of `alternatives` and
    /// every rule written.
    fn write(&self, mut out: String, alternatives: &[String]) -> String {
        out.push_str(&format!("call: {}\n", alternatives.join(" | ")));
        for rule in &self.rules {
            out.push_str(rule);
            out.push('\n');
        }
        out
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
