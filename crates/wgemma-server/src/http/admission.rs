//! What stands between the network and `wgemma serve`'s handlers, so that neither a web
//! page in the user's browser nor a slow or hostile client can drive or hold the server:
//!
//! - `Host` must name this machine (loopback names, an IP literal of the bound address) or
//!   one of `--allowed-hosts`: a DNS-rebinding page's requests carry its own host name.
//! - `Origin`, when sent (browsers send it cross-origin), must be this server's own (its
//!   chat page) or one of `--cors-origins` (default none); allowed origins get CORS headers
//!   and answered preflights.
//! - The API key is checked from the headers before a byte of the body is read (every
//!   route but `/health` and the chat page at `/`).
//! - POST routes with JSON bodies (the completions, `/tokenize`, `/detokenize`,
//!   `/apply-template`) take `Content-Type: application/json` only (415 otherwise): the
//!   content types a page may send without a preflight (`text/plain`, forms) are refused.
//! - The body is read with a size bound per route (JSON 413, [`crate::http::limits`]) and
//!   a deadline (408). Headers' deadline and the connection cap are the accept loop's
//!   ([`crate::http::accept`]).
//!
//! Refused generation requests, and ones whose client went away before an answer, are
//! counted in `wgemma_requests_total` like every other answer.

use crate::error::ApiError;
use crate::http::api_key::{authorize, check_api_key};
use crate::http::cors::{preflight, same_origin, with_cors};
use crate::http::limits::{GuardOptions, GENERATION_BODY_BYTES, OTHER_BODY_BYTES};
use crate::http::origins::{normal_origin, split_host, AllowedHost};
use crate::metrics::Metrics;
use crate::openai::response::Endpoint;
use anyhow::{bail, Result};
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

/// The checks of every request, built once at start.
pub struct Guard {
    allowed_hosts: Vec<AllowedHost>,
    any_host: bool,
    bound: IpAddr,
    cors_origins: Vec<String>,
    any_origin: bool,
    api_key: Option<String>,
    body_timeout: Duration,
    metrics: Arc<Metrics>,
}

impl Guard {
    /// Checks the flags (and the API key: one that can never match a header is refused
    /// here rather than at every request).
    pub fn new(
        args: &GuardOptions,
        bound: IpAddr,
        api_key: Option<&str>,
        metrics: Arc<Metrics>,
    ) -> Result<Guard> {
        if let Some(key) = api_key {
            check_api_key(key)?;
        }
        if args.max_connections == 0 {
            bail!("--max-connections: expected at least 1, found 0");
        }
        if args.header_timeout == 0 || args.body_timeout == 0 {
            bail!(
                "--header-timeout / --body-timeout: expected at least 1 second, found {} / {}",
                args.header_timeout,
                args.body_timeout
            );
        }
        for origin in &args.cors_origins {
            if origin != "*" && !(origin.starts_with("http://") || origin.starts_with("https://")) {
                bail!(
                    "--cors-origins: expected origins like https://app.example (scheme, host, \
                     optional port) or *, found {origin:?}"
                );
            }
        }
        let mut allowed_hosts = Vec::new();
        for host in args.allowed_hosts.iter().filter(|h| *h != "*") {
            match AllowedHost::parse(host) {
                Some(h) => allowed_hosts.push(h),
                None => bail!(
                    "--allowed-hosts: expected host names like api.example (optionally with a \
                     port, api.example:8443) or *, found {host:?}"
                ),
            }
        }
        Ok(Guard {
            allowed_hosts,
            any_host: args.allowed_hosts.iter().any(|h| h == "*"),
            bound,
            cors_origins: args.cors_origins.iter().map(|o| normal_origin(o)).collect(),
            any_origin: args.cors_origins.iter().any(|o| o == "*"),
            api_key: api_key.map(String::from),
            body_timeout: Duration::from_secs(args.body_timeout),
            metrics,
        })
    }

    /// Whether the `Host` header's name is one this server answers to.
    fn host_allowed(&self, host: &str) -> bool {
        if self.any_host {
            return true;
        }
        let name = split_host(host)
            .0
            .trim_end_matches('.')
            .to_ascii_lowercase();
        if name == "localhost" || name.ends_with(".localhost") {
            return true;
        }
        // An IP literal cannot be rebound: a page at another origin that uses it is
        // cross-origin, and its `Origin` is checked.
        if let Ok(ip) = name
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<IpAddr>()
        {
            return ip.is_loopback() || self.bound.is_unspecified() || ip == self.bound;
        }
        self.allowed_hosts.iter().any(|h| h.matches(host))
    }

