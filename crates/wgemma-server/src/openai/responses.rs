//! The chat endpoint's answers as the Responses API's (`POST /v1/responses`): a whole chat
//! completion as a `response` object, and a stream of chat chunks as the Responses events
//! (`response.created`, `response.output_item.added`, `response.output_text.delta`,
//! `response.function_call_arguments.delta`, ..., `response.completed`), each with its
//! `sequence_number`. The request side is [`super::responses_request`].

use serde_json::{json, Map, Value};

/// What the response object repeats from the request.
const ECHOED: [&str; 7] = [
    "instructions",
    "tools",
    "tool_choice",
    "temperature",
    "top_p",
    "max_output_tokens",
    "parallel_tool_calls",
];

/// Responses usage from a chat `usage` object.
fn usage(chat: Option<&Value>) -> Value {
    let count = |k: &str| {
        chat.and_then(|u| u.get(k))
            .and_then(Value::as_u64)
            .unwrap_or(0)
    };
    json!({
        "input_tokens": count("prompt_tokens"),
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": count("completion_tokens"),
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": count("prompt_tokens") + count("completion_tokens"),
    })
}

/// The response object around `output` (status from the chat finish reason).
fn response(
    id: &str,
    created: u64,
    model: &str,
    request: &Map<String, Value>,
    output: Vec<Value>,
    finish: Option<&str>,
    chat_usage: Option<&Value>,
) -> Value {
    let (status, incomplete) = match finish {
        None => ("in_progress", Value::Null),
        Some("length") => ("incomplete", json!({"reason": "max_output_tokens"})),
        Some(_) => ("completed", Value::Null),
    };
    let mut r = json!({
        "id": id, "object": "response", "created_at": created, "status": status,
        "error": null, "incomplete_details": incomplete, "model": model, "output": output,
        "previous_response_id": null, "store": false, "truncation": "disabled",
        "text": request.get("text").cloned().unwrap_or(json!({"format": {"type": "text"}})),
        "metadata": {}, "reasoning": {"effort": null, "summary": null},
        "usage": if finish.is_some() { usage(chat_usage) } else { Value::Null },
    });
    for key in ECHOED {
        r[key] = request.get(key).cloned().unwrap_or(Value::Null);
    }
    if r["tools"].is_null() {
        r["tools"] = json!([]);
    }
    if r["tool_choice"].is_null() {
        r["tool_choice"] = json!("auto");
    }
    if r["parallel_tool_calls"].is_null() {
        r["parallel_tool_calls"] = json!(true);
    }
    r
}

