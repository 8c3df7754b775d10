//! Structured output of `wgemma serve`: `response_format` `json_object` and `json_schema`
//! (checked by [`super::response_format`]) by constrained decoding. llguidance compiles the JSON schema into a grammar over the
//! tokenizer's vocabulary (each token's bytes, from its `tokenizer.json`); before every
//! sampled token the grammar's mask sets the logits of the tokens that cannot continue a
//! valid answer to -inf, so every completed answer parses and validates. A schema is
//! compiled once (the first request that names it) and each request then runs on a copy.
//! A forced tool call runs the same way on a Lark grammar of the model's call syntax
//! (`crate::openai::tools`).
//!
//! JSON is written compactly (`, ` and `: ` between items, no other whitespace): a free
//! whitespace rule lets a small model pad the answer with newlines until the budget ends.

use crate::error::{clip, ApiError};
use crate::openai::response_format::ResponseFormat;
use llguidance::api::TopLevelGrammar;
use llguidance::toktrie::{ApproximateTokEnv, TokEnv, TokRxInfo, TokTrie};
use llguidance::{Matcher, ParserFactory};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use wgemma::session::TokenConstraint;
use wgemma::text::tokenizer::Tokenizer;
use wgemma::text::tool_grammar::SpecialMarkers;

/// Compiled grammars kept at most (a server that sees more distinct schemas compiles again).
const CACHED_GRAMMARS: usize = 64;

/// The grammar compiler of one model's vocabulary.
pub struct Grammars {
    factory: ParserFactory,
    stop_ids: Vec<u32>,
    /// The call syntax's markers that are special tokens of the vocabulary (Gemma 4's own
    /// holds them all): a tool grammar writes those as their tokens.
    markers: SpecialMarkers,
    cache: Mutex<HashMap<String, Matcher>>,
}

impl Grammars {
    /// From the tokenizer (byte-level BPE or byte-fallback vocabularies: each token must
    /// have known bytes), the model's vocabulary size (logit rows) and its stop ids (what a
    /// finished answer may end with).
    pub fn new(
        tokenizer: &Tokenizer,
        vocab_size: usize,
        stop_ids: &[u32],
    ) -> Result<Grammars, String> {
        let json: Value = serde_json::from_str(&tokenizer.to_json().map_err(|e| e.to_string())?)
            .map_err(|e| e.to_string())?;
        let mut bytes =
            llguidance::token_bytes_from_tokenizer_json(&json).map_err(|e| e.to_string())?;
        let markers = SpecialMarkers::of_vocabulary(|marker| {
            json["added_tokens"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|t| t["content"] == marker && t["special"] == true)
        });
        if bytes.len() > vocab_size {
            return Err(format!(
                "the tokenizer has {} tokens, the model's vocabulary {vocab_size}",
                bytes.len()
            ));
        }
        bytes.resize(vocab_size, Vec::new());
        let Some(&eos) = stop_ids.first() else {
            return Err("the model has no stop token to end an answer with".into());
        };
        let trie = TokTrie::from(&TokRxInfo::new(vocab_size as u32, eos), &bytes)
            .with_eos_tokens(stop_ids);
        let env: TokEnv = Arc::new(ApproximateTokEnv::new(trie));
        let mut factory = ParserFactory::new_simple(&env).map_err(|e| e.to_string())?;
        // Warnings go to the request's error, not the server's stderr.
        factory.quiet();
        Ok(Grammars {
            factory,
            stop_ids: stop_ids.to_vec(),
            markers,
            cache: Mutex::new(HashMap::new()),
        })
    }

    /// The call syntax's markers that are special tokens of this vocabulary, which a tool
    /// grammar ([`crate::openai::tools::ToolRequest::grammar`]) writes as their tokens.
    pub fn special_markers(&self) -> SpecialMarkers {
        self.markers
    }

    /// The constraint of one request: a copy of the format's compiled grammar (compiled
    /// now if it is new; a schema llguidance refuses is the client's error).
    pub fn constraint(&self, format: &ResponseFormat) -> Result<GrammarConstraint, ApiError> {
        let schema = format.schema();
        self.compiled(
            format!("json {schema}"),
            || TopLevelGrammar::from_json_schema(schema.clone()),
            "response_format",
            "a JSON schema",
        )
    }

    /// The constraint of a forced tool call: `lark` is the calls' grammar
    /// ([`wgemma::text::tool_grammar`]); one llguidance refuses names `tool_choice`.
    pub fn tool_constraint(&self, lark: &str) -> Result<GrammarConstraint, ApiError> {
        self.compiled(
            format!("lark {lark}"),
            || TopLevelGrammar::from_lark(lark.to_string()),
            "tools",
            "tool schemas",
        )
    }

