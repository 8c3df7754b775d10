//! Harness cases of the down projection + combine op and of the whole expert block
//! (router -> gate_up + GeGLU -> down -> combine) against HF's expert block in f64.

use super::{filled, format_name, random_experts, random_f32, random_ids, upload};
use crate::error::{Error, Result};
use crate::gpu::{GpuContext, Tensor};
use crate::harness::{Check, Expected, OpCase, Prepared, Rng, Values};
use crate::ops::geglu::geglu_fused;
use crate::ops::moe::down_combine::{moe_expert_linear_combine, MoeCombineRoute};
use crate::ops::moe::linear::{moe_expert_linear_with, MoeEpilogue, MoeLinearOptions};
use crate::ops::moe::reference::{moe_expert_linear_ref, moe_experts_ref, moe_route_ref};
use crate::ops::moe::weight::ExpertFormat;
use crate::ops::moe::{moe_combine, moe_route};
use rand::seq::SliceRandom;
use rand::Rng as _;

/// `out = sum_j weights[m, j] * W[ids[m, j]] x[m * top_k + j]` through
/// [`moe_expert_linear_combine`]; the case fails unless the op builds `route` (auto-chosen
/// unless `force`).
#[derive(Debug, Clone)]
pub struct MoeDownCombineCase {
    pub m: usize,
    pub top_k: usize,
    pub experts: usize,
    pub n: usize,
    pub k: usize,
    pub format: ExpertFormat,
    pub route: MoeCombineRoute,
    pub force: bool,
    /// x is `[M, K]` (one row per token) instead of `[M * top_k, K]`.
    pub x_per_token: bool,
    pub split: Option<usize>,
    /// Make slot 0 refer to expert `E` (out of range): it must contribute nothing.
    pub invalid_slot: bool,
    /// Routings over disjoint expert sets, each writing the same out (benchmarks); the last
    /// is checked.
    pub copies: usize,
    pub packed: bool,
}

impl MoeDownCombineCase {
    pub fn new(
        m: usize,
        top_k: usize,
        experts: usize,
        n: usize,
        k: usize,
        format: ExpertFormat,
        route: MoeCombineRoute,
    ) -> Self {
        MoeDownCombineCase {
            m,
            top_k,
            experts,
            n,
            k,
            format,
            route,
            force: false,
            x_per_token: false,
            split: None,
            invalid_slot: false,
            copies: 1,
            packed: false,
        }
    }
}

impl OpCase for MoeDownCombineCase {
    fn name(&self) -> String {
        let mut s = format!(
            "moe_expert_linear_combine {}{} {} m={} k={} e={} [{}, {}]",
            self.route,
            if self.force { " (forced)" } else { "" },
            format_name(self.format),
            self.m,
            self.top_k,
            self.experts,
            self.n,
            self.k
        );
        if self.x_per_token {
            s.push_str(" x/token");
        }
        if let Some(c) = self.split {
            s.push_str(&format!(" split={c} experts/chunk"));
        }
        if self.invalid_slot {
            s.push_str(" invalid-id");
        }
        if self.copies > 1 {
            s.push_str(&format!(" x{} routings/run", self.copies));
        }
        s
    }

