//! Where weights come from. Each format hands the model its tensors through
//! [`crate::weights::source::WeightSource`]:
//!
//! - [`hf`]: a Hugging Face checkpoint (safetensors shards and config.json).
//! - [`gguf`]: GGUF files as llama.cpp writes them.
//! - [`artifact`]: the exported model artifact (one safetensors file of GPU-layout weights
//!   and a manifest): writing, contract check, loading from bytes.
//! - [`synthetic`]: seeded synthetic weights (and checkpoints of them) for tests and demos.

pub mod artifact;
pub mod gguf;
pub mod hf;
pub mod synthetic;
