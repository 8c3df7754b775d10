//! What the server lets in and how much: the guard's options (hosts, origins, connections,
//! deadlines), body sizes per route and the connection layer's cap and header deadline.

use std::time::Duration;

/// Bodies of the JSON routes: a context's worth of text with JSON escaping, many
/// times over (a 128K-token prompt is about 0.5 MB of text).
pub const GENERATION_BODY_BYTES: usize = 4 << 20;
/// Bodies of every other route (they take none).
pub const OTHER_BODY_BYTES: usize = 16 << 10;

/// What the guard lets in: the CLI's `--allowed-hosts`, `--cors-origins`,
/// `--max-connections`, `--header-timeout` and `--body-timeout` (errors name those flags).
#[derive(Clone, Debug)]
pub struct GuardOptions {
    /// Host names (the `Host` header) the server answers besides localhost, *.localhost
    /// and IP literals of the bound address: a page that rebinds its own name to this
    /// machine is refused (403). `*` allows any.
    pub allowed_hosts: Vec<String>,
    /// Web origins (`https://app.example`) whose pages may call the API (CORS); a request
    /// carrying any other `Origin` is refused (403). Default none. `*` allows any.
    pub cors_origins: Vec<String>,
    /// Connections held at once; beyond it a new connection gets 503 and is closed.
    pub max_connections: usize,
    /// Seconds a client has to send a request's headers (and between requests on a
    /// kept-alive connection).
    pub header_timeout: u64,
    /// Seconds a client has to send a request's body.
    pub body_timeout: u64,
}

/// Limits of the connection layer.
pub struct ConnectionLimits {
    pub max_connections: usize,
    pub header_timeout: Duration,
}

impl From<&GuardOptions> for ConnectionLimits {
    fn from(args: &GuardOptions) -> Self {
        ConnectionLimits {
            max_connections: args.max_connections,
            header_timeout: Duration::from_secs(args.header_timeout),
        }
    }
}
