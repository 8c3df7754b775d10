//! The body of the `http_request` fuzz target: `wgemma serve`'s request path on raw bytes.
//! Shared by `fuzz/fuzz_targets/http_request.rs` (libFuzzer, which compiles the server's
//! `serve_api`, `serve_guard` and `serve_metrics` modules beside it) and by the CLI's
//! unit tests (`serve_guard`), which replay every committed `corpus/http_request/` input.
//! It must return on ANY input: a panic, a hang or an allocation the input does not
//! justify is a bug.

use crate::serve_api;
use crate::serve_guard;

/// One raw HTTP/1.1 request: its head parsed by hyper's parser (httparse), the guard's
/// checks run on it (host, origin, key, content type, declared size), then the body parsed
/// as a chat completion and as a completion request, as the handlers parse it.
pub fn http_request(data: &[u8]) {
    thread_local! {
        static GUARD: serve_guard::Guard =
            serve_guard::default_guard(Some("k3y")).expect("the default guard");
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
        let _ = serve_guard::refusal_status(guard, &request);
    });
    let body = &data[head_len..];
    let _ = serve_api::parse_chat(body, "tiny");
    let _ = serve_api::parse_completion(body, "tiny");
}