    fn origin_allowed(&self, origin: &str) -> bool {
        self.any_origin || self.cors_origins.contains(&normal_origin(origin))
    }

    /// The refusal of a request's headers, if any (host, origin, key, content type, size).
    fn refusal(&self, req: &Request) -> Option<ApiError> {
        let headers = req.headers();
        let path = req.uri().path();
        let hosts = headers.get_all(header::HOST).iter().count();
        if hosts > 1 || (hosts == 0 && req.version() == axum::http::Version::HTTP_11) {
            // RFC 9112: an HTTP/1.1 request has exactly one Host (a browser always sends one;
            // two would let this check read one and a proxy route by the other).
            return Some(ApiError::invalid(
                "",
                format!("Host header: expected exactly one, found {hosts}"),
            ));
        }
        if let Some(host) = headers.get(header::HOST) {
            let host = host.to_str().unwrap_or("");
            if !self.host_allowed(host) {
                return Some(forbidden(format!(
                    "Host header: expected this machine's name (localhost, an IP literal of \
                     the bound address) or one of --allowed-hosts, found {host:?}"
                )));
            }
        }
        if let Some(origin) = headers.get(header::ORIGIN) {
            let origin = origin.to_str().unwrap_or("");
            // The server's own chat page (`/`) calls the API from its own origin, which
            // browsers name on POSTs too; its host passed the check above.
            let own = headers
                .get(header::HOST)
                .and_then(|h| h.to_str().ok())
                .is_some_and(|host| same_origin(origin, host));
            if !own && !self.origin_allowed(origin) {
                return Some(forbidden(format!(
                    "Origin header: expected one of --cors-origins (none by default: web pages \
                     may not call this server), found {origin:?}"
                )));
            }
        }
        if req.method() == Method::OPTIONS {
            return None;
        }
        // Every route but the health probe and the static chat page (which asks for the
        // key itself when the API needs one).
        if path != "/health" && path != "/" {
            if let Err(e) = authorize(self.api_key.as_deref(), headers) {
                return Some(e);
            }
        }
        if takes_json(req) {
            let content_type = headers
                .get(header::CONTENT_TYPE)
                .map(|v| v.to_str().unwrap_or("(not text)"));
            let media = content_type.map(|c| {
                c.split(';')
                    .next()
                    .unwrap_or("")
                    .trim()
                    .to_ascii_lowercase()
            });
            if media.as_deref() != Some("application/json") {
                return Some(
                    ApiError::invalid(
                        "",
                        format!(
                            "Content-Type: expected application/json, found {}",
                            content_type.map_or("none".to_string(), |c| format!("{c:?}"))
                        ),
                    )
                    .with_status(StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type"),
                );
            }
        }
        let limit = body_limit(req);
        if let Some(length) = declared_length(headers) {
            if length > limit as u64 {
                return Some(too_large(limit, &format!("{length} bytes")));
            }
        }
        None
    }
}

fn forbidden(message: String) -> ApiError {
    ApiError::invalid("", message).with_status(StatusCode::FORBIDDEN, "forbidden")
}

fn too_large(limit: usize, found: &str) -> ApiError {
    ApiError::invalid(
        "",
        format!("request body: expected at most {limit} bytes for this route, found {found}"),
    )
    .with_status(StatusCode::PAYLOAD_TOO_LARGE, "request_too_large")
}

fn declared_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse().ok())
}

/// The generation endpoint a request is for (POST to one), if any.
fn generation_endpoint(req: &Request) -> Option<Endpoint> {
    if req.method() != Method::POST {
        return None;
    }
    match req.uri().path() {
        "/v1/chat/completions" | "/v1/responses" => Some(Endpoint::Chat),
        "/v1/completions" => Some(Endpoint::Completion),
        _ => None,
    }
}

/// Whether a request is a POST to a route whose body is JSON (the completions, and
/// `/tokenize`, `/detokenize`, `/apply-template`, which carry prompts too).
fn takes_json(req: &Request) -> bool {
    req.method() == Method::POST
        && matches!(
            req.uri().path(),
            "/v1/chat/completions"
                | "/v1/completions"
                | "/v1/responses"
                | "/tokenize"
                | "/detokenize"
                | "/apply-template"
        )
}

fn body_limit(req: &Request) -> usize {
    if takes_json(req) {
        GENERATION_BODY_BYTES
    } else {
        OTHER_BODY_BYTES
    }
}

/// Counts a generation request in `wgemma_requests_total` when its handler is dropped
/// before answering: the client went away (counted as 499, nginx's "client closed").
struct CountIfDropped {
    metrics: Arc<Metrics>,
    endpoint: Option<Endpoint>,
}

