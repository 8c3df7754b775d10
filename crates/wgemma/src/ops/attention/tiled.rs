//! The tiled prefill route (`attention_tiled.wgsl`, f32 vector math, or
//! `attention_tiled_coop.wgsl` on the tensor cores where the device has them): its guards,
//! its two kernels (one split writing the output, several writing split-K partials for
//! split_k's combine) and their dispatches. Planned by [`plan::plan_tiled`]; both kernels
//! take the same tiles, so one plan serves either.

use super::kv_cache::KvCache;
use super::plan::{self, AttentionPlan, Geometry};
use super::split_k::{AttentionScratch, Params};
use crate::error::Result;
use crate::gpu::{GpuContext, Grid, Kernel, KernelBuilder, Pass, Tensor};

const SHADER: &str = "attention_tiled";
const SHADER_COOP: &str = "attention_tiled_coop";
/// Workgroup memory of `attention_tiled_coop.wgsl` (its header adds it up).
const COOP_WORKGROUP_BYTES: u32 = 40_720;

/// What the device offers the tensor-core kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct CoopCaps {
    /// 16x16x16 f16 x f16 + f32 cooperative matrices.
    pub coop_16x16_f16: bool,
    /// `subgroupShuffleXor` and the subgroup builtins.
    pub subgroups: bool,
    pub subgroup_min_size: u32,
    pub subgroup_max_size: u32,
    pub workgroup_storage: u32,
}

impl CoopCaps {
    pub fn of(ctx: &GpuContext) -> CoopCaps {
        CoopCaps {
            coop_16x16_f16: ctx.has_coop_16x16_f16(),
            subgroups: ctx.has(wgpu::Features::SUBGROUP),
            subgroup_min_size: ctx.info.subgroup_min_size,
            subgroup_max_size: ctx.info.subgroup_max_size,
            workgroup_storage: ctx.limits.max_compute_workgroup_storage_size,
        }
    }
}

/// Why the tiled route cannot run on the tensor cores (empty: it can). The kernel needs
/// 16x16x16 f16/f32 cooperative matrices, subgroups of exactly 32 (8 per workgroup, each
/// owning its matrices and shuffling softmax rows) and its workgroup memory; otherwise the
/// f32 kernel runs. Fails closed: anything unknown keeps the f32 kernel.
pub(super) fn coop_guards(caps: &CoopCaps) -> Vec<String> {
    let mut failed = Vec::new();
    if !caps.coop_16x16_f16 {
        failed.push("16x16x16 f16/f32 cooperative matrices (not offered or not requested)".into());
    }
    if !caps.subgroups {
        failed.push("subgroup operations".into());
    }
    let (lo, hi) = (caps.subgroup_min_size, caps.subgroup_max_size);
    if lo != 32 || hi != 32 {
        failed.push(format!("subgroup size exactly 32 (found {lo}..={hi})"));
    }
    if caps.workgroup_storage < COOP_WORKGROUP_BYTES {
        failed.push(format!(
            "{COOP_WORKGROUP_BYTES} bytes of workgroup memory (device has {})",
            caps.workgroup_storage
        ));
    }
    failed
}

/// The tensor-core kernel's keys per block and slices of D for a head dim (the block is
/// always 8,192 values: 8 vec4 loads per invocation); None where it has no tiles.
pub(super) fn coop_block(head_dim: usize) -> Option<(usize, usize)> {
    match head_dim {
        256 => Some((32, 2)),
        512 => Some((16, 4)),
        _ => None,
    }
}

/// Why a layer has no tiled route (empty: it has one).
pub(super) fn tiled_guards(geo: &Geometry, k_eq_v: bool) -> Vec<String> {
    let mut failed = Vec::new();
    if plan::tiled_tile(geo.head_dim).is_none() {
        failed.push(format!("head_dim {} is not 256 or 512", geo.head_dim));
    }
    if geo.chunks.len() != 1 {
        failed.push(format!("{} cache chunks (needs one)", geo.chunks.len()));
    }
    if geo.sequences != 1 {
        failed.push(format!("{} sequences (needs one)", geo.sequences));
    }
    if k_eq_v {
        failed.push("a K = V cache (keys are not stored)".into());
    }
    failed
}

/// The tensors the tiled kernels bind.
pub(super) struct TiledBindings<'a> {
    pub params: &'a Params,
    pub out: &'a Tensor,
    pub positions: &'a Tensor,
    pub q: &'a Tensor,
    pub cache: &'a KvCache,
    pub scratch: &'a AttentionScratch,
}

#[derive(Debug)]
pub(super) struct TiledKernels {
    direct: Kernel,
    split: Kernel,
    /// The kernels are `attention_tiled_coop`'s (f16 operands on the tensor cores).
    pub tensor_cores: bool,
}

impl TiledKernels {
    /// Builds both kernels for a layer whose [`tiled_guards`] passed.
    pub(super) fn build(
        ctx: &GpuContext,
        head_dim: usize,
        b: &TiledBindings<'_>,
    ) -> Result<TiledKernels> {
        let (tile_queries, lanes) = plan::tiled_tile(head_dim).expect("the tiled guards passed");
        let chunk = &b.cache.chunks()[0];
        let tensor_cores = coop_guards(&CoopCaps::of(ctx)).is_empty();
        let kernel = |direct: bool| {
            let builder = if tensor_cores {
                let (block_keys, slices) = coop_block(head_dim).expect("the tiled guards passed");
                KernelBuilder::new(ctx, SHADER_COOP)
                    .constant("BK", block_keys as u64)
                    .constant("NS", slices as u64)
            } else {
                KernelBuilder::new(ctx, SHADER).constant("LANES", lanes as u64)
            };
            builder
                .entry("tiled")
                .constant("DIRECT", direct as u64)
                .constant("BQ", tile_queries as u64)
                .uniform(b.params)
                .tensor(b.out)
                .tensor(&b.scratch.acc)
                .tensor(&b.scratch.ml)
                .tensor(b.positions)
                .tensor(b.q)
                .tensor(chunk.k.as_ref().expect("keys are stored"))
                .tensor(&chunk.v)
                .build(Grid::new(1, 1, 1))
        };
        Ok(TiledKernels {
            direct: kernel(true)?,
            split: kernel(false)?,
            tensor_cores,
        })
    }

    /// The dispatches of a tiled `plan` with their grids (`combine`: split_k's).
    pub(super) fn kernels_for_plan(&self, plan: &AttentionPlan, combine: &Kernel) -> Vec<Kernel> {
        if plan.direct {
            vec![self.direct.with_grid(plan.partial_grid)]
        } else {
            vec![
                self.split.with_grid(plan.partial_grid),
                combine.with_grid(plan.combine_grid),
            ]
        }
    }

    /// Records a tiled `plan` (allocates nothing).
    pub(super) fn record_plan(&self, pass: &mut Pass<'_>, plan: &AttentionPlan, combine: &Kernel) {
        if plan.direct {
            pass.dispatch_grid(&self.direct, plan.partial_grid);
        } else {
            pass.dispatch_grid(&self.split, plan.partial_grid);
            pass.dispatch_grid(combine, plan.combine_grid);
        }
    }
}