    fn prepare(&self, ctx: &GpuContext, rng: &mut Rng) -> Result<Prepared> {
        let (m, top_k, e, n, k) = (self.m, self.top_k, self.experts, self.n, self.k);
        let slots = m * top_k;
        let host = random_experts(rng, e, n, k, self.format, self.packed)?;
        let w = upload(ctx, &host, self.split)?;
        let x_rows = if self.x_per_token { m } else { slots };
        let x = random_f32(rng, x_rows * k, 1.0);
        let tx = Tensor::from_f32(ctx, "x", &[x_rows, k], &x)?;
        let weights: Vec<f32> = (0..slots).map(|_| rng.random_range(0.0..1.5)).collect();
        let tw = Tensor::from_f32(ctx, "weights", &[m, top_k], &weights)?;
        let out = filled(ctx, "out", &[m, n])?;
        let copies = self.copies.max(1);
        let mut all: Vec<u32> = (0..e as u32).collect();
        all.shuffle(rng);
        let pool = (e / copies).clamp(top_k, e);
        let (mut kernels, mut bytes_moved, mut last_ids) = (Vec::new(), 0, Vec::new());
        for c in 0..copies {
            let start = (c * pool) % (e - pool + 1);
            let mut ids = random_ids(rng, m, top_k, &all[start..start + pool]);
            if self.invalid_slot {
                ids[0] = e as u32;
            }
            let tids = Tensor::from_u32(ctx, "ids", &[m, top_k], &ids)?;
            let forced = self.force.then_some(self.route);
            let op = moe_expert_linear_combine(ctx, &tx, &tids, &tw, &w, &out, forced)?;
            if op.route() != self.route {
                return Err(Error::invalid(
                    "moe_expert_linear_combine case",
                    "route",
                    self.route,
                    op.route(),
                ));
            }
            // Fused: each token reads its own slots' experts.
            let reads: u64 = (0..m)
                .map(|t| {
                    let mut d: Vec<u32> = ids[t * top_k..(t + 1) * top_k]
                        .iter()
                        .copied()
                        .filter(|&i| (i as usize) < e)
                        .collect();
                    d.sort_unstable();
                    d.dedup();
                    d.len() as u64
                })
                .sum();
            bytes_moved += reads * w.expert_bytes()
                + tx.byte_size()
                + tids.byte_size()
                + tw.byte_size()
                + out.byte_size();
            kernels.extend(op.into_kernels());
            last_ids = ids;
        }
        let x_div = if self.x_per_token { top_k } else { 1 };
        let y = moe_expert_linear_ref(&x, x_div, &last_ids, &host, false);
        let mut reference = vec![0.0f32; m * n];
        let mut max_abs = 0.0f64;
        for t in 0..m {
            for o in 0..n {
                let (mut v, mut bound, mut mag) = (0.0f64, 0.0f64, 0.0f64);
                for j in 0..top_k {
                    let i = (t * top_k + j) * n + o;
                    let wj = weights[t * top_k + j] as f64;
                    v += wj * y.y[i] as f64;
                    bound += wj.abs() * y.error_bound[i];
                    mag += (wj * y.y[i] as f64).abs();
                }
                reference[t * n + o] = v as f32;
                let sum_error = (top_k as f64 + 2.0) * f64::from(f32::EPSILON) * mag;
                max_abs = max_abs.max(bound + sum_error);
            }
        }
        Ok(Prepared {
            kernels,
            outputs: vec![Expected {
                name: "out",
                tensor: out,
                reference: Values::F32(reference),
                check: Check::Close {
                    max_abs: max_abs as f32 + f32::MIN_POSITIVE,
                    nmse: 1e-9,
                },
            }],
            bytes_moved,
        })
    }
}

/// How the block case runs the down projection and the combine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockDown {
    /// [`moe_expert_linear_with`] then [`moe_combine`].
    Separate,
    /// [`moe_expert_linear_combine`] (auto route: fused for M <= 4 with Q4).
    Combined,
}

/// Router scores -> `moe_route` -> `gate_up_proj` (with the GeGLU epilogue, or plain plus
/// `geglu_fused`) -> `down_proj` and combine (see [`BlockDown`]), against HF's expert block
/// in f64.
#[derive(Debug, Clone)]
pub struct MoeBlockCase {
    pub m: usize,
    pub top_k: usize,
    pub experts: usize,
    pub hidden: usize,
    pub inter: usize,
    pub format: ExpertFormat,
    /// GeGLU as the gate_up epilogue (else a separate `geglu_fused` dispatch).
    pub fused_geglu: bool,
    pub down: BlockDown,
    /// Upload both weights in chunks of this many experts.
    pub split: Option<usize>,
    /// Routings over disjoint expert sets (see [`super::MoeLinearCase::copies`]).
    pub copies: usize,
    pub packed: bool,
}

impl MoeBlockCase {
    pub fn new(
        m: usize,
        top_k: usize,
        experts: usize,
        hidden: usize,
        inter: usize,
        format: ExpertFormat,
    ) -> Self {
        MoeBlockCase {
            m,
            top_k,
            experts,
            hidden,
            inter,
            format,
            fused_geglu: true,
            down: BlockDown::Combined,
            split: None,
            copies: 1,
            packed: false,
        }
    }
}

impl OpCase for MoeBlockCase {
    fn name(&self) -> String {
        let mut s = format!(
            "moe_block {} m={} k={} e={} h={} i={}{}{}",
            format_name(self.format),
            self.m,
            self.top_k,
            self.experts,
            self.hidden,
            self.inter,
            if self.fused_geglu {
                " geglu-epilogue"
            } else {
                " geglu-separate"
            },
            match self.down {
                BlockDown::Separate => " down+combine",
                BlockDown::Combined => " down-combined",
            }
        );
        if let Some(c) = self.split {
            s.push_str(&format!(" split={c} experts/chunk"));
        }
        if self.copies > 1 {
            s.push_str(&format!(" x{} routings/run", self.copies));
        }
        s
    }