impl CountIfDropped {
    fn answered(mut self, status: Option<StatusCode>) {
        if let (Some(endpoint), Some(status)) = (self.endpoint.take(), status) {
            self.metrics
                .count_request(endpoint.label(), status.as_u16());
        }
    }
}

impl Drop for CountIfDropped {
    fn drop(&mut self) {
        if let Some(endpoint) = self.endpoint.take() {
            self.metrics.count_request(endpoint.label(), 499);
        }
    }
}

/// The middleware (axum `from_fn_with_state`): every check above, the body read under
/// its bound and deadline, then the handler; CORS headers on answers to allowed origins.
pub async fn check(State(guard): State<Arc<Guard>>, req: Request, next: Next) -> Response {
    let count = CountIfDropped {
        metrics: guard.metrics.clone(),
        endpoint: generation_endpoint(&req),
    };
    let origin = req.headers().get(header::ORIGIN).cloned();
    if let Some(refusal) = guard.refusal(&req) {
        let status = refusal.status;
        count.answered(Some(status));
        return with_cors(refusal.into_response(), origin);
    }
    if req.method() == Method::OPTIONS && origin.is_some() {
        count.answered(None);
        return with_cors(preflight(), origin);
    }
    let limit = body_limit(&req);
    let (parts, body) = req.into_parts();
    let read = tokio::time::timeout(guard.body_timeout, axum::body::to_bytes(body, limit)).await;
    let bytes: Bytes = match read {
        Ok(Ok(bytes)) => bytes,
        Ok(Err(e)) => {
            let refusal = if is_length_limit(&e) {
                too_large(limit, "more")
            } else {
                ApiError::invalid("", format!("request body: could not be read ({e})"))
            };
            count.answered(Some(refusal.status));
            return with_cors(refusal.into_response(), origin);
        }
        Err(_) => {
            let refusal = ApiError::invalid(
                "",
                format!(
                    "request body: expected it within {} s (--body-timeout), found it still \
                     arriving",
                    guard.body_timeout.as_secs()
                ),
            )
            .with_status(StatusCode::REQUEST_TIMEOUT, "timeout");
            count.answered(Some(refusal.status));
            return with_cors(refusal.into_response(), origin);
        }
    };
    let response = next
        .run(Request::from_parts(parts, Body::from(bytes)))
        .await;
    // The handler counted its own answer.
    count.answered(None);
    with_cors(response, origin)
}

fn is_length_limit(e: &axum::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = source {
        if s.is::<http_body_util::LengthLimitError>() {
            return true;
        }
        source = s.source();
    }
    false
}

/// Runs the guard's checks on one request without a server (the fuzz target and tests):
/// the refusal's status, or None when it would reach the handler.
#[cfg(any(test, feature = "fuzzing"))]
pub fn refusal_status(guard: &Guard, req: &Request) -> Option<StatusCode> {
    guard.refusal(req).map(|e| e.status)
}

