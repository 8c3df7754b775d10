//! The model artifact: ONE file holding a target (and optionally its MTP assistant) with
//! weights already in the layout the kernels read, plus a manifest that states what the
//! file must satisfy before anything is uploaded.
//!
//! Decisions, and why:
//! - **Container: safetensors.** A well-kept format with a small, fuzzed reader (the
//!   `safetensors` crate, already a dependency), readable by every HF tool, zero-copy from
//!   a memory map, with a string-to-string `__metadata__` where the manifest lives as JSON.
//!   Its header is the tensor table (name, dtype, shape, byte offsets); the manifest does
//!   not repeat it, so the two cannot disagree.
//! - **Tensors in GPU layout** ([`plan`]): Q4 matrices as `<name>.q4_packed` (u32
//!   `[N, K/8]`) and `<name>.q4_scales` (u32 words of f16 pairs), exactly what
//!   [`Q4Weight`](crate::ops::linear::Q4Weight) uploads; f16/f32 matrices dense; norms f32.
//!   Whole tensors are stored: splitting into row chunks that fit a binding is the
//!   device's business, done at upload as for a checkpoint. The tied embedding is stored
//!   once and uploaded as both table and lm_head. Loading uploads these bytes as they
//!   are, so the GPU buffers are bit-identical to loading the checkpoint with the same
//!   dtype (the round-trip tests compare logits exactly).
//! - **Alignment.** Safetensors starts the data on an 8-byte boundary and packs tensors
//!   back to back; the writer puts every tensor that is not whole 4-byte words last, so
//!   each u32/f32 tensor starts on a 4-byte file offset (checked at load) and a memory
//!   map views it as words without a copy. `write_buffer` needs sizes and GPU offsets in
//!   4-byte units (COPY_BUFFER_ALIGNMENT), which the upload paths pad to already.
//! - **Checksums: XXH3-128 per tensor** (`xxhash-rust`, pure Rust, wasm-safe). Measured on
//!   this project's dev machine: 13-14 GB/s against 1.1 GB/s for SHA-256 with SHA-NI, so
//!   verifying a 3 GB E2B artifact costs ~0.2 s instead of ~2.7 s, and verification stays
//!   on by default. They guard against corruption, not an adversary (who could rewrite
//!   them). Source files get SHA-256, the digest the Hugging Face Hub lists for LFS files.
//! - **Streaming writes** ([`writer`]): the header is written first with placeholder
//!   checksums of the final width, tensors follow block by block, and the header is
//!   rewritten at the end. The CLI writes to a temporary file and renames it only after
//!   success, so an interrupted convert leaves nothing that looks valid (and a file with
//!   placeholder checksums would fail verification anyway).
//! - **Contract at load, fail-closed** ([`reader`]): framing and sizes (a truncated file is
//!   named as such), format name and version (any other version is refused), configs,
//!   every tensor the plans need present with its dtype, shape and alignment, no other
//!   tensor, a checksum for each; then, per model loaded, every [`census`] route known to
//!   this build and usable on this device. The MTP routes are checked (and enabled) only
//!   for an instance that loads the assistant.
//! - **No filesystem here**: the library reads `&[u8]` and writes to any `Write + Seek`;
//!   files, memory maps, temporary files and progress bars belong to the CLI, and the
//!   browser can load an artifact from a fetched buffer with [`Artifact::parse`].

pub mod census;
pub mod convert;
pub mod manifest;
pub mod plan;
pub mod reader;
pub mod writer;

pub use convert::{convert, ConvertInput, ConvertWeights};
pub use manifest::{Manifest, Quant, SourceFile, FORMAT_VERSION};
pub use reader::{Artifact, ArtifactWeights, TensorRow, Which};

use crate::error::{Error, Result};
use crate::gpu::GpuContext;
use crate::model::assistant::{Assistant, AssistantOptions};
use crate::model::state::KvState;
use crate::model::target::{Model, ModelOptions};
use crate::ops::opset::OpSet;
use std::ops::Range;

/// How to load from an artifact.
pub struct LoadHooks<'h> {
    /// Check each tensor's checksum as it is read (the default; `--no-verify` skips it).
    pub verify: bool,
    /// (steps done, steps total), as [`Model::load`] reports it.
    pub progress: &'h mut dyn FnMut(usize, usize),
    /// Byte ranges of the artifact the loader is done with, after each progress step (the
    /// CLI drops their pages from its memory map; a browser ignores them).
    pub release: &'h dyn Fn(Range<usize>),
}

/// Loads the target of `artifact`: its routes checked on `ctx` (plain op set), its
/// weights uploaded as stored. `options.format` must be the artifact's.
pub fn load_target(
    ctx: &GpuContext,
    artifact: &Artifact<'_>,
    options: ModelOptions,
    hooks: LoadHooks<'_>,
) -> Result<Model> {
    if options.format != artifact.format() {
        return Err(Error::invalid(
            "artifact",
            "weight format asked for (an artifact's weights are converted already: drop \
             --dtype, or convert again with the format wanted)",
            artifact.manifest().quant.describe(),
            format!("{:?}", options.format),
        ));
    }
    census::check_routes(&artifact.manifest().census, "target", ctx, &OpSet::plain())?;
    let weights = artifact.weights(Which::Target, hooks.verify)?;
    let LoadHooks {
        progress, release, ..
    } = hooks;
    let model = Model::load(
        ctx,
        &weights,
        artifact.target_spec().clone(),
        options,
        &mut |done, total| {
            weights.take_read_ranges().into_iter().for_each(release);
            progress(done, total);
        },
    )?;
    weights.take_read_ranges().into_iter().for_each(release);
    weights.check_all_read()?;
    Ok(model)
}

/// Loads the assistant of `artifact` for `target`, with the MTP op set (an instance that
/// holds an assistant is the only one allowed the MTP routes).
pub fn load_assistant(
    ctx: &GpuContext,
    artifact: &Artifact<'_>,
    target: &KvState,
    verify: bool,
    release: &dyn Fn(Range<usize>),
) -> Result<Assistant> {
    let spec = artifact.assistant_spec().cloned().ok_or_else(|| {
        Error::invalid(
            "artifact",
            "assistant",
            "an artifact converted with --assistant",
            "an artifact holding a target only",
        )
    })?;
    let op_set = OpSet::with_mtp();
    census::check_routes(&artifact.manifest().census, "assistant", ctx, &op_set)?;
    let weights = artifact.weights(Which::Assistant, verify)?;
    let assistant = Assistant::load(
        ctx,
        &weights,
        spec,
        target,
        &op_set,
        AssistantOptions {
            format: artifact.format(),
        },
    )?;
    weights.take_read_ranges().into_iter().for_each(release);
    weights.check_all_read()?;
    Ok(assistant)
}
