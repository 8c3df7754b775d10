//! What stands between the network and the handlers: each request's admission (host,
//! origin, key, content type, body size and deadline), the limits, and the accept loop.

pub mod accept;
pub mod admission;
pub mod limits;
