//! A call's arguments as JSON text while they are still being written: what a server streams
//! as argument fragments (OpenAI's `delta.tool_calls[].function.arguments`) and what it gives
//! for a call cut short by `max_tokens`.
//!
//! [`arguments_json_prefix`] turns the arguments written so far in Gemma's notation
//! (`{city:<|"|>Par`) into the JSON text they begin (`{"city":"Par`). It only ever gives what
//! more text cannot change (a key once its `:` arrives, a number or word once it ends, a
//! string's characters but not a possible start of its closing mark), so the texts of a
//! growing call extend each other, and for a whole call it is the compact JSON of the parsed
//! arguments (`serde_json`'s, keys in the call's order): streamed fragments add up to the
//! arguments of the answer.

use super::tool_markers::{is_bare_key, STRING_MARK};
use serde_json::Value;

/// What the JSON text continues with.
#[derive(Clone, Copy, PartialEq)]
enum Expect {
    /// A key (or the object's end).
    Key,
    /// A value.
    Value,
    /// A comma or the container's end.
    Separator,
}

/// The JSON text that `notation` (a call's arguments so far, from their `{`) begins, as far
/// as more text cannot change it. Stops at anything that is not Gemma's notation.
pub fn arguments_json_prefix(notation: &str) -> String {
    let mut out = String::new();
    let mut rest = notation;
    let mut stack: Vec<char> = Vec::new();
    let mut expect = Expect::Value;
    loop {
        rest = rest.trim_start();
        let Some(c) = rest.chars().next() else {
            return out;
        };
        let closer = stack
            .last()
            .map(|&open| if open == '{' { '}' } else { ']' });
        match (expect, c) {
            (Expect::Value, '{') | (Expect::Value, '[') => {
                out.push(c);
                stack.push(c);
                expect = if c == '{' { Expect::Key } else { Expect::Value };
                rest = &rest[1..];
            }
            (Expect::Key | Expect::Separator, _) | (Expect::Value, ']') if Some(c) == closer => {
                out.push(c);
                stack.pop();
                expect = Expect::Separator;
                rest = &rest[1..];
                if stack.is_empty() {
                    return out;
                }
            }
            (Expect::Separator, ',') => {
                out.push(',');
                expect = if stack.last() == Some(&'{') {
                    Expect::Key
                } else {
                    Expect::Value
                };
                rest = &rest[1..];
            }
            (Expect::Key, _) => {
                let Some((key, after)) = key_of(rest) else {
                    return out;
                };
                out.push_str(&Value::String(key).to_string());
                out.push(':');
                expect = Expect::Value;
                rest = after;
            }
            (Expect::Value, _) => {
                let (text, after) = scalar(rest);
                out.push_str(&text);
                match after {
                    Some(after) => {
                        expect = Expect::Separator;
                        rest = after;
                    }
                    None => return out,
                }
            }
            (Expect::Separator, _) => return out,
        }
    }
}

/// A key and what follows its `:`, once the `:` has arrived.
fn key_of(rest: &str) -> Option<(String, &str)> {
    let (key, after) = match rest.strip_prefix(STRING_MARK) {
        Some(body) => {
            let end = body.find(STRING_MARK)?;
            (body[..end].to_string(), &body[end + STRING_MARK.len()..])
        }
        None => {
            let end = rest.find(':')?;
            let key = rest[..end].trim_end();
            if !is_bare_key(key) {
                return None;
            }
            (key.to_string(), &rest[end..])
        }
    };
    let after = after.trim_start().strip_prefix(':')?;
    Some((key, after))
}

/// A string, number or word starting `rest`: the JSON text it gives so far, and what follows
/// it once it has ended (None while it may go on, or when it is not a value).
fn scalar(rest: &str) -> (String, Option<&str>) {
    if let Some(body) = rest.strip_prefix(STRING_MARK) {
        return match body.find(STRING_MARK) {
            Some(end) => (
                Value::String(body[..end].to_string()).to_string(),
                Some(&body[end + STRING_MARK.len()..]),
            ),
            None => {
                // Not the characters that may begin the closing mark.
                let held = (1..STRING_MARK.len())
                    .rev()
                    .find(|&k| body.ends_with(&STRING_MARK[..k]))
                    .unwrap_or(0);
                let open = Value::String(body[..body.len() - held].to_string()).to_string();
                (open[..open.len() - 1].to_string(), None)
            }
        };
    }
    if rest.starts_with('"') {
        // A JSON-quoted string (models sometimes write one): given once it is whole.
        let mut de = serde_json::Deserializer::from_str(rest).into_iter::<String>();
        return match de.next() {
            Some(Ok(s)) => (
                Value::String(s).to_string(),
                Some(&rest[de.byte_offset()..]),
            ),
            _ => (String::new(), None),
        };
    }
    let len = rest
        .find(|c: char| matches!(c, ',' | '}' | ']') || c.is_whitespace())
        .unwrap_or(rest.len());
    if len == rest.len() {
        return (String::new(), None);
    }
    let word = &rest[..len];
    let text = match word {
        "true" | "false" | "null" => word.to_string(),
        _ => match serde_json::from_str::<serde_json::Number>(word) {
            Ok(n) => n.to_string(),
            Err(_) => return (String::new(), None),
        },
    };
    (text, Some(&rest[len..]))
}

/// A call cut short (its `<tool_call|>` never came): its name and the JSON text its
/// arguments began.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartialCall {
    pub name: String,
    pub arguments: String,
}

/// The call that `body` (the text after `<|tool_call>`) begins, once its name is whole (its
/// `{` has arrived); None before, or when the text is not a call's start.
pub fn partial_call(body: &str) -> Option<PartialCall> {
    let rest = body.trim_start().strip_prefix("call:")?;
    let open = rest.find('{')?;
    let name = rest[..open].trim();
    if !is_bare_key(name) {
        return None;
    }
    Some(PartialCall {
        name: name.to_string(),
        arguments: arguments_json_prefix(&rest[open..]),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_grow_into_the_whole_arguments() {
        let body = r#"call:f{city:<|"|>Par"is\<|"|>,n:-1.50,tags:[<|"|>a<|"|>,true,null],inner:{<|"|>two words<|"|>:{}},e:[]}"#;
        // The compact JSON of the parsed arguments (`parse_call`'s, serialised).
        let whole = r#"{"city":"Par\"is\\","n":-1.5,"tags":["a",true,null],"inner":{"two words":{}},"e":[]}"#;
        let mut last = String::new();
        for end in (0..=body.len()).filter(|&i| body.is_char_boundary(i)) {
            let Some(p) = partial_call(&body[..end]) else {
                assert!(!body[..end].contains('{'), "{end}");
                continue;
            };
            assert_eq!(p.name, "f");
            assert!(
                p.arguments.starts_with(&last),
                "{last:?} then {:?}",
                p.arguments
            );
            assert!(
                whole.starts_with(&p.arguments),
                "{:?} not in {whole}",
                p.arguments
            );
            last = p.arguments;
        }
        assert_eq!(last, whole);
        assert_eq!(
            partial_call(r#"call:f{city:<|"|>Jeru<|"#)
                .unwrap()
                .arguments,
            r#"{"city":"Jeru"#
        );
    }

    #[test]
    fn what_is_not_a_call_gives_nothing() {
        assert_eq!(partial_call("call:f"), None);
        assert_eq!(partial_call("cal"), None);
        assert_eq!(partial_call("call:a b{"), None);
        assert_eq!(partial_call("call:f{<bad").unwrap().arguments, "{");
    }
}
