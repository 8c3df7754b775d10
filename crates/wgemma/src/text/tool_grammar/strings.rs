//! String values: a lexeme from mark to mark (`<|"|>...<|"|>`, no escapes; where the mark is a
//! special token, a rule of the mark's tokens around the body's lexeme), its body the
//! intersection of what `format`, `pattern` and `minLength` / `maxLength` allow, and never
//! the closing mark.

use super::{Grammar, MAX_DEPTH};
use crate::error::Result;
use crate::text::tool_markers::STRING_MARK;
use crate::text::tools::format_value;
use serde_json::{Map, Value};

/// Any body (with the closing mark excluded, as every body is).
pub(super) const ANY_BODY: &str = r"(?s:.*)";

/// The closing mark, escaped for a regex.
const MARK_RX: &str = r#"<\|"\|>"#;

const DATE: &str = r"[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])";
const TIME: &str = r"([01][0-9]|2[0-3]):[0-5][0-9]:([0-5][0-9]|60)(\.[0-9]{1,9})?([Zz]|[+\-]([01][0-9]|2[0-3]):[0-5][0-9])";
const HOST_LABEL: &str = r"[A-Za-z0-9]([A-Za-z0-9\-]{0,61}[A-Za-z0-9])?";
const HMS: &str =
    r"[0-9]+H([0-9]+M)?([0-9]+(\.[0-9]+)?S)?|[0-9]+M([0-9]+(\.[0-9]+)?S)?|[0-9]+(\.[0-9]+)?S";
const OCTET: &str = r"(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])";

/// The body regexes (all must match) of a `format` this grammar enforces: a subset of what
/// the format allows (every string it lets through is valid), broad enough for the values
/// clients send.
fn format_body(name: &str) -> Option<Vec<String>> {
    let one = match name {
        "date" => DATE.to_string(),
        "time" => TIME.to_string(),
        "date-time" => format!("{DATE}[Tt]{TIME}"),
        // ISO 8601 durations: at least one figure, and one after a T.
        "duration" => {
            return Some(vec![
                format!(r"P([0-9]+Y)?([0-9]+M)?([0-9]+W)?([0-9]+D)?(T({HMS}))?"),
                r"(?s:.*[0-9].*)".to_string(),
            ])
        }
        "email" => format!(r"[A-Za-z0-9._%+\-]+@{HOST_LABEL}(\.{HOST_LABEL})+"),
        "hostname" => format!(r"{HOST_LABEL}(\.{HOST_LABEL})*"),
        "ipv4" => format!(r"({OCTET}\.){{3}}{OCTET}"),
        "uuid" => r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
            .to_string(),
        "uri" => r#"[A-Za-z][A-Za-z0-9+.\-]*:[^\s<>"{}|\\^`]+"#.to_string(),
        _ => return None,
    };
    Some(vec![one])
}

const FORMATS: &str = "date-time, date, time, duration, email, hostname, ipv4, uuid or uri";

impl Grammar {
    /// A string under `map`'s `format`, `pattern` and length keywords.
    pub(super) fn string(&mut self, map: &Map<String, Value>, path: &str) -> Result<String> {
        let mut parts = Vec::new();
        if let Some(f) = map.get("format") {
            let bodies = f.as_str().and_then(format_body).ok_or_else(|| {
                Self::refuse(
                    &format!("{path}.format"),
                    &format!("a format this server enforces ({FORMATS})"),
                    format_value(f),
                )
            })?;
            parts.extend(bodies);
        }
        if let Some(p) = map.get("pattern") {
            let path = format!("{path}.pattern");
            let Some(p) = p.as_str() else {
                return Err(Self::refuse(&path, "a regular expression", format_value(p)));
            };
            let body = pattern_body(p).map_err(|why| Self::refuse(&path, &why, p))?;
            parts.push(body);
        }
        let length = |key: &str| -> Result<Option<u64>> {
            map.get(key)
                .map(|v| {
                    v.as_u64().ok_or_else(|| {
                        Self::refuse(
                            &format!("{path}.{key}"),
                            "a non-negative integer",
                            format_value(v),
                        )
                    })
                })
                .transpose()
        };
        match (length("minLength")?, length("maxLength")?) {
            (None, None) => {}
            (min, Some(max)) if max < min.unwrap_or(0) => {
                return Err(Self::refuse(
                    &format!("{path}.maxLength"),
                    "maxLength at least minLength",
                    format!("{max} below {}", min.unwrap_or(0)),
                ))
            }
            (min, max) => parts.push(format!(
                "(?s:.{{{},{}}})",
                min.unwrap_or(0),
                max.map_or(String::new(), |m| m.to_string())
            )),
        }
        if parts.is_empty() {
            parts.push(ANY_BODY.to_string());
        }
        Ok(self.string_terminal(&parts))
    }

