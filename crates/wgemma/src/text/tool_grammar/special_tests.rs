//! The tool grammars over a vocabulary that holds the call markers as special tokens, as
//! Gemma 4's does: driven token id by token id, as a server's sampler drives them.

use super::*;
use llguidance::api::TopLevelGrammar;
use llguidance::toktrie::{ApproximateTokEnv, TokEnv, TokRxInfo, TokTrie, TokenId};
use llguidance::{Matcher, ParserFactory};
use serde_json::json;
use std::sync::Arc;

/// Single bytes (ids 0-255), then the markers as special tokens, then the end of text.
const CALL_START: TokenId = 256;
const CALL_END: TokenId = 257;
const RESPONSE_START: TokenId = 258;
const STRING_TOKEN: TokenId = 259;
const EOS: TokenId = 260;

/// Gemma 4's vocabulary: every marker a special token.
const GEMMA: SpecialMarkers = SpecialMarkers {
    call_start: true,
    call_end: true,
    tool_response: true,
    string: true,
};

fn special_env() -> TokEnv {
    let mut words: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).collect();
    for special in [
        TOOL_CALL_START,
        TOOL_CALL_END,
        TOOL_RESPONSE_START,
        crate::text::tool_markers::STRING_MARK,
        "<eos>",
    ] {
        let mut bytes = vec![TokTrie::SPECIAL_TOKEN_MARKER];
        bytes.extend(special.bytes());
        words.push(bytes);
    }
    let trie = TokTrie::from(&TokRxInfo::new(words.len() as u32, EOS), &words);
    Arc::new(ApproximateTokEnv::new(trie))
}

fn matcher(lark: &str) -> Matcher {
    let mut factory = ParserFactory::new_simple(&special_env()).unwrap();
    factory.quiet();
    let m = Matcher::new(factory.create_parser(TopLevelGrammar::from_lark(lark.to_string())));
    assert!(m.get_error().is_none(), "{:?}\n{lark}", m.get_error());
    m
}

fn allowed(m: &mut Matcher) -> Vec<TokenId> {
    let mask = m.compute_mask().unwrap();
    (0..=EOS).filter(|&t| mask.is_allowed(t)).collect()
}

/// Feeds `text`'s bytes, each `'` as the string mark's token; false at the first token the
/// grammar refuses.
fn feed(m: &mut Matcher, text: &str) -> bool {
    text.bytes().all(|b| {
        let token = if b == b'\'' {
            STRING_TOKEN
        } else {
            b as TokenId
        };
        m.consume_token(token).is_ok()
    })
}

fn weather() -> ToolDeclaration {
    ToolDeclaration::new(
        "weather",
        None,
        Some(
            json!({"type": "object", "properties": {"city": {"enum": ["Paris", "Rome"]}},
                    "required": ["city"]}),
        ),
    )
    .unwrap()
}

fn path(i: usize) -> String {
    format!("tools[{i}]")
}

#[test]
fn a_strict_call_opened_by_its_special_token_follows_its_schema() {
    let weather = weather();
    let lark = tool_calls_in_text_grammar(&[(0, &weather, true)], false, &path, GEMMA).unwrap();
    let start = matcher(&lark);

    // (a) Plain text, and an end, are still allowed; the call's token may open a call.
    let mut m = start.deep_clone();
    let first = allowed(&mut m);
    assert!(
        first.contains(&(b'H' as TokenId)) && first.contains(&CALL_START) && first.contains(&EOS),
        "{first:?}"
    );
    assert!(!first.contains(&CALL_END) && !first.contains(&STRING_TOKEN));
    assert!(feed(&mut m, "Hello, no tool needed.") && m.is_accepting().unwrap());
    // Text spelling the marker out opens nothing: it is refused.
    assert!(!feed(
        &mut start.deep_clone(),
        "a <|tool_call>call:weather{}"
    ));

    // (b) Once the token opens a call, only a call following the schema continues it.
    let mut m = start.deep_clone();
    assert!(feed(&mut m, "Let me look. "));
    m.consume_token(CALL_START).unwrap();
    assert_eq!(
        allowed(&mut m),
        vec![b'c' as TokenId],
        "the call's name comes first"
    );
    assert!(feed(&mut m, "call:weather{city:"));
    assert_eq!(
        allowed(&mut m),
        vec![STRING_TOKEN],
        "a string opens with its token"
    );
    assert!(feed(&mut m, "'"));
    assert_eq!(allowed(&mut m), vec![b'P' as TokenId, b'R' as TokenId]);
    assert!(feed(&mut m, "Rome'}"));
    assert_eq!(
        allowed(&mut m),
        vec![CALL_END],
        "the call closes with its token"
    );
    m.consume_token(CALL_END).unwrap();
    // After the call: the end, text, or the tool response's token (where a server stops).
    let after = allowed(&mut m);
    assert!(
        after.contains(&EOS)
            && after.contains(&RESPONSE_START)
            && after.contains(&(b' ' as TokenId)),
        "{after:?}"
    );
    assert!(!after.contains(&CALL_START), "one call in all: {after:?}");

    // (c) An argument outside the schema is refused, and so are a string mark spelled out
    // as text and a missing required argument.
    for bad in [
        "call:weather{city:'Oslo",
        "call:weather{city:<|\"|>Rome",
        "call:weather{}",
        "call:other{",
    ] {
        let mut m = start.deep_clone();
        m.consume_token(CALL_START).unwrap();
        assert!(!feed(&mut m, bad), "accepted {bad:?}\n{lark}");
    }
}

