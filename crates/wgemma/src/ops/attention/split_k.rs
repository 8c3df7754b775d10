//! What the attention routes share: the uniform parameters of the split-K kernels (the
//! tiled route binds them too) and the scratch their partials go through. Its own file, below
//! `mod.rs`, `decode.rs` and `tiled.rs`, so that the routes need not import the module that
//! chooses between them.

use crate::error::Result;
use crate::gpu::{DType, GpuContext, Tensor};

/// The uniform parameters of the split-K kernels (`attention.wgsl`, `attention_generic.wgsl`),
/// bound by the tiled route too.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
pub(super) struct Params {
    pub(super) heads: u32,
    pub(super) kv_heads: u32,
    pub(super) group: u32,
    pub(super) d4: u32,
    pub(super) gt: u32,
    pub(super) head_tiles: u32,
    pub(super) window: u32,
    pub(super) slots: u32,
    pub(super) ring: u32,
    pub(super) chunk_start: u32,
    pub(super) chunk_slots: u32,
    pub(super) chunk_index: u32,
    pub(super) rot_pairs: u32,
    pub(super) sequences: u32,
    pub(super) _pad: [u32; 2],
}

/// Partial results of split-K attention, shared by every layer of a model (layers run one
/// after another in the pass).
#[derive(Debug, Clone)]
pub struct AttentionScratch {
    pub(super) acc: Tensor,
    pub(super) ml: Tensor,
    pub(super) acc_floats: usize,
    pub(super) max_query_splits: usize,
}

impl AttentionScratch {
    /// Room for `max_query_splits` (split, query) partials of head_dim up to `max_head_dim`.
    pub fn new(ctx: &GpuContext, max_query_splits: usize, max_head_dim: usize) -> Result<Self> {
        let acc_floats = max_query_splits.max(1) * max_head_dim.max(4);
        Ok(AttentionScratch {
            acc: Tensor::zeros(ctx, "attention.part_acc", &[acc_floats], DType::F32)?,
            ml: Tensor::zeros(
                ctx,
                "attention.part_ml",
                &[(max_query_splits + 1) * 2],
                DType::F32,
            )?,
            acc_floats,
            max_query_splits,
        })
    }

    /// The default size: 16384 partials (32 MiB at head_dim 512), enough for the planner's
    /// full parallelism at decode and verify shapes up to 32 query heads.
    pub fn for_head_dim(ctx: &GpuContext, max_head_dim: usize) -> Result<Self> {
        AttentionScratch::new(ctx, 16_384, max_head_dim)
    }
}