    /// A copy of the grammar cached under `key`, compiled from `grammar()` if new; `param`
    /// and `what` name the request's field in a refusal.
    fn compiled(
        &self,
        key: String,
        grammar: impl FnOnce() -> TopLevelGrammar,
        param: &str,
        what: &str,
    ) -> Result<GrammarConstraint, ApiError> {
        let cached = self
            .cache
            .lock()
            .expect("grammar cache poisoned")
            .get(&key)
            .map(Matcher::deep_clone);
        let matcher = match cached {
            Some(m) => m,
            None => {
                let parser = self.factory.create_parser(grammar());
                let matcher = Matcher::new(parser);
                let refused = |why: String| {
                    ApiError::invalid(
                        param,
                        format!(
                            "{param}: expected {what} this server can enforce, found one it \
                             cannot ({})",
                            brief(&why)
                        ),
                    )
                };
                if let Some(e) = matcher.get_error() {
                    return Err(refused(e));
                }
                // A grammar with no first token can never give an answer.
                let first = matcher
                    .deep_clone()
                    .compute_mask_or_eos()
                    .map_err(|e| refused(e.to_string()))?;
                if first.is_zero() {
                    return Err(refused("no value can start an answer".into()));
                }

                let mut cache = self.cache.lock().expect("grammar cache poisoned");
                if cache.len() >= CACHED_GRAMMARS {
                    cache.clear();
                }
                cache.insert(key, matcher.deep_clone());
                matcher
            }
        };
        Ok(GrammarConstraint {
            matcher,
            stop_ids: self.stop_ids.clone(),
            ended: false,
            param: if param == "tools" {
                "tools"
            } else {
                "response_format"
            },
        })
    }
}

/// One request's grammar state.
pub struct GrammarConstraint {
    matcher: Matcher,
    stop_ids: Vec<u32>,
    /// A stop token was taken (only ever allowed once the answer is complete).
    ended: bool,
    /// The request's field the grammar comes from (`response_format` or `tools`).
    param: &'static str,
}

impl GrammarConstraint {
    /// The request's field the grammar comes from, which a failure names.
    pub fn param(&self) -> &'static str {
        self.param
    }
}

/// The grammar engine's message cut to its first line and [`MAX_REASON_CHARS`]: its
/// errors can carry a dump of the parser's state and the text so far, which no client
/// reads and no log line needs.
fn brief(message: &str) -> String {
    clip(message.lines().next().unwrap_or_default(), MAX_REASON_CHARS)
}

/// Characters of a grammar engine's message kept in an error.
const MAX_REASON_CHARS: usize = 160;

fn grammar_error(e: impl std::fmt::Display) -> wgemma::Error {
    wgemma::Error::invalid(
        "structured output",
        "the grammar's state",
        "a token the grammar allows",
        brief(&e.to_string()),
    )
}

impl TokenConstraint for GrammarConstraint {
    fn mask(&mut self, logits: &mut [f32]) -> wgemma::Result<()> {
        // Once the answer is complete the grammar allows only an end (its EOS set).
        let mask = self.matcher.compute_mask_or_eos().map_err(grammar_error)?;
        for (i, l) in logits.iter_mut().enumerate() {
            if !mask.is_allowed(i as u32) {
                *l = f32::NEG_INFINITY;
            }
        }
        Ok(())
    }

    fn accept(&mut self, token: u32) -> wgemma::Result<()> {
        if self.stop_ids.contains(&token) {
            self.ended = true;
            return Ok(());
        }
        self.matcher.consume_token(token).map_err(grammar_error)
    }

    fn is_finished(&self) -> bool {
        self.ended || self.matcher.is_stopped()
    }
}

/// `<eos>` of [`byte_tokenizer`].
#[cfg(any(test, feature = "fuzzing"))]
pub const BYTE_EOS: u32 = 256;

