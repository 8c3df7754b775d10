use super::*;
use serde_json::json;

fn call(name: &str, args: Value) -> ToolCall {
    ToolCall {
        id: None,
        name: name.into(),
        arguments: args.as_object().unwrap().clone(),
    }
}

#[test]
fn calls_render_in_gemma_notation_and_parse_back() {
    let c = call(
        "get_weather",
        json!({"city": "Paris, \"France\" {x}", "days": 3, "metric": true, "x": null,
               "hours": [1, 2.5, -3e2], "opts": {"a b": "c", "n": {"d": []}}}),
    );
    let text = render_call(&c);
    assert!(text.starts_with("<|tool_call>call:get_weather{"), "{text}");
    assert!(
        text.contains(r#"city:<|"|>Paris, "France" {x}<|"|>"#),
        "{text}"
    );
    assert!(text.contains(r#"<|"|>a b<|"|>:<|"|>c<|"|>"#), "{text}");
    let (content, calls) = parse_reply(&format!("Let me look.{text}"));
    assert_eq!(content, "Let me look.");
    assert_eq!(calls, vec![c.clone()]);
    // Two calls, whitespace and JSON-quoted strings as models write them.
    let (content, calls) = parse_reply(
        "<|tool_call>call:f{ a : \"x\\\"y\" , b:[ 1 ,2 ] }<tool_call|>\
         <|tool_call>call:g{}<tool_call|>",
    );
    assert_eq!(content, "");
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[0].arguments["a"], json!("x\"y"));
    assert_eq!(calls[0].arguments["b"], json!([1, 2]));
    assert_eq!(calls[1], call("g", json!({})));
}

#[test]
fn declarations_and_responses_render() {
    let d = ToolDeclaration::new(
        "get_weather",
        Some("Weather now"),
        Some(
            json!({"type": "object", "properties": {"city": {"type": "string"}},
                    "required": ["city"]}),
        ),
    )
    .unwrap();
    // Key order is the map's (insertion or sorted, by serde_json's features).
    let text = render_declaration(&d);
    assert!(
        text.starts_with(
            "<|tool>declaration:get_weather{description:<|\"|>Weather now<|\"|>,parameters:{"
        ),
        "{text}"
    );
    assert!(text.ends_with("}}<tool|>"), "{text}");
    for part in [
        "type:<|\"|>OBJECT<|\"|>",
        "properties:{city:{type:<|\"|>STRING<|\"|>}}",
        "required:[<|\"|>city<|\"|>]",
    ] {
        assert!(text.contains(part), "{part} in {text}");
    }
    let r = ToolResponse {
        name: "get_weather".into(),
        response: json!("sunny"),
    };
    assert_eq!(
        render_response(&r),
        "<|tool_response>response:get_weather{value:<|\"|>sunny<|\"|>}<tool_response|>"
    );
    let r = ToolResponse {
        name: "f".into(),
        response: json!({"t": 21}),
    };
    assert_eq!(
        render_response(&r),
        "<|tool_response>response:f{t:21}<tool_response|>"
    );
    for bad in ["", "a b", "x<y", &"n".repeat(65)] {
        let e = ToolDeclaration::new(bad, None, None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("tool name"), "{e}");
    }
    let e = ToolDeclaration::new("f", None, Some(json!([1])))
        .unwrap_err()
        .to_string();
    assert!(e.contains("parameters"), "{e}");
    // HF's shapes, for a checkpoint's template.
    assert_eq!(d.to_template_value()["function"]["name"], "get_weather");
    let hf = serde_json::to_value(call("f", json!({"a": 1}))).unwrap();
    assert_eq!(
        hf,
        json!({"type": "function", "function": {"name": "f", "arguments": {"a": 1}}})
    );
    let back: ToolCall = serde_json::from_value(hf).unwrap();
    assert_eq!(back, call("f", json!({"a": 1})));
}

#[test]
fn streamed_pieces_hold_back_only_what_may_be_a_call() {
    let c = call("f", json!({"q": "a<b", "n": 1}));
    let text = format!("Hi <there>{} bye <|tool", render_call(&c));
    // Fed one character at a time, the pieces join to the same reply.
    let mut p = ToolCallParser::new();
    let mut pieces = Vec::new();
    for ch in text.chars() {
        let got = p.feed(&ch.to_string());
        // Text never includes a marker's beginning that may still complete.
        for piece in &got {
            if let ReplyPiece::Text(t) = piece {
                assert!(!t.contains("<|tool_call"), "{t}");
            }
        }
        pieces.extend(got);
    }
    pieces.extend(p.finish());
    let mut joined = String::new();
    let mut calls = Vec::new();
    for piece in pieces {
        match piece {
            ReplyPiece::Text(t) => joined.push_str(&t),
            ReplyPiece::Call(c) => calls.push(c),
        }
    }
    assert_eq!(joined, "Hi <there> bye <|tool");
    assert_eq!(calls, vec![c]);
}

#[test]
fn malformed_calls_stay_text_without_panicking() {
    let deep = format!(
        "<|tool_call>call:f{{a:{}1{}}}<tool_call|>",
        "[".repeat(500),
        "]".repeat(500)
    );
    for bad in [
        "<|tool_call>get_weather{}<tool_call|>",
        "<|tool_call>call:bad name{}<tool_call|>",
        "<|tool_call>call:f{a:<|\"|>open}<tool_call|>",
        "<|tool_call>call:f{a:1,}<tool_call|>",
        "<|tool_call>call:f{a:1} trailing<tool_call|>",
        "<|tool_call>call:f{a:tru}<tool_call|>",
        "<|tool_call>call:f{:1}<tool_call|>",
        "<|tool_call>call:f{a:\"x}<tool_call|>",
        "<|tool_call>call:f[1]<tool_call|>",
        "<|tool_call>call:f{a:1}",
        "<|tool_call>",
        deep.as_str(),
    ] {
        let (content, calls) = parse_reply(bad);
        assert!(calls.is_empty(), "{bad}: {calls:?}");
        assert_eq!(content, bad);
    }
    // A bad block does not hide a good one after it.
    let (content, calls) =
        parse_reply("<|tool_call>call:f{a:}<tool_call|>ok<|tool_call>call:g{}<tool_call|>");
    assert_eq!(content, "<|tool_call>call:f{a:}<tool_call|>ok");
    assert_eq!(calls, vec![call("g", json!({}))]);
}

#[test]
fn an_open_call_gives_its_arguments_so_far() {
    let mut parser = ToolCallParser::new();
    parser.feed("Hi <|tool_call>call:f{a:1.50,b:<|\"|>x");
    let open = parser.open_call().unwrap();
    assert_eq!(
        (open.name.as_str(), open.arguments.as_str()),
        ("f", r#"{"a":1.5,"b":"x"#)
    );
    let pieces = parser.feed("y<|\"|>}<tool_call|>");
    let [ReplyPiece::Call(c)] = &pieces[..] else {
        panic!("{pieces:?}")
    };
    // The whole call's arguments continue what the open call gave.
    assert_eq!(
        Value::Object(c.arguments.clone()).to_string(),
        r#"{"a":1.5,"b":"xy"}"#
    );
    assert_eq!(parser.open_call(), None);
    // Cut short, the open call comes back as far as it was written, never as text.
    parser.feed("ok <|tool_call>call:g{n:1");
    assert_eq!(
        parser.finish_cut(),
        (
            Vec::new(),
            Some(super::super::tool_json::PartialCall {
                name: "g".into(),
                arguments: r#"{"n":"#.into()
            })
        )
    );
    parser.feed("<|tool_call>cal");
    assert_eq!(parser.finish_cut(), (Vec::new(), None));
}
