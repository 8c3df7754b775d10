//! Tool calling in `wgemma serve` (OpenAI's `tools`, `tool_choice`, `parallel_tool_calls`):
//! the tools go to the model through its chat template (Gemma 4's declarations, or the
//! checkpoint's template's own `tools`), its calls come back out of its text
//! ([`wgemma::text::tools`]) as `tool_calls` (whole: [`super::tool_reply`], or as stream
//! deltas: [`super::tool_stream`]), and `tool` messages go back in as the responses of the
//! assistant turn that made the calls ([`super::tool_messages`]). This file reads a
//! request's `tools` and `tool_choice`. `tool_choice` "required" or a named function forces
//! a call by constrained decoding: a Lark grammar of the call syntax with each function's
//! argument schema ([`wgemma::text::tool_grammar`]), run as structured output is.

use crate::error::{kind_of, ApiError};
use serde_json::{Map, Value};
use wgemma::session::ToolDeclaration;
use wgemma::text::tool_grammar::{
    tool_call_grammar, tool_calls_in_text_grammar, tool_calls_or_answer_grammar, SpecialMarkers,
};

/// What `tool_choice` asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolChoice {
    /// No tools: none are declared to the model.
    None,
    /// The model may answer or call.
    Auto,
    /// The model must call one (or more, with parallel calls) of the tools.
    Required,
    /// The model must call this function.
    Named(String),
}

/// A chat request's tools, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolRequest {
    pub tools: Vec<ToolDeclaration>,
    /// Per tool, `strict: true`: its arguments follow its schema under `auto` too.
    pub strict: Vec<bool>,
    pub choice: ToolChoice,
    /// More than one call in a reply (`parallel_tool_calls`, default true).
    pub parallel: bool,
}

impl ToolRequest {
    /// The `tools`, `tool_choice` and `parallel_tool_calls` of a chat body; None when no
    /// tools are given (or an empty list) and nothing asks for a call.
    pub fn parse(body: &Map<String, Value>) -> Result<Option<ToolRequest>, ApiError> {
        let (tools, strict) = parse_tools(body.get("tools"))?;
        let parallel = match body.get("parallel_tool_calls") {
            None | Some(Value::Null) => true,
            Some(Value::Bool(b)) => *b,
            Some(other) => {
                return Err(ApiError::field(
                    "parallel_tool_calls",
                    "a boolean",
                    kind_of(other),
                ))
            }
        };
        let choice = match body.get("tool_choice") {
            None | Some(Value::Null) if tools.is_empty() => ToolChoice::None,
            None | Some(Value::Null) => ToolChoice::Auto,
            Some(Value::String(s)) => match s.as_str() {
                "none" => ToolChoice::None,
                "auto" => ToolChoice::Auto,
                "required" => ToolChoice::Required,
                other => {
                    return Err(ApiError::field(
                        "tool_choice",
                        "\"none\", \"auto\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}",
                        format!("{other:?}"),
                    ))
                }
            },
            Some(v @ Value::Object(o)) => {
                let name = o
                    .get("function")
                    .and_then(|f| f.get("name"))
                    .and_then(Value::as_str);
                let keys_ok = o.keys().all(|k| matches!(k.as_str(), "type" | "function"))
                    && o.get("function")
                        .and_then(Value::as_object)
                        .is_some_and(|f| f.keys().all(|k| k == "name"));
                match (o.get("type").and_then(Value::as_str), name) {
                    (Some("function"), Some(name)) if keys_ok => ToolChoice::Named(name.into()),
                    _ => {
                        return Err(ApiError::field(
                            "tool_choice",
                            "{\"type\": \"function\", \"function\": {\"name\": ...}}",
                            v.to_string(),
                        ))
                    }
                }
            }
            Some(other) => {
                return Err(ApiError::field(
                    "tool_choice",
                    "a string or an object naming a function",
                    kind_of(other),
                ))
            }
        };
        match &choice {
            ToolChoice::Required | ToolChoice::Auto if tools.is_empty() => {
                return Err(ApiError::field(
                    "tool_choice",
                    "tools to choose from (the tools field)",
                    "none",
                ))
            }
            ToolChoice::Named(name) if !tools.iter().any(|t| &t.name == name) => {
                return Err(ApiError::field(
                    "tool_choice",
                    "the name of one of the tools",
                    format!("{name:?}"),
                ))
            }
            _ => {}
        }
        if tools.is_empty() {
            return Ok(None);
        }
        Ok(Some(ToolRequest {
            tools,
            strict,
            choice,
            parallel,
        }))
    }

