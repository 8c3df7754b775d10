//! The tiled prefill route (`attention_tiled.wgsl`): its guards, its two kernels (one split
//! writing the output, several writing split-K partials for split_k's combine) and their
//! dispatches. Planned by [`plan::plan_tiled`].

use super::plan::{self, AttentionPlan, Geometry};
use super::{AttentionScratch, KvCache, Params};
use crate::error::Result;
use crate::gpu::{GpuContext, Grid, Kernel, KernelBuilder, Pass, Tensor};

const SHADER: &str = "attention_tiled";

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
        let kernel = |direct: bool| {
            KernelBuilder::new(ctx, SHADER)
                .entry("tiled")
                .constant("DIRECT", direct as u64)
                .constant("BQ", tile_queries as u64)
                .constant("LANES", lanes as u64)
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