    fn prepare(&self, ctx: &GpuContext, rng: &mut Rng) -> Result<Prepared> {
        let (m, top_k, e, h, i) = (self.m, self.top_k, self.experts, self.hidden, self.inter);
        let slots = m * top_k;
        let gate_up = random_experts(rng, e, 2 * i, h, self.format, self.packed)?;
        let down = random_experts(rng, e, h, i, self.format, self.packed)?;
        let w_gu = upload(ctx, &gate_up, self.split)?;
        let w_d = upload(ctx, &down, self.split)?;
        let x2 = random_f32(rng, m * h, 1.0);
        let pes: Vec<f32> = (0..e).map(|_| rng.random_range(0.25..2.0)).collect();
        let tx = Tensor::from_f32(ctx, "x2", &[m, h], &x2)?;
        let tp = Tensor::from_f32(ctx, "per_expert_scale", &[e], &pes)?;
        let a = filled(ctx, "a", &[slots, i])?;
        let gu = filled(ctx, "gate_up", &[slots, 2 * i])?;
        let y = filled(ctx, "y", &[slots, h])?;
        let out = filled(ctx, "out", &[m, h])?;
        let copies = self.copies.max(1);
        let mut all: Vec<u32> = (0..e as u32).collect();
        all.shuffle(rng);
        let per_copy = (e / copies).max(top_k);
        let mut kernels = Vec::new();
        let mut bytes_moved = 0;
        let mut last = None;
        for c in 0..copies {
            // Scores that put the copy's experts on top (all experts when copies == 1).
            let start = (c * per_copy) % (e - per_copy + 1);
            let favoured = &all[start..start + per_copy];
            let mut scores = random_f32(rng, m * e, 2.0);
            if copies > 1 {
                for row in scores.chunks_mut(e) {
                    favoured.iter().for_each(|&f| row[f as usize] += 8.0);
                }
            }
            let ts = Tensor::from_f32(ctx, "scores", &[m, e], &scores)?;
            let ids = Tensor::from_u32(ctx, "ids", &[m, top_k], &vec![u32::MAX; slots])?;
            let weights = filled(ctx, "weights", &[m, top_k])?;
            kernels.push(moe_route(ctx, &ts, &tp, &ids, &weights)?);
            let geglu = MoeLinearOptions {
                route: None,
                epilogue: MoeEpilogue::Geglu,
            };
            if self.fused_geglu {
                kernels.extend(
                    moe_expert_linear_with(ctx, &tx, &ids, &w_gu, &a, &geglu)?.into_kernels(),
                );
            } else {
                let plain = MoeLinearOptions::default();
                kernels.extend(
                    moe_expert_linear_with(ctx, &tx, &ids, &w_gu, &gu, &plain)?.into_kernels(),
                );
                kernels.push(geglu_fused(ctx, &gu, &a)?);
            }
            match self.down {
                BlockDown::Separate => {
                    kernels.extend(
                        moe_expert_linear_with(ctx, &a, &ids, &w_d, &y, &Default::default())?
                            .into_kernels(),
                    );
                    kernels.push(moe_combine(ctx, &y, &weights, &out)?);
                }
                BlockDown::Combined => kernels.extend(
                    moe_expert_linear_combine(ctx, &a, &ids, &weights, &w_d, &out, None)?
                        .into_kernels(),
                ),
            }
            let (rid, rw) = moe_route_ref(&scores, e, top_k, &pes);
            let mut distinct = rid.clone();
            distinct.sort_unstable();
            distinct.dedup();
            bytes_moved += distinct.len() as u64 * (w_gu.expert_bytes() + w_d.expert_bytes())
                + ts.byte_size()
                + tx.byte_size()
                + out.byte_size();
            last = Some((ids, rid, rw));
        }
        let Some((ids, rid, rw)) = last else {
            return Err(Error::invalid("moe_block case", "routings", ">= 1", 0));
        };
        let (reference, magnitude) = moe_experts_ref(&x2, &rid, &rw, top_k, &gate_up, &down);
        Ok(Prepared {
            kernels,
            outputs: vec![
                Expected {
                    name: "ids",
                    tensor: ids,
                    reference: Values::U32(rid),
                    check: Check::Exact,
                },
                Expected {
                    name: "out",
                    tensor: out,
                    reference: Values::F32(reference),
                    // f32 rounding through two linears, GeGLU, the router weights and the
                    // combine stays far below 1e-4 of the magnitude; a wrong expert, slot
                    // or weight moves the output by O(magnitude).
                    check: Check::Close {
                        max_abs: (1e-4 * magnitude) as f32 + f32::MIN_POSITIVE,
                        nmse: 1e-8,
                    },
                },
            ],
            bytes_moved,
        })
    }
}
