//! `POST /v1/responses` (the Responses API, issue 47) without a model: a request's items
//! become the chat request the chat endpoint serves (and its parser takes), a whole chat
//! answer becomes a response object, and a stream of chat chunks becomes the Responses
//! events in order, numbered.

use serde_json::{json, Map, Value};
use wgemma_server::openai::request::parse_chat;
use wgemma_server::openai::responses::{response_of, EventStream};
use wgemma_server::openai::responses_request::chat_request;

fn object(v: Value) -> Map<String, Value> {
    v.as_object().expect("an object").clone()
}

fn chat_of(v: Value) -> Map<String, Value> {
    chat_request(&object(v)).unwrap_or_else(|r| panic!("{}", r.message))
}

#[test]
fn input_items_become_the_chat_request() {
    let weather = json!({"type": "function", "name": "weather", "description": "now", "strict": true,
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}});
    let chat = chat_of(json!({
        "model": "m", "instructions": "Be brief.", "max_output_tokens": 20, "stream": true,
        "temperature": 0, "store": false, "include": [], "truncation": "disabled",
        "previous_response_id": null, "tools": [weather],
        "tool_choice": {"type": "function", "name": "weather"},
        "text": {"format": {"type": "json_schema", "name": "out", "strict": true,
                            "schema": {"type": "object"}}},
        "input": [
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Weather "},
                                                             {"type": "input_text", "text": "in Rome?"}]},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Looking."}]},
            {"type": "function_call", "call_id": "c1", "name": "weather", "arguments": "{\"city\": \"Rome\"}"},
            {"type": "function_call", "call_id": "c2", "name": "weather", "arguments": "{\"city\": \"Ostia\"}"},
            {"type": "function_call_output", "call_id": "c1", "output": "21"},
            {"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "19"}]},
            {"role": "user", "content": "Thanks"}]}));
    assert_eq!(chat["max_tokens"], 20);
    assert_eq!(chat["stream_options"], json!({"include_usage": true}));
    assert_eq!(chat["temperature"], 0);
    assert_eq!(
        chat["tools"],
        json!([{"type": "function", "function": {"name": "weather", "description": "now", "strict": true,
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])
    );
    assert_eq!(
        chat["tool_choice"],
        json!({"type": "function", "function": {"name": "weather"}})
    );
    assert_eq!(
        chat["response_format"],
        json!({"type": "json_schema", "json_schema": {"name": "out", "strict": true, "schema": {"type": "object"}}})
    );
    let messages = chat["messages"].as_array().unwrap();
    let roles: Vec<&str> = messages
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(
        roles,
        ["system", "user", "assistant", "tool", "tool", "user"]
    );
    assert_eq!(messages[0]["content"], "Be brief.");
    assert_eq!(messages[1]["content"], "Weather in Rome?");
    // The calls in a row join the assistant's text as one turn.
    assert_eq!(messages[2]["content"], "Looking.");
    let calls = messages[2]["tool_calls"].as_array().unwrap();
    assert_eq!(
        calls.iter().map(|c| &c["id"]).collect::<Vec<_>>(),
        ["c1", "c2"]
    );
    assert_eq!(calls[1]["function"]["arguments"], "{\"city\": \"Ostia\"}");
    assert_eq!(
        (&messages[4]["tool_call_id"], &messages[4]["content"]),
        (&json!("c2"), &json!("19"))
    );
    // The chat endpoint's own parser takes what the conversion writes.
    let body = Value::Object(chat).to_string();
    let parsed = parse_chat(body.as_bytes(), &["m"]).unwrap_or_else(|e| panic!("{}", e.message));
    assert!(parsed.sampling.tools.is_some() && parsed.sampling.response_format.is_some());
    // A bare string is one user message; a call with no text before it opens its turn.
    let chat = chat_of(json!({"input": [
        {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}]}));
    assert_eq!(chat["messages"][0]["role"], "assistant");
    assert_eq!(chat["messages"][0]["content"], Value::Null);
    let chat = chat_of(json!({"input": "hi"}));
    assert_eq!(chat["messages"], json!([{"role": "user", "content": "hi"}]));
}

#[test]
fn what_a_chat_request_cannot_carry_is_refused_by_name() {
    for (body, param) in [
        (json!({}), "input"),
        (json!({"input": 5}), "input"),
        (json!({"input": [5]}), "input[0]"),
        (
            json!({"input": [{"type": "web_search_call"}]}),
            "input[0].type",
        ),
        (
            json!({"input": [{"role": "tool", "content": "x"}]}),
            "input[0].role",
        ),
        (
            json!({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]}),
            "input[0].content[0]",
        ),
        (
            json!({"input": [{"type": "function_call", "call_id": "c", "name": "f"}]}),
            "input[0].arguments",
        ),
        (
            json!({"input": [{"type": "function_call_output", "call_id": "c"}]}),
            "input[0].output",
        ),
        (
            json!({"input": "x", "previous_response_id": "resp_1"}),
            "previous_response_id",
        ),
        (json!({"input": "x", "instructions": 3}), "instructions"),
        (
            json!({"input": "x", "tools": [{"type": "web_search"}]}),
            "tools[0].type",
        ),
        (json!({"input": "x", "tools": {}}), "tools"),
        (json!({"input": "x", "tool_choice": 1}), "tool_choice"),
        (
            json!({"input": "x", "text": {"verbosity": "low"}}),
            "text.verbosity",
        ),
        (
            json!({"input": "x", "text": {"format": {"type": "xml"}}}),
            "text.format",
        ),
        (json!({"input": "x", "background": true}), "background"),
        (
            json!({"input": "x", "prompt_cache_key": "k"}),
            "prompt_cache_key",
        ),
    ] {
        let refusal = chat_request(&object(body.clone())).expect_err(&body.to_string());
        assert_eq!(refusal.param, param, "{body}: {}", refusal.message);
        assert!(
            refusal.message.starts_with(param),
            "{body}: {}",
            refusal.message
        );
    }
}