    /// The tools declared to the model: none with `tool_choice` "none".
    pub fn declared(&self) -> &[ToolDeclaration] {
        match self.choice {
            ToolChoice::None => &[],
            _ => &self.tools,
        }
    }

    pub fn forces_call(&self) -> bool {
        matches!(self.choice, ToolChoice::Required | ToolChoice::Named(_))
    }

    /// True when the reply follows a grammar of calls: a forced call, or `auto` beside a
    /// response format (`answers`: the reply may then be calls or an answer in that format)
    /// or with a strict tool (text in which a call, once opened, follows its schema).
    pub fn constrains(&self, answers: bool) -> bool {
        let strict = self.strict.contains(&true);
        self.forces_call() || (self.choice == ToolChoice::Auto && (answers || strict))
    }

    /// The Lark grammar of the reply: the calls a forced choice allows (the turn must call,
    /// so `answer` does not apply to it); with `auto` and an `answer` rule (a response
    /// format's), calls of any tool or an answer following that rule, as vLLM does; with
    /// `auto` and a strict tool, any text and calls whose strict tools' arguments follow
    /// their schemas. `markers`: the call markers that are special tokens of the model's
    /// vocabulary, which the grammar writes as those tokens. None when nothing constrains
    /// the reply.
    pub fn grammar(
        &self,
        answer: Option<&str>,
        markers: SpecialMarkers,
    ) -> Result<Option<String>, ApiError> {
        let path = |i| format!("tools[{i}]");
        let all: Vec<(usize, &ToolDeclaration)> = self.tools.iter().enumerate().collect();
        let allowed: Vec<(usize, &ToolDeclaration)> = match (&self.choice, answer) {
            (ToolChoice::Auto, Some(answer)) => {
                return tool_calls_or_answer_grammar(&all, self.parallel, &path, markers, answer)
                    .map(Some)
                    .map_err(|e| {
                        ApiError::invalid(
                            "tools",
                            format!("tools: calls beside a response_format need argument schemas it can enforce: {e}"),
                        )
                    })
            }
            (ToolChoice::Auto, None) if self.strict.contains(&true) => {
                let tools: Vec<(usize, &ToolDeclaration, bool)> = self
                    .tools
                    .iter()
                    .zip(&self.strict)
                    .enumerate()
                    .map(|(i, (t, &strict))| (i, t, strict))
                    .collect();
                return tool_calls_in_text_grammar(&tools, self.parallel, &path, markers)
                    .map(Some)
                    .map_err(|e| {
                        ApiError::invalid(
                            "tools",
                            format!("tools: a strict tool needs an argument schema it can enforce: {e}"),
                        )
                    });
            }
            (ToolChoice::None | ToolChoice::Auto, _) => return Ok(None),
            (ToolChoice::Required, _) => all,
            (ToolChoice::Named(name), _) => self
                .tools
                .iter()
                .enumerate()
                .filter(|(_, t)| &t.name == name)
                .collect(),
        };
        tool_call_grammar(&allowed, self.parallel, &path, markers)
            .map(Some)
            .map_err(|e| {
                ApiError::invalid(
                    "tools",
                    format!("tools: a forced call (tool_choice) needs argument schemas it can enforce: {e}"),
                )
            })
    }
}

