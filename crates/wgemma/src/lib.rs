//! wgemma: Gemma 4 on WebGPU. The layers, bottom up (each uses only those above it in
//! this list; docs/ARCHITECTURE.md walks through them):
//!
//! - [`gpu`]: the runtime (context, tensors, kernels, one-pass steps, readback) and the
//!   WGSL shader registry generated at build time.
//! - `harness`: the op test harness (GPU vs CPU reference; perf mode), with the op cases only
//!   in builds with the `harness` feature (the CLI's `wgemma ops`) and the crate's tests.
//! - [`ops`]: the operator library, one folder per operator, each with a CPU reference.
//! - [`weights`]: the one seam between weight formats and the model: the weight source
//!   (scoped names), the host layout of prepared matrices, the uploader, linear weights.
//! - [`model`]: the Gemma 4 decoder (config, blocks, layer loop, the target `Model`, the
//!   MTP assistant).
//! - [`text`]: tokenizer, chat templates, stop strings.
//! - [`formats`]: where weights come from: Hugging Face checkpoints, GGUF files, the
//!   exported model artifact, synthetic weights for tests.
//! - [`generate`]: plain and speculative generation, sampling.
//! - [`session`]: the front door (load, chat templates, stop ids and strings, plain and
//!   speculative generation with streaming, stats) that the CLI, browser and server use.
//!
//! The public surface: an application drives [`session::Session`]. A driver that measures
//! or serves below it (the CLI's benches and demo, the server) names the layer that
//! defines each type: [`model::state::KvState`], [`model::target::Model`],
//! [`model::assistant::Assistant`] and [`model::PlanOptions`] for forwards and plans;
//! [`generate::plain`], [`generate::sampling`] and [`generate::speculative`] for the
//! generation loops; [`text::tokenizer::Tokenizer`] and [`text::tools`] for text and tool
//! calls; [`gpu`] for the context. The op harness (`ops::random_cases`,
//! `harness::check` and `harness::perf`) is there with the `harness` feature.

pub mod error;
pub mod formats;
pub mod generate;
pub mod gpu;
#[cfg(any(test, feature = "harness"))]
pub mod harness;
pub mod model;
pub mod ops;
pub mod session;
pub mod text;
pub mod weights;

pub use error::{Error, Result};
pub use gpu::shader_meta::{
    compute_entries, content_hash, expand_includes, strip_comments, EntryMeta,
};