#[test]
fn parallel_calls_and_forced_calls_use_the_special_tokens() {
    let weather = weather();
    let lark = tool_calls_in_text_grammar(&[(0, &weather, true)], true, &path, GEMMA).unwrap();
    let mut m = matcher(&lark);
    for _ in 0..2 {
        m.consume_token(CALL_START).unwrap();
        assert!(feed(&mut m, "call:weather{city:'Paris'}"));
        m.consume_token(CALL_END).unwrap();
    }
    m.consume_token(RESPONSE_START).unwrap();
    assert!(m.is_accepting().unwrap());

    // A forced call: its first token is the call's, and it ends at the call or the tool
    // response's token.
    let forced = tool_call_grammar(&[(0, &weather)], false, &path, GEMMA).unwrap();
    let mut m = matcher(&forced);
    assert_eq!(allowed(&mut m), vec![CALL_START]);
    m.consume_token(CALL_START).unwrap();
    assert!(feed(&mut m, "call:weather{city:'Paris'}"));
    m.consume_token(CALL_END).unwrap();
    assert!(m.is_accepting().unwrap());
    assert_eq!(allowed(&mut m), vec![RESPONSE_START, EOS]);

    // Calls or an answer (a response format beside the tools): the call's token or the
    // answer's first byte.
    let either =
        tool_calls_or_answer_grammar(&[(0, &weather)], false, &path, GEMMA, "%json {}").unwrap();
    let first = allowed(&mut matcher(&either));
    assert!(
        first.contains(&CALL_START) && first.contains(&(b'{' as TokenId)),
        "{first:?}"
    );
    assert!(!first.contains(&(b'<' as TokenId)), "{first:?}");
}

#[test]
fn strings_keys_and_constants_use_the_string_marks_token() {
    let tool = ToolDeclaration::new(
        "note",
        None,
        Some(json!({"type": "object", "properties": {
            "title": {"type": "string", "maxLength": 3},
            "odd key": {"const": {"k": "v"}},
            "tags": {"type": "object", "additionalProperties": {"type": "string"}}},
            "required": ["title"]})),
    )
    .unwrap();
    let lark = tool_call_grammar(&[(0, &tool)], false, &path, GEMMA).unwrap();
    let m = matcher(&lark);
    let whole = |args: &str| {
        let mut m = m.deep_clone();
        m.consume_token(CALL_START).unwrap();
        feed(&mut m, &format!("call:note{args}"))
            && m.consume_token(CALL_END).is_ok()
            && m.is_accepting().unwrap()
    };
    for good in [
        "{title:''}",
        "{title:'abc','odd key':{k:'v'},tags:{a:'x','b c':''}}",
    ] {
        assert!(whole(good), "refused {good}\n{lark}");
    }
    for bad in [
        "{title:'abcd'}",
        "{title:'a','odd key':{k:'w'}}",
        "{title:<|\"|>a<|\"|>}",
        "{}",
    ] {
        assert!(!whole(bad), "accepted {bad}\n{lark}");
    }
}
