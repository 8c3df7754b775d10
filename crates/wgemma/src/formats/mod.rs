//! Where weights come from. Each format hands the model its tensors through
//! [`crate::weights::source::WeightSource`]:
//!
//! - [`hf`]: a Hugging Face checkpoint (safetensors shards and config.json).
//! - [`gguf`]: GGUF files as llama.cpp writes them.
//! - [`artifact`]: the exported model artifact (one safetensors file of GPU-layout weights
//!   and a manifest): writing, contract check, loading from bytes.
//! - [`synthetic`]: seeded synthetic weights (and checkpoints of them) for tests and demos.
//!
//! [`mapped`] maps the files they are read from (unix), reporting a file that shrinks during
//! a load as an error; [`printable`] escapes a file's strings for a terminal.

pub mod artifact;
pub mod gguf;
pub mod hf;
#[cfg(unix)]
pub mod mapped;
pub mod printable;
pub mod synthetic;