fn message_item(id: &str, text: &str, status: &str) -> Value {
    json!({"type": "message", "id": id, "status": status, "role": "assistant",
           "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]})
}

fn call_item(id: &str, call_id: &str, name: &str, arguments: &str, status: &str) -> Value {
    json!({"type": "function_call", "id": id, "call_id": call_id, "name": name,
           "arguments": arguments, "status": status})
}

/// The ids of a response's items: `msg_`/`fc_` and the chat completion's random part.
fn item_id(prefix: &str, completion_id: &str, index: usize) -> String {
    let random = completion_id.rsplit('-').next().unwrap_or(completion_id);
    format!("{prefix}_{random}{index}")
}

fn response_id(completion_id: &str) -> String {
    format!(
        "resp_{}",
        completion_id.rsplit('-').next().unwrap_or(completion_id)
    )
}

/// A whole chat completion as a response object.
pub fn response_of(completion: &Value, request: &Map<String, Value>) -> Value {
    let chat_id = completion["id"].as_str().unwrap_or("");
    let choice = &completion["choices"][0];
    let finish = choice["finish_reason"].as_str().unwrap_or("stop");
    let status = if finish == "length" {
        "incomplete"
    } else {
        "completed"
    };
    let mut output = Vec::new();
    if let Some(text) = choice["message"]["content"]
        .as_str()
        .filter(|t| !t.is_empty())
    {
        output.push(message_item(&item_id("msg", chat_id, 0), text, status));
    }
    for (i, call) in choice["message"]["tool_calls"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        output.push(call_item(
            &item_id("fc", chat_id, i),
            call["id"].as_str().unwrap_or(""),
            call["function"]["name"].as_str().unwrap_or(""),
            call["function"]["arguments"].as_str().unwrap_or(""),
            status,
        ));
    }
    response(
        &response_id(chat_id),
        completion["created"].as_u64().unwrap_or(0),
        completion["model"].as_str().unwrap_or(""),
        request,
        output,
        Some(finish),
        completion.get("usage"),
    )
}

/// An item being streamed: the message's text or a call's arguments so far.
enum Open {
    Message {
        id: String,
        text: String,
    },
    Call {
        id: String,
        call_id: String,
        name: String,
        arguments: String,
    },
}

/// Chat chunks in, Responses events out.
pub struct EventStream {
    request: Map<String, Value>,
    id: String,
    chat_id: String,
    created: u64,
    model: String,
    sequence: u64,
    output: Vec<Value>,
    open: Option<Open>,
    finish: Option<String>,
    usage: Option<Value>,
}

impl EventStream {
    pub fn new(request: Map<String, Value>) -> EventStream {
        EventStream {
            request,
            id: String::new(),
            chat_id: String::new(),
            created: 0,
            model: String::new(),
            sequence: 0,
            output: Vec::new(),
            open: None,
            finish: None,
            usage: None,
        }
    }

    fn event(&mut self, kind: &str, mut body: Value) -> (String, Value) {
        body["type"] = json!(kind);
        body["sequence_number"] = json!(self.sequence);
        self.sequence += 1;
        (kind.to_string(), body)
    }

    fn snapshot(&self, finish: Option<&str>) -> Value {
        response(
            &self.id,
            self.created,
            &self.model,
            &self.request,
            self.output.clone(),
            finish,
            self.usage.as_ref(),
        )
    }

    /// An `error` event with `fields` (the stream then ends without `response.completed`).
    pub fn error(&mut self, fields: Value) -> (String, Value) {
        self.event("error", fields)
    }

    /// The events one chat chunk gives.
    pub fn on_chunk(&mut self, chunk: &Value) -> Vec<(String, Value)> {
        let mut events = Vec::new();
        if self.id.is_empty() {
            self.chat_id = chunk["id"].as_str().unwrap_or("").to_string();
            self.id = response_id(&self.chat_id);
            self.created = chunk["created"].as_u64().unwrap_or(0);
            self.model = chunk["model"].as_str().unwrap_or("").to_string();
            let r = self.snapshot(None);
            events.push(self.event("response.created", json!({"response": r})));
            let r = self.snapshot(None);
            events.push(self.event("response.in_progress", json!({"response": r})));
        }
        if let Some(u) = chunk.get("usage").filter(|u| !u.is_null()) {
            self.usage = Some(u.clone());
        }
        let Some(choice) = chunk["choices"].get(0) else {
            return events;
        };
        let delta = &choice["delta"];
        if let Some(text) = delta["content"].as_str().filter(|t| !t.is_empty()) {
            if !matches!(self.open, Some(Open::Message { .. })) {
                events.extend(self.close());
                let id = item_id("msg", &self.chat_id, self.output.len());
                let index = self.output.len();
                events.push(self.event("response.output_item.added", json!({
                    "output_index": index, "item": {"type": "message", "id": id, "status": "in_progress",
                                                   "role": "assistant", "content": []}})));
                events.push(self.event("response.content_part.added", json!({
                    "item_id": id, "output_index": index, "content_index": 0,
                    "part": {"type": "output_text", "text": "", "annotations": [], "logprobs": []}})));
                self.open = Some(Open::Message {
                    id,
                    text: String::new(),
                });
            }
            let index = self.output.len();
            if let Some(Open::Message { id, text: so_far }) = &mut self.open {
                so_far.push_str(text);
                let id = id.clone();
                events.push(self.event(
                    "response.output_text.delta",
                    json!({
                    "item_id": id, "output_index": index, "content_index": 0, "delta": text,
                    "logprobs": []}),
                ));
            }
        }
        for call in delta["tool_calls"].as_array().into_iter().flatten() {
            events.extend(self.on_call_delta(call));
        }
        if let Some(finish) = choice["finish_reason"].as_str() {
            self.finish = Some(finish.to_string());
        }
        events
    }

    fn on_call_delta(&mut self, call: &Value) -> Vec<(String, Value)> {
        let mut events = Vec::new();
        if let Some(call_id) = call["id"].as_str() {
            events.extend(self.close());
            let index = self.output.len();
            let id = item_id("fc", &self.chat_id, index);
            let name = call["function"]["name"].as_str().unwrap_or("").to_string();
            events.push(self.event(
                "response.output_item.added",
                json!({
                "output_index": index, "item": call_item(&id, call_id, &name, "", "in_progress")}),
            ));
            self.open = Some(Open::Call {
                id,
                call_id: call_id.to_string(),
                name,
                arguments: String::new(),
            });
        }
        let piece = call["function"]["arguments"].as_str().unwrap_or("");
        let index = self.output.len();
        if let (Some(Open::Call { id, arguments, .. }), false) = (&mut self.open, piece.is_empty())
        {
            arguments.push_str(piece);
            let id = id.clone();
            events.push(self.event(
                "response.function_call_arguments.delta",
                json!({
                "item_id": id, "output_index": index, "delta": piece}),
            ));
        }
        events
    }

    /// The done events of the open item, which joins the output.
    fn close(&mut self) -> Vec<(String, Value)> {
        let status = if self.finish.as_deref() == Some("length") {
            "incomplete"
        } else {
            "completed"
        };
        let index = self.output.len();
        let mut events = Vec::new();
        let item = match self.open.take() {
            None => return events,
            Some(Open::Message { id, text }) => {
                let part =
                    json!({"type": "output_text", "text": text, "annotations": [], "logprobs": []});
                events.push(self.event("response.output_text.done", json!({
                    "item_id": id, "output_index": index, "content_index": 0, "text": text, "logprobs": []})));
                events.push(self.event(
                    "response.content_part.done",
                    json!({
                    "item_id": id, "output_index": index, "content_index": 0, "part": part}),
                ));
                message_item(&id, &text, status)
            }
            Some(Open::Call {
                id,
                call_id,
                name,
                arguments,
            }) => {
                events.push(self.event(
                    "response.function_call_arguments.done",
                    json!({
                    "item_id": id, "output_index": index, "name": name, "arguments": arguments}),
                ));
                call_item(&id, &call_id, &name, &arguments, status)
            }
        };
        events.push(self.event(
            "response.output_item.done",
            json!({"output_index": index, "item": item}),
        ));
        self.output.push(item);
        events
    }

    /// The events that end the stream: the open item's done events and
    /// `response.completed` (or `response.incomplete` when cut by the token budget).
    pub fn finish(&mut self) -> Vec<(String, Value)> {
        let mut events = self.close();
        let finish = self.finish.clone().unwrap_or_else(|| "stop".into());
        let r = self.snapshot(Some(&finish));
        let kind = if finish == "length" {
            "response.incomplete"
        } else {
            "response.completed"
        };
        events.push(self.event(kind, json!({"response": r})));
        events
    }
}