    /// The terminal of any string.
    pub(super) fn any_string(&mut self) -> String {
        self.string_terminal(&[ANY_BODY.to_string()])
    }

    /// The terminal of a string whose body matches every regex of `body`, written once per
    /// body.
    pub(super) fn string_terminal(&mut self, body: &[String]) -> String {
        let key = body.join("\u{0}");
        if let Some(name) = self.strings.get(&key) {
            return name.clone();
        }
        let name = match body {
            [any] if any == ANY_BODY => "STRING".to_string(),
            _ => format!("STRING{}", self.strings.len() + 1),
        };
        let regexes: Vec<String> = body.iter().map(|rx| format!("/{rx}/")).collect();
        let body_rule = format!(
            "{name}_BODY: {} & ~/(?s:.*){MARK_RX}(?s:.*)/",
            regexes.join(" & ")
        );
        let name = if self.string_mark_special {
            // A special token is no text, so no terminal holds it: a rule of the marks' tokens
            // around the body's terminal.
            let rule = name.to_lowercase();
            self.rules.push(format!(
                "{rule}: {STRING_MARK} {name}_BODY {STRING_MARK}\n{body_rule}"
            ));
            rule
        } else {
            let mark = super::lit(STRING_MARK);
            self.rules
                .push(format!("{name}: {mark} {name}_BODY {mark}\n{body_rule}"));
            name
        };
        self.strings.insert(key, name.clone());
        name
    }
}

/// A JSON Schema `pattern` (a search anywhere in the string, ECMA-262's `\d` and `\w`) as
/// a regex over the whole body: unanchored ends get `.*`. Anchors inside the pattern are
/// refused (the regex engine matches whole lexemes and has none).
fn pattern_body(pattern: &str) -> std::result::Result<String, String> {
    let (start, rest) = match pattern.strip_prefix('^') {
        Some(rest) => (true, rest),
        None => (false, pattern),
    };
    let trailing_backslashes = rest
        .strip_suffix('$')
        .map(|r| r.len() - r.trim_end_matches('\\').len());
    let (end, core) = match trailing_backslashes {
        Some(n) if n % 2 == 0 => (true, &rest[..rest.len() - 1]),
        _ => (false, rest),
    };
    let core = ecma_to_lark(core)?;
    if core.len() > 4096 || core.matches('(').count() > MAX_DEPTH * 4 {
        return Err("a pattern of at most 4096 bytes and 128 groups".into());
    }
    let any = "(?s:.*)";
    Ok(format!(
        "{}(?:{core}){}",
        if start { "" } else { any },
        if end { "" } else { any }
    ))
}

/// `\d`, `\w` as ASCII classes (ECMA-262), `/` escaped for Lark's `/.../`; anchors
/// outside a character class are refused.
fn ecma_to_lark(rx: &str) -> std::result::Result<String, String> {
    let mut out = String::new();
    let (mut escaped, mut in_class) = (false, false);
    for c in rx.chars() {
        if escaped {
            escaped = false;
            match (c, in_class) {
                ('d', false) => out.push_str("[0-9]"),
                ('D', false) => out.push_str("[^0-9]"),
                ('w', false) => out.push_str("[0-9a-zA-Z_]"),
                ('W', false) => out.push_str("[^0-9a-zA-Z_]"),
                ('d', true) => out.push_str("0-9"),
                ('w', true) => out.push_str("0-9a-zA-Z_"),
                ('/', _) => out.push_str("\\/"),
                _ => {
                    out.push('\\');
                    out.push(c);
                }
            }
            continue;
        }
        match c {
            '\\' => escaped = true,
            '[' if !in_class => {
                in_class = true;
                out.push(c);
            }
            ']' if in_class => {
                in_class = false;
                out.push(c);
            }
            '^' | '$' if !in_class => {
                return Err("a pattern anchored only at its ends (^ first, $ last)".into())
            }
            '/' => out.push_str("\\/"),
            '\n' => out.push_str("\\n"),
            _ => out.push(c),
        }
    }
    Ok(out)
}