/// A byte-level BPE tokenizer of the 256 bytes (GPT-2's byte-to-char map, no merges) and
/// `<eos>` at 256: every byte string is a token path, as in a real byte-level vocabulary.
#[cfg(any(test, feature = "fuzzing"))]
pub fn byte_tokenizer() -> Tokenizer {
    use serde_json::json;
    let printable = |b: u32| matches!(b, 33..=126 | 161..=172 | 174..=255);
    let mut next = 256;
    let vocab: serde_json::Map<String, Value> = (0..256u32)
        .map(|b| {
            let c = if printable(b) {
                char::from_u32(b).expect("a byte's char")
            } else {
                next += 1;
                char::from_u32(next - 1).expect("a stand-in char")
            };
            (c.to_string(), json!(b))
        })
        .collect();
    let json = json!({
        "version": "1.0", "truncation": null, "padding": null, "normalizer": null,
        "added_tokens": [{"id": BYTE_EOS, "content": "<eos>", "single_word": false, "lstrip": false,
                          "rstrip": false, "normalized": false, "special": true}],
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false,
                          "use_regex": false},
        "post_processor": null,
        "decoder": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false,
                    "use_regex": false},
        "model": {"type": "BPE", "dropout": null, "unk_token": null,
                  "continuing_subword_prefix": null, "end_of_word_suffix": null,
                  "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
                  "vocab": vocab, "merges": []},
    });
    Tokenizer::from_bytes(json.to_string().as_bytes()).expect("the byte tokenizer")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn masks_keep_a_walk_inside_the_schema_until_it_may_stop() {
        let grammars = Grammars::new(&byte_tokenizer(), 260, &[256]).unwrap();
        let schema = json!({"type": "object", "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 99}},
                            "required": ["a"], "additionalProperties": false});
        let format = ResponseFormat::JsonSchema(schema);
        let mut c = grammars.constraint(&format).unwrap();
        let mut text = Vec::new();
        for step in 0.. {
            assert!(
                step < 64,
                "no end after {:?}",
                String::from_utf8_lossy(&text)
            );
            let mut logits = vec![0.0f32; 260];
            c.mask(&mut logits).unwrap();
            // The lowest allowed id: a deterministic walk through the grammar.
            let t = logits
                .iter()
                .position(|l| l.is_finite())
                .expect("a token allowed") as u32;
            if step == 0 {
                assert_eq!(t, b'{' as u32, "only an object may start");
                assert!(
                    logits[256].is_infinite(),
                    "no stop before the answer is complete"
                );
            }
            c.accept(t).unwrap();
            if t != 256 {
                text.push(t as u8);
            }
            if c.is_finished() {
                break;
            }
        }
        assert!(c.is_finished());
        let v: Value = serde_json::from_slice(&text).unwrap();
        assert!(v["a"].as_i64().is_some_and(|a| a <= 99), "{v}");
        assert_eq!(v.as_object().unwrap().len(), 1, "{v}");
        // A second request reuses the compiled grammar, from its start.
        let mut again = grammars.constraint(&format).unwrap();
        let mut logits = vec![0.0f32; 260];
        again.mask(&mut logits).unwrap();
        assert_eq!(logits.iter().filter(|l| l.is_finite()).count(), 1);
        // A schema the compiler refuses is the client's error.
        let bad = ResponseFormat::JsonSchema(json!({"type": "no-such-type"}));
        let e = grammars.constraint(&bad).err().unwrap();
        assert_eq!(e.param.as_deref(), Some("response_format"), "{}", e.message);
    }

    /// Chooses a token from the step, the text so far and the allowed ids.
    type Picker = dyn Fn(usize, &[u8], &[u32]) -> u32;

    /// Runs `c` to its end, taking at each step the allowed token `pick` chooses.
    fn walk(c: &mut GrammarConstraint, pick: &Picker) -> String {
        let mut text = Vec::new();
        for step in 0.. {
            assert!(
                step < 2000,
                "no end after {:?}",
                String::from_utf8_lossy(&text)
            );
            let mut logits = vec![0.0f32; 260];
            c.mask(&mut logits).unwrap();
            let allowed: Vec<u32> = (0..260u32)
                .filter(|&i| logits[i as usize].is_finite())
                .collect();
            let t = pick(step, &text, &allowed);
            c.accept(t).unwrap();
            if t < 256 {
                text.push(t as u8);
            }
            if c.is_finished() {
                break;
            }
        }
        String::from_utf8(text).unwrap()
    }

    /// Heads for the end: stop when allowed, else go on with a string mark or a marker
    /// begun, else open one; None when none of that is allowed.
    fn towards_end(text: &[u8], allowed: &[u32]) -> Option<u32> {
        if allowed.contains(&256) {
            return Some(256);
        }
        for mark in [&b"<|\"|>"[..], b"<tool_call|>"] {
            for k in (1..mark.len()).rev() {
                if text.ends_with(&mark[..k]) && allowed.contains(&(mark[k] as u32)) {
                    return Some(mark[k] as u32);
                }
            }
        }
        allowed.contains(&(b'<' as u32)).then_some(b'<' as u32)
    }

    #[test]
    fn forced_tool_calls_follow_the_argument_schemas() {
        use wgemma::session::ToolDeclaration;
        use wgemma::text::tool_grammar::tool_call_grammar;
        use wgemma::text::tools::parse_reply;
        let grammars = Grammars::new(&byte_tokenizer(), 260, &[256]).unwrap();
        let weather = ToolDeclaration::new(
            "get_weather",
            None,
            Some(json!({"type": "object", "properties": {
                "city": {"type": "string", "enum": ["Paris", "Rome"]},
                "days": {"type": "integer"},
                "note": {"type": "string"},
                "flags": {"type": "array", "items": {"type": "boolean"}},
                "metric": {"type": ["boolean", "null"]}},
                "required": ["city", "note"]})),
        )
        .unwrap();
        let time = ToolDeclaration::new("get_time", None, None).unwrap();
        let tools = [(0, &weather), (1, &time)];
        let lark = tool_call_grammar(
            &tools,
            true,
            &|i| format!("tools[{i}]"),
            grammars.special_markers(),
        )
        .unwrap();
        let mut c = grammars.tool_constraint(&lark).unwrap();
        // Pseudo-random walks, heading for the end more often as they go: each ends in
        // calls that parse and follow the schema.
        for seed in 0..12usize {
            let mut walker = grammars.tool_constraint(&lark).unwrap();
            let text = walk(&mut walker, &move |step, text, allowed| {
                let r = (step * 7919 + seed * 104729 + 13) % 1000;
                match towards_end(text, allowed) {
                    Some(t) if r < 300 + step => t,
                    _ => allowed[r % allowed.len()],
                }
            });
            let (content, calls) = parse_reply(&text);
            assert_eq!(content, "", "{text}");
            assert!(!calls.is_empty(), "{text}");
            for call in calls {
                match call.name.as_str() {
                    "get_time" => assert!(call.arguments.is_empty(), "{text}"),
                    "get_weather" => {
                        let a = &call.arguments;
                        assert!(
                            matches!(a["city"].as_str(), Some("Paris" | "Rome")),
                            "{text}"
                        );
                        assert!(a["note"].is_string(), "{text}");
                        assert!(a.get("days").is_none_or(|d| d.is_i64()), "{text}");
                        assert!(
                            a.get("flags").is_none_or(|f| f
                                .as_array()
                                .unwrap()
                                .iter()
                                .all(|b| b.is_boolean())),
                            "{text}"
                        );
                        assert!(
                            a.get("metric")
                                .is_none_or(|m| m.is_boolean() || m.is_null()),
                            "{text}"
                        );
                    }
                    other => panic!("{other}: {text}"),
                }
            }
        }
        // The first token can only open a call.
        let mut logits = vec![0.0f32; 260];
        c.mask(&mut logits).unwrap();
        let allowed: Vec<usize> = (0..260).filter(|&i| logits[i].is_finite()).collect();
        assert_eq!(allowed, vec![b'<' as usize]);
    }

    /// A request's one strict tool, `get_weather` of a city, Paris or Rome.
    fn strict_weather_tool() -> crate::openai::tools::ToolRequest {
        let body = json!({"tools": [{"type": "function", "function": {"name": "get_weather",
            "strict": true, "parameters": {"type": "object", "properties": {
                "city": {"type": "string", "enum": ["Paris", "Rome"]}}, "required": ["city"]}}}]});
        crate::openai::tools::ToolRequest::parse(body.as_object().unwrap())
            .unwrap()
            .unwrap()
    }

    #[test]
    fn strict_tools_under_auto_hold_a_call_to_its_schema_once_it_starts() {
        let grammars = Grammars::new(&byte_tokenizer(), 260, &[256]).unwrap();
        let tools = strict_weather_tool();
        assert!(tools.constrains(false));
        let lark = tools
            .grammar(None, grammars.special_markers())
            .unwrap()
            .unwrap();
        let mut c = grammars.tool_constraint(&lark).unwrap();
        let allowed = |c: &mut GrammarConstraint| allowed_ids(c, 260);
        // Free text first: any byte, or the end.
        let first = allowed(&mut c);
        assert!(
            first.contains(&(b'H' as u32)) && first.contains(&256),
            "{first:?}"
        );
        for b in "Hi <|tool_call>call:get_weather{city:<|\"|>".bytes() {
            assert!(allowed(&mut c).contains(&(b as u32)), "{}", b as char);
            c.accept(b as u32).unwrap();
        }
        // Inside the call: only the schema's values, and no end.
        assert_eq!(allowed(&mut c), vec![b'P' as u32, b'R' as u32]);
        for b in "Rome<|\"|>}<tool_call|>".bytes() {
            c.accept(b as u32).unwrap();
        }
        assert!(
            allowed(&mut c).contains(&256),
            "the reply may end after the call"
        );
    }

    /// The ids `c`'s mask allows over a vocabulary of `vocab` tokens.
    fn allowed_ids(c: &mut GrammarConstraint, vocab: usize) -> Vec<u32> {
        let mut logits = vec![0.0f32; vocab];
        c.mask(&mut logits).unwrap();
        (0..vocab as u32)
            .filter(|&i| logits[i as usize].is_finite())
            .collect()
    }

    /// [`byte_tokenizer`] with the call markers as special tokens after `<eos>`, as in
    /// Gemma 4's vocabulary: `<|tool_call>` 257, `<tool_call|>` 258, `<|"|>` 259,
    /// `<|tool_response>` 260.
    fn special_marker_tokenizer() -> Tokenizer {
        use wgemma::text::tool_markers::{
            STRING_MARK, TOOL_CALL_END, TOOL_CALL_START, TOOL_RESPONSE_START,
        };
        let mut json: Value = serde_json::from_str(&byte_tokenizer().to_json().unwrap()).unwrap();
        let markers = [
            TOOL_CALL_START,
            TOOL_CALL_END,
            STRING_MARK,
            TOOL_RESPONSE_START,
        ];
        for (id, content) in (257..).zip(markers) {
            json["added_tokens"]
                .as_array_mut()
                .unwrap()
                .push(json!({"id": id,
                "content": content, "single_word": false, "lstrip": false, "rstrip": false,
                "normalized": false, "special": true}));
        }
        Tokenizer::from_bytes(json.to_string().as_bytes()).unwrap()
    }

    #[test]
    fn strict_tools_under_auto_open_calls_with_a_special_token() {
        use wgemma::text::tools::parse_reply;
        let (call_start, call_end, mark, response) = (257, 258, 259, 260);
        let tokenizer = special_marker_tokenizer();
        let grammars = Grammars::new(&tokenizer, 262, &[256]).unwrap();
        let tools = strict_weather_tool();
        let lark = tools
            .grammar(None, grammars.special_markers())
            .unwrap()
            .unwrap();
        let start = grammars.tool_constraint(&lark).unwrap();
        let allowed = |c: &mut GrammarConstraint| allowed_ids(c, 262);
        // Text or the end, or the call's token; text spelling the marker out is refused.
        let mut text = grammars.tool_constraint(&lark).unwrap();
        let first = allowed(&mut text);
        assert!(
            first.contains(&(b'H' as u32)) && first.contains(&256) && first.contains(&call_start),
            "{first:?}"
        );
        for b in "Hi <|tool_call".bytes() {
            text.accept(b as u32).unwrap();
        }
        assert!(!allowed(&mut text).contains(&(b'>' as u32)));
        // Once the token opens a call, it follows the schema; the reply reads back as it.
        let opening: Vec<u32> = [call_start]
            .into_iter()
            .chain("call:get_weather{city:".bytes().map(u32::from))
            .chain([mark])
            .collect();
        let mut ids = opening.clone();
        ids.extend("Rome".bytes().map(u32::from));
        ids.extend([mark, b'}' as u32, call_end, response]);
        let mut c = start;
        for (i, &id) in ids.iter().enumerate() {
            if i == opening.len() {
                assert_eq!(allowed(&mut c), vec![b'P' as u32, b'R' as u32]);
            }
            assert!(allowed(&mut c).contains(&id), "token {id} at {i}");
            c.accept(id).unwrap();
        }
        assert!(c.is_finished() || allowed(&mut c) == vec![256]);
        let reply = tokenizer
            .decode_keeping(&ids, &tokenizer.tool_marker_ids())
            .unwrap();
        let (content, calls) = parse_reply(reply.trim_end_matches("<|tool_response>"));
        assert_eq!((content.as_str(), calls.len()), ("", 1), "{reply}");
        assert_eq!(calls[0].arguments["city"], "Rome", "{reply}");
        // An argument outside the schema is refused.
        let mut bad = grammars.tool_constraint(&lark).unwrap();
        for &id in &opening {
            bad.accept(id).unwrap();
        }
        assert!(!allowed(&mut bad).contains(&(b'O' as u32)));
        assert!(bad.accept(b'O' as u32).is_err());
    }
}