/// OpenAI's `tools`: `[{"type": "function", "function": {"name", "description",
/// "parameters", "strict"}}]`, with each one's `strict`.
fn parse_tools(value: Option<&Value>) -> Result<(Vec<ToolDeclaration>, Vec<bool>), ApiError> {
    let items = match value {
        None | Some(Value::Null) => return Ok((Vec::new(), Vec::new())),
        Some(Value::Array(items)) => items,
        Some(other) => {
            return Err(ApiError::field(
                "tools",
                "an array of tools",
                kind_of(other),
            ))
        }
    };
    let mut tools: Vec<ToolDeclaration> = Vec::new();
    let mut strict = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let at = format!("tools[{i}]");
        let Some(o) = item.as_object() else {
            return Err(ApiError::field(&at, "a tool object", kind_of(item)));
        };
        if let Some(k) = o
            .keys()
            .find(|k| !matches!(k.as_str(), "type" | "function"))
        {
            return Err(ApiError::invalid(
                "tools",
                format!("{at}.{k}: unknown field (a tool is type and function)"),
            ));
        }
        match o.get("type") {
            Some(Value::String(t)) if t == "function" => {}
            other => {
                return Err(ApiError::field(
                    "tools",
                    format!("{at}.type \"function\" (the only kind of tool)"),
                    other.map_or("none".into(), kind_of),
                ))
            }
        }
        let Some(f) = o.get("function").and_then(Value::as_object) else {
            return Err(ApiError::field(
                "tools",
                format!("{at}.function to be an object"),
                o.get("function").map_or("none".into(), kind_of),
            ));
        };
        if let Some(k) = f
            .keys()
            .find(|k| !matches!(k.as_str(), "name" | "description" | "parameters" | "strict"))
        {
            return Err(ApiError::invalid(
                "tools",
                format!(
                    "{at}.function.{k}: unknown field (expected name, description, parameters, \
                     strict)"
                ),
            ));
        }
        let text = |key: &str| -> Result<Option<&str>, ApiError> {
            match f.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.as_str())),
                Some(other) => Err(ApiError::field(
                    "tools",
                    format!("{at}.function.{key} to be a string"),
                    kind_of(other),
                )),
            }
        };
        let name = text("name")?
            .ok_or_else(|| ApiError::field("tools", format!("{at}.function.name"), "none"))?;
        // `strict` asks that arguments follow the schema: they always do when a call is
        // forced, and under `auto` a strict tool's call is held to its grammar once it starts.
        match f.get("strict") {
            None | Some(Value::Null) => strict.push(false),
            Some(Value::Bool(b)) => strict.push(*b),
            Some(s) => {
                return Err(ApiError::field(
                    "tools",
                    format!("{at}.function.strict to be a boolean"),
                    kind_of(s),
                ))
            }
        }
        let decl = ToolDeclaration::new(name, text("description")?, f.get("parameters").cloned())
            .map_err(|e| ApiError::invalid("tools", format!("{at}.function: {e}")))?;
        if tools.iter().any(|t| t.name == decl.name) {
            return Err(ApiError::field(
                "tools",
                format!("{at}.function.name unique among the tools"),
                format!("{name:?} a second time"),
            ));
        }
        tools.push(decl);
    }
    Ok((tools, strict))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(extra: &str) -> Result<Option<ToolRequest>, ApiError> {
        let body: Value = serde_json::from_str(&format!("{{{extra}}}")).unwrap();
        ToolRequest::parse(body.as_object().unwrap())
    }

    const WEATHER: &str = r#""tools": [{"type": "function", "function": {"name": "get_weather",
        "description": "Weather now", "parameters": {"type": "object",
        "properties": {"city": {"type": "string", "enum": ["Paris", "Rome"]}}, "required": ["city"]}}}]"#;

    #[test]
    fn tool_fields_parse_or_name_what_is_wrong() {
        let t = parse(WEATHER).unwrap().unwrap();
        assert_eq!(t.choice, ToolChoice::Auto);
        assert!(t.parallel && !t.forces_call());
        assert_eq!(t.declared().len(), 1);
        assert_eq!(t.grammar(None, SpecialMarkers::default()).unwrap(), None);
        // Beside a response format, `auto` lets the model call or answer in that format.
        let either = t
            .grammar(Some("%json {}"), SpecialMarkers::default())
            .unwrap()
            .unwrap();
        assert!(either.starts_with("start: call+ | answer"), "{either}");
        let none = parse(&format!(r#"{WEATHER}, "tool_choice": "none""#))
            .unwrap()
            .unwrap();
        assert!(none.declared().is_empty());
        let named = parse(&format!(
            r#"{WEATHER}, "tool_choice": {{"type": "function", "function": {{"name": "get_weather"}}}},
               "parallel_tool_calls": false"#
        ))
        .unwrap()
        .unwrap();
        assert!(named.forces_call() && !named.parallel);
        let lark = named
            .grammar(None, SpecialMarkers::default())
            .unwrap()
            .unwrap();
        assert!(lark.contains("call:get_weather"), "{lark}");
        // A forced call is the turn's whole reply, with a response format too.
        assert_eq!(
            named
                .grammar(Some("%json {}"), SpecialMarkers::default())
                .unwrap(),
            Some(lark)
        );
        assert_eq!(parse(r#""tools": []"#).unwrap(), None);
        assert_eq!(parse(r#""tool_choice": "none""#).unwrap(), None);
        for (extra, param, needle) in [
            (r#""tools": {}"#, "tools", "an object"),
            (
                r#""tools": [{"type": "code_interpreter"}]"#,
                "tools",
                "\"function\"",
            ),
            (
                r#""tools": [{"type": "function", "function": {"name": "a b"}}]"#,
                "tools",
                "tool name",
            ),
            (
                r#""tools": [{"type": "function", "function": {"name": "f", "parameters": 3}}]"#,
                "tools",
                "parameters",
            ),
            (
                r#""tools": [{"type": "function", "function": {"name": "f", "x": 1}}]"#,
                "tools",
                "tools[0].function.x",
            ),
            (
                r#""tool_choice": "required""#,
                "tool_choice",
                "tools to choose",
            ),
            (
                &format!(r#"{WEATHER}, "tool_choice": "always""#),
                "tool_choice",
                "\"always\"",
            ),
            (
                &format!(
                    r#"{WEATHER}, "tool_choice": {{"type": "function", "function": {{"name": "f"}}}}"#
                ),
                "tool_choice",
                "\"f\"",
            ),
            (
                &format!(r#"{WEATHER}, "parallel_tool_calls": 1"#),
                "parallel_tool_calls",
                "a boolean",
            ),
        ] {
            let e = parse(extra).unwrap_err();
            assert_eq!(e.param.as_deref(), Some(param), "{extra}: {}", e.message);
            assert!(e.message.contains(needle), "{extra}: {}", e.message);
        }
        // A schema a grammar cannot enforce is refused only when a call is forced.
        let unique = r#""tools": [{"type": "function", "function": {"name": "f", "parameters":
            {"type": "object", "properties": {"a": {"type": "array", "uniqueItems": true}}}}}]"#;
        assert!(parse(unique)
            .unwrap()
            .unwrap()
            .grammar(None, SpecialMarkers::default())
            .unwrap()
            .is_none());
        let forced = parse(&format!(r#"{unique}, "tool_choice": "required""#))
            .unwrap()
            .unwrap();
        let e = forced.grammar(None, SpecialMarkers::default()).unwrap_err();
        assert!(e.message.contains("uniqueItems"), "{}", e.message);
    }

    #[test]
    fn strict_tools_are_held_to_their_schemas_under_auto() {
        // `strict` is a boolean; a strict tool under `auto` gives a grammar of text and calls,
        // and one whose schema it cannot enforce is refused by its keyword.
        let strict_weather = WEATHER.replace(
            r#""name": "get_weather","#,
            r#""name": "get_weather", "strict": true,"#,
        );
        let strict = parse(&strict_weather).unwrap().unwrap();
        assert_eq!(strict.strict, vec![true]);
        assert!(strict.constrains(false));
        assert!(!parse(WEATHER).unwrap().unwrap().constrains(false));
        let lark = strict
            .grammar(None, SpecialMarkers::default())
            .unwrap()
            .unwrap();
        assert!(
            lark.starts_with("start: TEXT | (lead call)+ TEXT"),
            "{lark}"
        );
        let e = parse(&WEATHER.replace(
            r#""name": "get_weather","#,
            r#""name": "get_weather", "strict": "yes","#,
        ))
        .unwrap_err();
        assert!(
            e.message.contains("tools[0].function.strict"),
            "{}",
            e.message
        );
        let strict_unique = r#""tools": [{"type": "function", "function": {"name": "f", "strict": true,
            "parameters": {"type": "object", "properties": {"a": {"type": "array", "uniqueItems": true}}}}}]"#;
        let e = parse(strict_unique)
            .unwrap()
            .unwrap()
            .grammar(None, SpecialMarkers::default())
            .unwrap_err();
        assert!(
            e.message.contains("strict") && e.message.contains("uniqueItems"),
            "{}",
            e.message
        );
    }
}
