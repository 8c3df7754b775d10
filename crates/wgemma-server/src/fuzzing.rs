//! The body of the `http_request` fuzz target: the server's request path on raw bytes.
//! Shared by `fuzz/fuzz_targets/http_request.rs` (libFuzzer, through the `fuzzing` feature)
//! and by this crate's unit tests (`http::admission`), which replay every committed
//! `fuzz/corpus/http_request/` input.
//! It must return on ANY input: a panic, a hang or an allocation the input does not
//! justify is a bug.

use crate::http::admission;
use crate::openai::request;

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
    /// Every committed `fuzz/corpus/http_request/` input through the fuzz target's body
    /// (CI has no fuzzing build; the corpus stays a regression suite).
    #[test]
    fn http_request_fuzz_corpus() {
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/http_request");
        let mut n = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let bytes = std::fs::read(entry.unwrap().path()).unwrap();
            super::http_request(&bytes);
            n += 1;
        }
        assert!(n >= 5, "{n} inputs in {}", dir.display());
    }
}
