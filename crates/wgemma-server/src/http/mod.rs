//! What stands between the network and the handlers: each request's admission (host,
//! origin, key, content type, body size and deadline), its key check and CORS answers, the
//! hosts and origins it allows, the limits, the write deadline, and the accept loop.

pub mod accept;
pub mod admission;
pub mod api_key;
pub mod cors;
pub mod deadline;
pub mod limits;
pub mod origins;
