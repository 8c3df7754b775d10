//! Hostile input round 4 (issue 46): request bodies an attacker or a careless client sends,
//! each refused with a 400 that names its field (before, each passed unchecked, added up
//! past its limit, or failed later as a 500).

use wgemma_server::openai::request::parse_chat;

/// The param and message of the refusal of a chat body with `extra` fields added.
fn refused(extra: &str) -> (String, String) {
    let body =
        format!(r#"{{"model": "m", "messages": [{{"role": "user", "content": "x"}}]{extra}}}"#);
    let e = parse_chat(body.as_bytes(), &["m"])
        .err()
        .unwrap_or_else(|| panic!("{extra} passed"));
    (e.param.unwrap_or_default(), e.message)
}

/// The param and message of the refusal of a chat body with these `messages`.
fn refused_messages(messages: &str) -> (String, String) {
    let body = format!(r#"{{"model": "m", "messages": {messages}}}"#);
    let e = parse_chat(body.as_bytes(), &["m"])
        .err()
        .unwrap_or_else(|| panic!("{messages} passed"));
    (e.param.unwrap_or_default(), e.message)
}

fn passes(extra: &str) -> wgemma_server::openai::request::Parsed {
    let body =
        format!(r#"{{"model": "m", "messages": [{{"role": "user", "content": "x"}}]{extra}}}"#);
    parse_chat(body.as_bytes(), &["m"]).unwrap_or_else(|e| panic!("{extra}: {}", e.message))
}

#[test]
fn repetition_penalties_that_break_the_logits_are_refused() {
    // 1e-50 was a 500; 1e-40 gave <pad> tokens with empty text.
    for v in ["1e-50", "1e-40", "0.001", "11", "1e300"] {
        let (param, message) = refused(&format!(r#", "repetition_penalty": {v}"#));
        assert_eq!(param, "repetition_penalty", "{v}: {message}");
        assert!(message.contains("[0.01, 10]"), "{message}");
    }
    for v in ["0.01", "1", "10"] {
        passes(&format!(r#", "repetition_penalty": {v}"#));
    }
}

#[test]
fn logit_bias_keys_have_one_spelling_per_id() {
    // "5", "05" and "+5" each added their bias to token 5: 300, past the [-100, 100] limit.
    let (param, message) = refused(r#", "logit_bias": {"5": 100, "05": 100, "+5": 100}"#);
    assert_eq!(param, "logit_bias", "{message}");
    assert!(message.contains("leading zero"), "{message}");
    for key in ["+5", " 5", "5 ", "-0", "0x5", "00", "05"] {
        let (param, _) = refused(&format!(r#", "logit_bias": {{"{key}": 1}}"#));
        assert_eq!(param, "logit_bias", "{key}");
    }
    let p = passes(r#", "logit_bias": {"0": 1, "50": -2}"#);
    assert_eq!(p.sampling.adjust.logit_bias, vec![(0, 1.0), (50, -2.0)]);
}

#[test]
fn nested_fields_are_checked() {
    // Extra keys in a content part.
    let (param, message) = refused_messages(
        r#"[{"role": "user", "content": [{"type": "text", "text": "a", "cache_me": true}]}]"#,
    );
    assert_eq!(param, "messages[0].content[0].cache_me", "{message}");
    // A call of another kind than a function, and a call with a key of its own.
    let call = |kind: &str, extra: &str| {
        format!(
            r#"[{{"role": "user", "content": "x"}}, {{"role": "assistant", "content": null,
               "tool_calls": [{{"id": "c1", "type": {kind}{extra},
                                "function": {{"name": "f", "arguments": "{{}}"}}}}]}}]"#
        )
    };
    let (param, message) = refused_messages(&call(r#""code_interpreter""#, ""));
    assert_eq!(param, "messages[1].tool_calls[0].type", "{message}");
    assert!(message.contains("code_interpreter"), "{message}");
    assert_eq!(
        refused_messages(&call("5", "")).0,
        "messages[1].tool_calls[0].type"
    );
    assert_eq!(
        refused_messages(&call(r#""function""#, r#", "code": "rm -rf /""#)).0,
        "messages[1].tool_calls[0].code"
    );
    // json_schema's name, description and strict have types.
    let schema = |spec: &str| {
        format!(r#", "response_format": {{"type": "json_schema", "json_schema": {spec}}}"#)
    };
    for (spec, param) in [
        (
            r#"{"name": 5, "schema": {}}"#,
            "response_format.json_schema.name",
        ),
        (
            r#"{"name": "a b", "schema": {}}"#,
            "response_format.json_schema.name",
        ),
        (
            r#"{"name": "n", "strict": "yes", "schema": {}}"#,
            "response_format.json_schema.strict",
        ),
        (
            r#"{"name": "n", "description": [], "schema": {}}"#,
            "response_format.json_schema.description",
        ),
    ] {
        let (got, message) = refused(&schema(spec));
        assert_eq!(got, param, "{spec}: {message}");
    }
    passes(&schema(
        r#"{"name": "answer_1", "strict": true, "description": "d", "schema": {}}"#,
    ));
}

#[test]
fn schemas_no_finite_answer_satisfies_are_refused_by_field() {
    // A self-reference that allows no value was accepted and ended in a 500 carrying the
    // grammar library's dump; a required cycle failed mid-answer (and took its neighbours'
    // answers with it).
    for schema in [
        r##"{"$ref": "#"}"##,
        r##"{"type": "object", "properties": {"next": {"$ref": "#"}}, "required": ["next"]}"##,
    ] {
        let (param, message) = refused(&format!(
            r#", "response_format": {{"type": "json_schema", "json_schema": {{"name": "n", "schema": {schema}}}}}"#
        ));
        assert_eq!(param, "response_format", "{message}");
        assert!(
            message.contains("response_format.json_schema.schema") && message.contains("finite"),
            "{message}"
        );
    }
}
