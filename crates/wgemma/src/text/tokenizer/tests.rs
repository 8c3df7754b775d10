use super::*;

fn tiny() -> Tokenizer {
    Tokenizer::from_bytes(tiny_tokenizer_json(&["hello", "world", "user", "model", " "]).as_bytes())
        .unwrap()
}

#[test]
fn kept_special_tokens_are_written_as_text() {
    let t = tiny();
    let id = |s: &str| t.token_id(s).unwrap();
    let ids = [
        id("hello"),
        id(TURN_START),
        id("world"),
        id(TURN_END),
        id(TURN_START),
    ];
    assert_eq!(t.decode(&ids).unwrap(), "helloworld");
    assert_eq!(
        t.decode_keeping(&ids, &[id(TURN_START)]).unwrap(),
        "hello<|turn>world<|turn>"
    );
    let mut s = TextStream::keeping(vec![id(TURN_START)]);
    let pieces: Vec<String> = ids.iter().filter_map(|&i| s.push(&t, i).unwrap()).collect();
    assert_eq!(pieces, vec!["hello", "<|turn>", "world", "<|turn>"]);
    // This vocabulary has no tool markers.
    assert!(t.tool_marker_ids().is_empty());
}

#[test]
fn chat_format_and_stop_ids() {
    let t = tiny();
    let ids = t.encode_chat("hello world").unwrap();
    let id = |s: &str| t.token_id(s).unwrap();
    assert_eq!(
        ids,
        vec![
            id(BOS),
            id(TURN_START),
            id("user"),
            id("\n"),
            id("hello"),
            id(" "),
            id("world"),
            id(TURN_END),
            id("\n"),
            id(TURN_START),
            id("model"),
            id("\n")
        ]
    );
    assert_eq!(t.stop_ids(&[1]), vec![1, id(TURN_END)]);
    assert_eq!(
        t.encode_prompt("hello").unwrap(),
        vec![id(BOS), id("hello")]
    );
}

#[test]
fn stream_emits_new_text_only() {
    let t = tiny();
    let mut s = TextStream::new();
    let hello = t.token_id("hello").unwrap();
    let space = t.token_id(" ").unwrap();
    assert_eq!(s.push(&t, hello).unwrap().as_deref(), Some("hello"));
    assert_eq!(s.push(&t, space).unwrap().as_deref(), Some(" "));
    assert_eq!(s.push(&t, t.token_id(TURN_END).unwrap()).unwrap(), None);
    assert_eq!(s.text(&t).unwrap(), "hello ");
}

#[test]
fn malformed_tokenizer_json_is_an_error_not_a_panic() {
    // A truncated file made the tokenizers crate panic (issue 17, item 2).
    for (bad, needle) in [
        (&b"{\"decoder\": {"[..], "valid JSON"),
        (b"[1, 2]", "a JSON object"),
        (b"{\"model\": 3}", "`model`"),
        (b"{}", "`model`"),
        (b"\xff\xfe", "valid JSON"),
    ] {
        let err = Tokenizer::from_bytes(bad).err().unwrap().to_string();
        assert!(err.contains(needle), "{err}");
    }
    let caught = quietly_catch(|| -> u32 { panic!("inside") });
    assert_eq!(caught, Err("inside".to_string()));
    assert_eq!(quietly_catch(|| 7), Ok(7));
}

#[test]
fn prompt_ids_parse_or_name_the_bad_item() {
    assert_eq!(parse_prompt_ids("5, 17,9").unwrap(), vec![5, 17, 9]);
    assert!(parse_prompt_ids("")
        .unwrap_err()
        .to_string()
        .contains("at least one"));
    let err = parse_prompt_ids("1,x,3").unwrap_err().to_string();
    assert!(err.contains("#2") && err.contains("\"x\""), "{err}");
    let err = parse_prompt_ids("4294967296").unwrap_err().to_string();
    assert!(err.contains("4294967295"), "{err}");
}

#[test]
fn truncation_and_padding_are_off_for_prompts() {
    // A tokenizer.json with truncation and padding cut or padded every prompt (issue 30).
    let mut json: serde_json::Value =
        serde_json::from_str(&tiny_tokenizer_json(&["hello", "world", " "])).unwrap();
    json["truncation"] = serde_json::json!({"direction": "Right", "max_length": 2,
        "strategy": "LongestFirst", "stride": 0});
    json["padding"] = serde_json::json!({"strategy": {"Fixed": 16}, "direction": "Right",
        "pad_to_multiple_of": null, "pad_id": 0, "pad_type_id": 0, "pad_token": "<pad>"});
    let t = Tokenizer::from_bytes(json.to_string().as_bytes()).unwrap();
    assert_eq!(t.encode("hello world hello").unwrap().len(), 5);
}

#[test]
fn special_tokens_in_text_can_be_inert() {
    let t = tiny();
    let text = "hello<|turn>";
    assert!(t.has_marker(text) && !t.has_marker("hello world"));
    assert_eq!(t.first_marker(text), Some(TURN_START));
    let active = t.encode(text).unwrap();
    let inert = t.encode_inert(text).unwrap();
    let turn = t.token_id(TURN_START).unwrap();
    assert!(
        active.contains(&turn) && !inert.contains(&turn),
        "{inert:?}"
    );
    // Text without one is encoded as before.
    assert_eq!(
        t.encode_inert("hello world").unwrap(),
        t.encode("hello world").unwrap()
    );
    // The longest token here is `<|turn>` (7 bytes): 1 KB of text is >= 36 tokens.
    assert_eq!(t.min_tokens(1000), 1000 / 28);
}

#[test]
fn non_special_turn_tokens_the_format_writes_are_inert_in_content() {
    let mut json: serde_json::Value =
        serde_json::from_str(&tiny_tokenizer_json(&["hello", "system"])).unwrap();
    for t in json["added_tokens"].as_array_mut().unwrap() {
        t["special"] = false.into();
    }
    let mut t = Tokenizer::from_bytes(json.to_string().as_bytes()).unwrap();
    let turn = t.token_id(TURN_START).unwrap();
    let text = "hello\n<|turn>system";
    // The tokenizers crate matches a non-special added token in any text.
    assert!(t.encode_inert(text).unwrap().contains(&turn));
    t.mark_format_tokens(&BUILTIN_FORMAT_MARKERS).unwrap();
    assert_eq!(t.first_marker(text), Some(TURN_START));
    let inert = t.encode_inert(text).unwrap();
    assert!(!inert.contains(&turn), "{inert:?}");
    assert!(t.encode(text).unwrap().contains(&turn));
}

#[test]
fn bad_tokenizer_and_missing_chat_tokens_are_errors() {
    assert!(Tokenizer::from_bytes(b"{}").is_err());
    let mut json: serde_json::Value = serde_json::from_str(&tiny_tokenizer_json(&["a"])).unwrap();
    json["added_tokens"] = serde_json::json!([]);
    json["model"]["vocab"]
        .as_object_mut()
        .unwrap()
        .remove(TURN_START);
    let t = Tokenizer::from_bytes(json.to_string().as_bytes()).unwrap();
    let err = t.encode_chat("a").unwrap_err().to_string();
    assert!(err.contains(TURN_START), "{err}");
}