fn completion(content: Value, calls: Value, finish: &str) -> Value {
    json!({"id": "chatcmpl-abc123", "object": "chat.completion", "created": 7, "model": "m",
           "choices": [{"index": 0, "finish_reason": finish,
                        "message": {"role": "assistant", "content": content, "tool_calls": calls}}],
           "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}})
}

#[test]
fn a_whole_chat_answer_becomes_a_response_object() {
    let request =
        object(json!({"input": "x", "instructions": "Be brief.", "max_output_tokens": 9}));
    let calls = json!([{"id": "call_1", "type": "function",
                        "function": {"name": "weather", "arguments": "{\"city\":\"Rome\"}"}}]);
    let r = response_of(
        &completion(json!("Looking."), calls, "tool_calls"),
        &request,
    );
    assert_eq!(
        (&r["id"], &r["object"], &r["status"]),
        (
            &json!("resp_abc123"),
            &json!("response"),
            &json!("completed")
        )
    );
    assert_eq!((&r["created_at"], &r["model"]), (&json!(7), &json!("m")));
    let output = r["output"].as_array().unwrap();
    assert_eq!(output.len(), 2);
    assert_eq!(output[0]["type"], "message");
    assert_eq!(output[0]["id"], "msg_abc1230");
    assert_eq!(output[0]["content"][0]["text"], "Looking.");
    assert_eq!(
        output[1],
        json!({"type": "function_call", "id": "fc_abc1230", "call_id": "call_1", "name": "weather",
               "arguments": "{\"city\":\"Rome\"}", "status": "completed"})
    );
    assert_eq!(
        r["usage"],
        json!({"input_tokens": 5, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 3,
               "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 8})
    );
    // The request's settings are echoed, with OpenAI's defaults for those not given.
    assert_eq!(
        (&r["instructions"], &r["max_output_tokens"]),
        (&json!("Be brief."), &json!(9))
    );
    assert_eq!(
        (&r["tools"], &r["tool_choice"], &r["parallel_tool_calls"]),
        (&json!([]), &json!("auto"), &json!(true))
    );
    assert_eq!(r["text"], json!({"format": {"type": "text"}}));
    // Cut by the budget: incomplete, and an empty text is no message item.
    let r = response_of(&completion(json!(""), Value::Null, "length"), &request);
    assert_eq!(r["status"], "incomplete");
    assert_eq!(
        r["incomplete_details"],
        json!({"reason": "max_output_tokens"})
    );
    assert_eq!(r["output"], json!([]));
}

fn chunk(delta: Value, finish: Option<&str>) -> Value {
    json!({"id": "chatcmpl-xyz", "object": "chat.completion.chunk", "created": 3, "model": "m",
           "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
}

/// The events of `chunks` then the stream's end, checked for numbering.
fn events_of(chunks: &[Value]) -> Vec<(String, Value)> {
    let mut stream = EventStream::new(object(json!({"input": "x"})));
    let mut events: Vec<(String, Value)> = chunks.iter().flat_map(|c| stream.on_chunk(c)).collect();
    events.extend(stream.finish());
    for (i, (kind, v)) in events.iter().enumerate() {
        assert_eq!(v["sequence_number"], i, "{kind}");
        assert_eq!(v["type"], kind.as_str());
    }
    events
}

#[test]
fn streamed_chunks_become_the_responses_events() {
    let events = events_of(&[
        chunk(json!({"role": "assistant", "content": ""}), None),
        chunk(json!({"content": "Look"}), None),
        chunk(json!({"content": "ing."}), None),
        chunk(
            json!({"tool_calls": [{"index": 0, "id": "call_9", "type": "function",
                                       "function": {"name": "weather", "arguments": ""}}]}),
            None,
        ),
        chunk(
            json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"city\":"}}]}),
            None,
        ),
        chunk(
            json!({"tool_calls": [{"index": 0, "function": {"arguments": "\"Rome\"}"}}]}),
            None,
        ),
        chunk(json!({}), Some("tool_calls")),
        json!({"id": "chatcmpl-xyz", "created": 3, "model": "m", "choices": [],
               "usage": {"prompt_tokens": 4, "completion_tokens": 6}}),
    ]);
    let kinds: Vec<&str> = events.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        kinds,
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.delta",
            "response.output_text.delta",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.output_item.added",
            "response.function_call_arguments.delta",
            "response.function_call_arguments.delta",
            "response.function_call_arguments.done",
            "response.output_item.done",
            "response.completed",
        ]
    );
    let v = |kind: &str| &events.iter().find(|(k, _)| k == kind).unwrap().1;
    assert_eq!(v("response.created")["response"]["status"], "in_progress");
    assert_eq!(v("response.created")["response"]["id"], "resp_xyz");
    assert_eq!(v("response.output_text.done")["text"], "Looking.");
    let args = v("response.function_call_arguments.done");
    assert_eq!(
        (&args["name"], &args["arguments"], &args["output_index"]),
        (&json!("weather"), &json!("{\"city\":\"Rome\"}"), &json!(1))
    );
    let done = &v("response.completed")["response"];
    assert_eq!(done["status"], "completed");
    assert_eq!(done["output"][0]["content"][0]["text"], "Looking.");
    assert_eq!(done["output"][1]["call_id"], "call_9");
    assert_eq!(
        (
            &done["usage"]["input_tokens"],
            &done["usage"]["output_tokens"]
        ),
        (&json!(4), &json!(6))
    );
    // A reply cut by the budget ends `response.incomplete`, its items incomplete.
    let cut = events_of(&[
        chunk(json!({"content": "Lo"}), None),
        chunk(json!({}), Some("length")),
    ]);
    let (kind, last) = cut.last().unwrap();
    assert_eq!(kind, "response.incomplete");
    assert_eq!(last["response"]["output"][0]["status"], "incomplete");
    // An error is its own event.
    let mut stream = EventStream::new(object(json!({"input": "x"})));
    stream.on_chunk(&chunk(json!({"content": "a"}), None));
    let (kind, e) = stream.error(json!({"code": null, "message": "m", "param": "tools"}));
    assert_eq!((kind.as_str(), &e["param"]), ("error", &json!("tools")));
}
