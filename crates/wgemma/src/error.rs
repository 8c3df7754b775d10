//! Library errors. Every variant says what was expected and what was found.

use thiserror::Error;

#[derive(Debug, Error)]
pub enum Error {
    #[error(
        "no GPU adapter found for backends {backends}: install a Vulkan driver \
         (on Debian/Ubuntu without a GPU: `apt-get install -y mesa-vulkan-drivers` for the \
         lavapipe software driver), or set WGPU_BACKEND to a backend this machine has"
    )]
    NoAdapter { backends: String },

    #[error("requesting a device from adapter `{adapter}` failed: {reason}")]
    DeviceRequest { adapter: String, reason: String },

    #[error("{op}: no eligible route for {shapes}; guards that failed: {}", failed.join("; "))]
    NoRoute {
        op: &'static str,
        shapes: String,
        failed: Vec<String>,
    },

    #[error("{op}: {what}: expected {expected}, found {found}")]
    Invalid {
        op: &'static str,
        what: String,
        expected: String,
        found: String,
    },

    #[error(
        "dispatch of {workgroups} workgroups exceeds the device's 2-D grid capacity \
         ({max_per_dim} x {max_per_dim})"
    )]
    DispatchTooLarge { workgroups: u64, max_per_dim: u32 },

    #[error("shader `{0}` is not in the shader registry")]
    UnknownShader(String),

    #[error("GPU readback failed: {0}")]
    Readback(String),

    #[error("GPU error: {0}")]
    Gpu(String),

    /// An error of one input, named (`config.json: ...`, `the stored tokenizer: ...`).
    #[error("{place}: {inner}")]
    In { place: String, inner: Box<Error> },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// Shorthand for [`Error::Invalid`].
    pub fn invalid(
        op: &'static str,
        what: impl Into<String>,
        expected: impl std::fmt::Display,
        found: impl std::fmt::Display,
    ) -> Self {
        Error::Invalid {
            op,
            what: what.into(),
            expected: expected.to_string(),
            found: found.to_string(),
        }
    }

    /// This error, said to come from `place` (a file, a field, a phase).
    pub fn within(self, place: impl Into<String>) -> Self {
        Error::In {
            place: place.into(),
            inner: Box::new(self),
        }
    }
}
