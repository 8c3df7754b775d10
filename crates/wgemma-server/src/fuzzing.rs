//! The bodies of the server's fuzz targets: `http_request` (the request path on raw bytes),
//! `json_schema` (a `response_format` schema checked, compiled by llguidance and decoded a
//! few constrained steps) and `request_body` (a chat-completion body whose
//! `response_format` or forced tool call is compiled and decoded the same way). Shared by
//! `fuzz/fuzz_targets/` (libFuzzer, through the `fuzzing` feature) and by this crate's unit
//! tests, which replay every committed `fuzz/corpus/<target>/` input.
//! It must return on ANY input: a panic, a hang or an allocation the input does not
//! justify is a bug.

use crate::http::admission;
use crate::openai::request;
use crate::openai::response_format::ResponseFormat;
use crate::openai::structured::{byte_tokenizer, GrammarConstraint, Grammars, BYTE_EOS as EOS};
use serde_json::{json, Value};
use wgemma::session::TokenConstraint;

/// Constrained steps each grammar is walked (enough to pass a schema's opening).
const STEPS: usize = 24;
/// Logit rows of [`byte_tokenizer`]'s model: 256 bytes, `<eos>` and three unused ids.
const VOCAB: usize = 260;

/// `f` with this thread's grammar compiler over [`byte_tokenizer`].
fn with_grammars(f: impl FnOnce(&Grammars)) {
    thread_local! {
        static GRAMMARS: Grammars =
            Grammars::new(&byte_tokenizer(), VOCAB, &[EOS]).expect("the byte grammars");
    }
    GRAMMARS.with(f);
}

/// Up to [`STEPS`] tokens of constrained decoding: each step's mask, then an allowed token
/// picked by the input's bytes. A mask that allows nothing, or a refused token, must be an
/// error, never a panic.
fn decode_a_few(mut c: GrammarConstraint, data: &[u8]) {
    for step in 0..STEPS {
        let mut logits = vec![0.0f32; VOCAB];
        if c.mask(&mut logits).is_err() {
            return;
        }
        let allowed: Vec<u32> = (0..VOCAB as u32)
            .filter(|&t| logits[t as usize].is_finite())
            .collect();
        if allowed.is_empty() {
            return;
        }
        let pick = data.get(step).copied().unwrap_or(0) as usize;
        if c.accept(allowed[pick % allowed.len()]).is_err() || c.is_finished() {
            return;
        }
    }
}

/// The input as a JSON schema, as `response_format.json_schema.schema` carries it.
pub fn json_schema(data: &[u8]) {
    let Ok(schema) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let format = json!({"type": "json_schema", "json_schema": {"name": "fuzz", "schema": schema}});
    let Ok(Some(format)) = ResponseFormat::parse(Some(&format)) else {
        return;
    };
    with_grammars(|g| {
        if let Ok(c) = g.constraint(&format) {
            decode_a_few(c, data);
        }
    });
}

/// The input as a chat-completion body, parsed as the handler parses it; its
/// `response_format` and its tools' grammar (a forced call, calls or the format, strict
/// tools under `auto`) compiled and decoded a few steps.
pub fn request_body(data: &[u8]) {
    let Ok(parsed) = request::parse_chat(data, &["tiny"]) else {
        return;
    };
    let s = &parsed.sampling;
    with_grammars(|g| {
        if let Some(format) = &s.response_format {
            if let Ok(c) = g.constraint(format) {
                decode_a_few(c, data);
            }
        }
        let answer = s.response_format.as_ref().map(|f| f.lark_rule());
        if let Some(Ok(Some(lark))) = s
            .tools
            .as_ref()
            .map(|t| t.grammar(answer.as_deref(), g.special_markers()))
        {
            if let Ok(c) = g.tool_constraint(&lark) {
                decode_a_few(c, data);
            }
        }
    });
}

/// One raw HTTP/1.1 request: its head parsed by hyper's parser (httparse), the guard's
/// checks run on it (host, origin, key, content type, declared size), then the body parsed
/// as a chat completion and as a completion request, as the handlers parse it.
pub fn http_request(data: &[u8]) {
    thread_local! {
        static GUARD: admission::Guard =
            admission::default_guard(Some("k3y")).expect("the default guard");
    }
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut head = httparse::Request::new(&mut headers);
    let Ok(httparse::Status::Complete(head_len)) = head.parse(data) else {
        return;
    };
    let mut builder = axum::http::Request::builder()
        .method(head.method.unwrap_or("GET"))
        .uri(head.path.unwrap_or("/"));
    for h in head.headers.iter() {
        builder = builder.header(h.name, h.value);
    }
    let Ok(request) = builder.body(axum::body::Body::empty()) else {
        return;
    };
    GUARD.with(|guard| {
        let _ = admission::refusal_status(guard, &request);
    });
    let body = &data[head_len..];
    let _ = request::parse_chat(body, &["tiny"]);
    let _ = request::parse_completion(body, &["tiny"]);
}

#[cfg(test)]
mod tests {
    /// Every committed `fuzz/corpus/<target>/` input through the target's body (CI has no
    /// fuzzing build; the corpora stay a regression suite).
    fn replay(target: &str, body: fn(&[u8]), at_least: usize) {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../fuzz/corpus")
            .join(target);
        let mut n = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let bytes = std::fs::read(entry.unwrap().path()).unwrap();
            body(&bytes);
            n += 1;
        }
        assert!(n >= at_least, "{n} inputs in {}", dir.display());
    }

    #[test]
    fn http_request_fuzz_corpus() {
        replay("http_request", super::http_request, 5);
    }

    #[test]
    fn json_schema_fuzz_corpus() {
        replay("json_schema", super::json_schema, 10);
    }

    #[test]
    fn request_body_fuzz_corpus() {
        replay("request_body", super::request_body, 5);
    }
}