/// A guard with the defaults (loopback, no origins), for tests and the fuzz target.
#[cfg(any(test, feature = "fuzzing"))]
pub fn default_guard(api_key: Option<&str>) -> Result<Guard> {
    use anyhow::Context as _;
    let args = GuardOptions {
        allowed_hosts: Vec::new(),
        cors_origins: Vec::new(),
        max_connections: 256,
        header_timeout: 10,
        body_timeout: 30,
    };
    Guard::new(
        &args,
        IpAddr::from([127, 0, 0, 1]),
        api_key,
        Arc::new(Metrics::default()),
    )
    .context("the default guard")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A request with `headers`, and `Host: localhost` unless they name a host.
    fn request(method: &str, path: &str, headers: &[(&str, &str)]) -> Request {
        let mut b = Request::builder().method(method).uri(path);
        if !headers.iter().any(|(k, _)| *k == "host") {
            b = b.header("host", "localhost");
        }
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        b.body(Body::empty()).unwrap()
    }

    const JSON: (&str, &str) = ("content-type", "application/json");

    #[test]
    fn hosts_origins_keys_and_content_types() {
        let g = default_guard(Some("k3y")).unwrap();
        let key = ("authorization", "Bearer k3y");
        let chat = "/v1/chat/completions";
        let status = |m: &str, p: &str, h: &[(&str, &str)]| refusal_status(&g, &request(m, p, h));
        // What a well-behaved local client sends passes.
        for host in [
            "127.0.0.1:8080",
            "localhost:8080",
            "[::1]:8080",
            "a.localhost",
        ] {
            assert_eq!(
                status("POST", chat, &[("host", host), key, JSON]),
                None,
                "{host}"
            );
        }
        // A rebound name, a foreign page, no or a wrong key, a page's simple content type.
        let cases: [(&[(&str, &str)], u16); 7] = [
            (&[("host", "evil.example:8080"), key, JSON], 403),
            (&[("origin", "https://evil.example"), key, JSON], 403),
            (&[("origin", "null"), key, JSON], 403),
            (&[JSON], 401),
            (&[("authorization", "Bearer nope"), JSON], 401),
            (&[key, ("content-type", "text/plain")], 415),
            (&[key], 415),
        ];
        for (headers, want) in cases {
            assert_eq!(
                status("POST", chat, headers).map(|s| s.as_u16()),
                Some(want),
                "{headers:?}"
            );
        }
        // The size bound is known from the headers: refused before the body is read.
        let big = (GENERATION_BODY_BYTES + 1).to_string();
        assert_eq!(
            status("POST", chat, &[key, JSON, ("content-length", &big)]),
            Some(StatusCode::PAYLOAD_TOO_LARGE)
        );
        // Exactly one Host.
        let two = [("host", "localhost"), ("host", "evil.example")];
        assert_eq!(
            status("GET", "/health", &two),
            Some(StatusCode::BAD_REQUEST)
        );
        let none = Request::builder()
            .uri("/health")
            .body(Body::empty())
            .unwrap();
        assert_eq!(refusal_status(&g, &none), Some(StatusCode::BAD_REQUEST));
        // /health and the chat page need no key; /metrics and the other routes do.
        assert_eq!(status("GET", "/health", &[]), None);
        assert_eq!(status("GET", "/", &[]), None);
        for (method, path) in [
            ("GET", "/metrics"),
            ("GET", "/props"),
            ("POST", "/tokenize"),
        ] {
            assert_eq!(
                status(method, path, &[JSON]),
                Some(StatusCode::UNAUTHORIZED),
                "{path}"
            );
        }
        // The other JSON routes take JSON only too; a GET route has no body to type.
        assert_eq!(
            status("POST", "/tokenize", &[key, ("content-type", "text/plain")]),
            Some(StatusCode::UNSUPPORTED_MEDIA_TYPE)
        );
        assert_eq!(status("GET", "/props", &[key]), None);
        // The server's own page (same origin, a host that passed) may call the API; the same
        // host on another port, or another scheme, is another origin.
        let own = [
            ("host", "127.0.0.1:8080"),
            ("origin", "http://127.0.0.1:8080"),
        ];
        assert_eq!(status("POST", chat, &[own[0], own[1], key, JSON]), None);
        for origin in ["http://127.0.0.1:9090", "https://127.0.0.1:8080"] {
            assert_eq!(
                status("POST", chat, &[own[0], ("origin", origin), key, JSON]),
                Some(StatusCode::FORBIDDEN),
                "{origin}"
            );
        }
        assert_eq!(
            status(
                "POST",
                chat,
                &[key, ("content-type", "Application/JSON; charset=utf-8")]
            ),
            None
        );
    }

    #[test]
    fn allowed_hosts_origins_and_keys_are_checked_at_start() {
        let args = GuardOptions {
            allowed_hosts: vec!["api.example".into()],
            cors_origins: vec!["https://app.example".into()],
            max_connections: 4,
            header_timeout: 1,
            body_timeout: 1,
        };
        let g = Guard::new(&args, IpAddr::from([0, 0, 0, 0]), None, Arc::default()).unwrap();
        let chat = "/v1/chat/completions";
        let ok = request(
            "POST",
            chat,
            &[
                ("host", "API.example:443"),
                ("origin", "https://app.example"),
                JSON,
            ],
        );
        assert_eq!(refusal_status(&g, &ok), None);
        // Bound to every address: any IP literal is this machine.
        let ip = request("POST", chat, &[("host", "192.168.1.9:8080"), JSON]);
        assert_eq!(refusal_status(&g, &ip), None);
        for key in ["two words", "clé", "tab\there", ""] {
            let err = check_api_key(key).unwrap_err().to_string();
            assert!(
                err.contains("--api-key") && err.contains("expected"),
                "{err}"
            );
        }
        assert!(check_api_key("sk-Abc_123.~").is_ok());
        let bad = GuardOptions {
            cors_origins: vec!["app.example".into()],
            ..args
        };
        let err = Guard::new(&bad, IpAddr::from([127, 0, 0, 1]), None, Arc::default())
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("--cors-origins"), "{err}");
    }
}
