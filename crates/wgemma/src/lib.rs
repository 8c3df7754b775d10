//! wgemma: Gemma 4 on WebGPU.
//!
//! - [`gpu`]: the runtime (context, tensors, kernels, one-pass steps, readback).
//! - [`registry`]: the WGSL shader registry generated at build time.
//! - [`ops`]: the operator library, one folder per operator, each with a CPU reference.
//! - [`harness`]: the op test harness (GPU vs CPU reference; perf mode).
//! - [`artifact`]: the exported model artifact (one safetensors file of GPU-layout weights
//!   and a manifest): writing, contract check, loading from bytes.
//! - [`session`]: the front door (load, chat templates, stop ids and strings, plain and
//!   speculative generation with streaming, stats) that the CLI, browser and server use.

pub mod artifact;
pub mod error;
pub mod gguf;
pub mod gpu;
pub mod harness;
pub mod model;
pub mod ops;
pub mod registry;
pub mod session;
mod shader_meta;

pub use error::{Error, Result};
pub use shader_meta::{compute_entries, content_hash, expand_includes, strip_comments, EntryMeta};
