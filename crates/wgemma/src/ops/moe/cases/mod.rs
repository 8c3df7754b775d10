//! Harness cases of the router, the gathered-expert linear (every route and format, the
//! GeGLU epilogue, forced expert-chunk splits) and the combine, and the helpers the other
//! MoE cases share.

mod block;
mod lists;

pub use block::{BlockDown, MoeBlockCase, MoeDownCombineCase};
pub use lists::{bench_cases, random_cases};

use super::linear::{moe_expert_linear_with, MoeEpilogue, MoeLinearOptions, MoeLinearRoute};
use super::reference::{moe_combine_ref, moe_expert_linear_ref, moe_route_ref};
use super::weight::{ExpertFormat, ExpertHost, ExpertWeight};
use super::{moe_combine, moe_route};
use crate::error::{Error, Result};
use crate::gpu::{GpuContext, Kernel, Tensor};
use crate::harness::{Check, Expected, OpCase, Prepared, Rng, Values};
use crate::ops::linear::Q4Host;
use rand::seq::SliceRandom;
use rand::Rng as _;

/// A value every output element is first set to, so an unwritten element fails the check.
pub(super) const UNWRITTEN: f32 = -12345.0;

pub(super) fn random_f32(rng: &mut Rng, n: usize, range: f32) -> Vec<f32> {
    (0..n).map(|_| rng.random_range(-range..range)).collect()
}

/// Random expert weights in `format`: f32 rows of varied magnitude, or (`packed`) random Q4
/// words and f16 scales directly (a 26B-A4B `gate_up_proj` is 2 GB in f32).
pub(super) fn random_experts(
    rng: &mut Rng,
    experts: usize,
    n: usize,
    k: usize,
    format: ExpertFormat,
    packed: bool,
) -> Result<ExpertHost> {
    if let (ExpertFormat::Q4 { group }, true) = (format, packed) {
        let rows = experts * n;
        let words = (0..rows * k / 8).map(|_| rng.random::<u32>()).collect();
        let scales = (0..(rows * (k / group)).div_ceil(2))
            .map(|_| {
                let mut s = || half::f16::from_f32(rng.random_range(0.002..0.02)).to_bits() as u32;
                s() | s() << 16
            })
            .collect();
        return ExpertHost::from_q4(Q4Host::from_parts(rows, k, group, words, scales)?, experts);
    }
    let mut w = vec![0.0f32; experts * n * k];
    for row in w.chunks_mut(k) {
        let scale = 10f32.powf(rng.random_range(-1.5..0.5)) / (k as f32).sqrt();
        row.iter_mut()
            .for_each(|v| *v = rng.random_range(-1.0f32..1.0) * scale);
    }
    ExpertHost::from_f32(&w, experts, n, k, format)
}

/// `rows` routing rows of `top_k` distinct experts each, drawn from `pool`.
pub(super) fn random_ids(rng: &mut Rng, rows: usize, top_k: usize, pool: &[u32]) -> Vec<u32> {
    let mut ids = Vec::with_capacity(rows * top_k);
    for _ in 0..rows {
        let mut p = pool.to_vec();
        p.shuffle(rng);
        ids.extend_from_slice(&p[..top_k]);
    }
    ids
}

pub(super) fn filled(ctx: &GpuContext, label: &str, shape: &[usize]) -> Result<Tensor> {
    let n: usize = shape.iter().product();
    Tensor::from_f32(ctx, label, shape, &vec![UNWRITTEN; n])
}

pub(super) fn format_name(format: ExpertFormat) -> String {
    match format {
        ExpertFormat::F32 => "f32".into(),
        ExpertFormat::F16 => "f16".into(),
        ExpertFormat::Q4 { group } => format!("q4g{group}"),
    }
}

/// Uploads `host`, split into chunks of `split` experts when given.
pub(super) fn upload(
    ctx: &GpuContext,
    host: &ExpertHost,
    split: Option<usize>,
) -> Result<ExpertWeight> {
    let w = match split {
        Some(c) => ExpertWeight::upload_with_max_binding(
            ctx,
            host,
            host.expert_binding_bytes() * c as u64,
        )?,
        None => ExpertWeight::upload(ctx, host)?,
    };
    if split.is_some() && w.chunks().len() < 2 {
        return Err(Error::invalid(
            "moe case",
            "expert chunks of a forced split",
            ">= 2",
            w.chunks().len(),
        ));
    }
    Ok(w)
}

// ---- router ----

/// The router on random scores; `ties` draws them from a few integers so that equal
/// scores (also across the k-th place) are common.
#[derive(Debug, Clone)]
pub struct MoeRouteCase {
    pub m: usize,
    pub experts: usize,
    pub top_k: usize,
    pub ties: bool,
}

impl OpCase for MoeRouteCase {
    fn name(&self) -> String {
        format!(
            "moe_route m={} e={} k={}{}",
            self.m,
            self.experts,
            self.top_k,
            if self.ties { " ties" } else { "" }
        )
    }

    fn prepare(&self, ctx: &GpuContext, rng: &mut Rng) -> Result<Prepared> {
        let (m, e, k) = (self.m, self.experts, self.top_k);
        let scores: Vec<f32> = if self.ties {
            (0..m * e)
                .map(|_| rng.random_range(-2..=2) as f32)
                .collect()
        } else {
            random_f32(rng, m * e, 4.0)
        };
        let pes: Vec<f32> = (0..e).map(|_| rng.random_range(0.25..2.0)).collect();
        let ts = Tensor::from_f32(ctx, "scores", &[m, e], &scores)?;
        let tp = Tensor::from_f32(ctx, "per_expert_scale", &[e], &pes)?;
        let ids = Tensor::from_u32(ctx, "ids", &[m, k], &vec![u32::MAX; m * k])?;
        let weights = filled(ctx, "weights", &[m, k])?;
        let kernel = moe_route(ctx, &ts, &tp, &ids, &weights)?;
        let (rid, rw) = moe_route_ref(&scores, e, k, &pes);
        let max_w = rw.iter().fold(0.0f32, |a, v| a.max(v.abs()));
        Ok(Prepared {
            kernels: vec![kernel],
            outputs: vec![
                Expected {
                    name: "ids",
                    tensor: ids,
                    reference: Values::U32(rid),
                    check: Check::Exact,
                },
                Expected {
                    name: "weights",
                    tensor: weights,
                    reference: Values::F32(rw),
                    // exp on GPUs is accurate to a few ulp per unit of |x| (|x| <= 8 here).
                    check: Check::Close {
                        max_abs: 2e-5 * max_w,
                        nmse: 1e-9,
                    },
                },
            ],
            bytes_moved: 4 * (m * e + e + 2 * m * k) as u64,
        })
    }
}

// ---- gathered-expert linear ----

/// One gathered-expert linear: `experts` x `[n, k]` weights in `format`, `m` tokens with
/// `top_k` slots each. The case fails if the op does not build `route` (auto-chosen unless
/// `force`), so random cases also check route selection.
#[derive(Debug, Clone)]
pub struct MoeLinearCase {
    pub m: usize,
    pub top_k: usize,
    pub experts: usize,
    pub n: usize,
    pub k: usize,
    pub format: ExpertFormat,
    pub epilogue: MoeEpilogue,
    /// x is `[M * top_k, K]` (one row per slot, as for `down_proj`) instead of `[M, K]`.
    pub x_per_slot: bool,
    pub route: MoeLinearRoute,
    pub force: bool,
    /// Upload in chunks of this many experts (the weight must then have >= 2 chunks).
    pub split: Option<usize>,
    /// Experts the ids are drawn from (`None`: all); a small pool makes slots share experts.
    pub pool: Option<usize>,
    /// Make slot 0 refer to expert `E` (out of range): its y row must come out zero.
    pub invalid_slot: bool,
    /// Routings over disjoint expert sets, one kernel set each, all writing the same y, so a
    /// benchmark reads each selected expert from memory, not from L2; the last one is
    /// checked. `bytes_moved` counts every copy.
    pub copies: usize,
    /// Random packed Q4 words instead of quantised f32 weights (benchmark shapes).
    pub packed: bool,
}

impl MoeLinearCase {
    pub fn new(
        m: usize,
        top_k: usize,
        experts: usize,
        n: usize,
        k: usize,
        format: ExpertFormat,
        route: MoeLinearRoute,
    ) -> Self {
        MoeLinearCase {
            m,
            top_k,
            experts,
            n,
            k,
            format,
            epilogue: MoeEpilogue::None,
            x_per_slot: false,
            route,
            force: false,
            split: None,
            pool: None,
            invalid_slot: false,
            copies: 1,
            packed: false,
        }
    }
}

impl OpCase for MoeLinearCase {
    fn name(&self) -> String {
        let mut s = format!(
            "moe_expert_linear {}{} {} m={} k={} e={} [{}, {}]",
            self.route,
            if self.force { " (forced)" } else { "" },
            format_name(self.format),
            self.m,
            self.top_k,
            self.experts,
            self.n,
            self.k
        );
        if self.epilogue == MoeEpilogue::Geglu {
            s.push_str(" geglu");
        }
        if self.x_per_slot {
            s.push_str(" x/slot");
        }
        if let Some(p) = self.pool {
            s.push_str(&format!(" pool={p}"));
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
        const OP: &str = "moe_expert_linear case";
        let (m, top_k, e, n, k) = (self.m, self.top_k, self.experts, self.n, self.k);
        let slots = m * top_k;
        let host = random_experts(rng, e, n, k, self.format, self.packed)?;
        let w = upload(ctx, &host, self.split)?;
        let x_rows = if self.x_per_slot { slots } else { m };
        let x = random_f32(rng, x_rows * k, 1.0);
        let tx = Tensor::from_f32(ctx, "x", &[x_rows, k], &x)?;
        let geglu = self.epilogue == MoeEpilogue::Geglu;
        let outputs = if geglu { n / 2 } else { n };
        let ty = filled(ctx, "y", &[slots, outputs])?;
        let options = MoeLinearOptions {
            route: self.force.then_some(self.route),
            epilogue: self.epilogue,
        };
        // Disjoint expert sets for the copies, each of `distinct` experts.
        let mut all: Vec<u32> = (0..e as u32).collect();
        all.shuffle(rng);
        let copies = self.copies.max(1);
        let pool_size = self.pool.unwrap_or(e / copies).clamp(top_k, e);
        let mut kernels: Vec<Kernel> = Vec::new();
        let mut bytes_moved = 0;
        let mut last_ids = Vec::new();
        for c in 0..copies {
            let start = (c * pool_size) % (e - pool_size + 1);
            let mut ids = random_ids(rng, m, top_k, &all[start..start + pool_size]);
            if self.invalid_slot {
                ids[0] = e as u32;
            }
            let tids = Tensor::from_u32(ctx, "ids", &[m, top_k], &ids)?;
            let op = moe_expert_linear_with(ctx, &tx, &tids, &w, &ty, &options)?;
            if op.route() != self.route {
                return Err(Error::invalid(OP, "route", self.route, op.route()));
            }
            let mut distinct: Vec<u32> =
                ids.iter().copied().filter(|&i| (i as usize) < e).collect();
            distinct.sort_unstable();
            distinct.dedup();
            bytes_moved += distinct.len() as u64 * w.expert_bytes()
                + tx.byte_size()
                + tids.byte_size()
                + ty.byte_size();
            kernels.extend(op.into_kernels());
            last_ids = ids;
        }
        let x_div = if self.x_per_slot { 1 } else { top_k };
        let r = moe_expert_linear_ref(&x, x_div, &last_ids, &host, geglu);
        let max_abs = r.error_bound.iter().fold(0.0f64, |a, &b| a.max(b));
        Ok(Prepared {
            kernels,
            outputs: vec![Expected {
                name: "y",
                tensor: ty,
                reference: Values::F32(r.y),
                check: Check::Close {
                    max_abs: max_abs as f32 + f32::MIN_POSITIVE,
                    nmse: 1e-9,
                },
            }],
            bytes_moved,
        })
    }
}

// ---- combine ----

#[derive(Debug, Clone)]
pub struct MoeCombineCase {
    pub m: usize,
    pub top_k: usize,
    pub h: usize,
}

impl OpCase for MoeCombineCase {
    fn name(&self) -> String {
        format!("moe_combine m={} k={} h={}", self.m, self.top_k, self.h)
    }

    fn prepare(&self, ctx: &GpuContext, rng: &mut Rng) -> Result<Prepared> {
        let (m, top_k, h) = (self.m, self.top_k, self.h);
        let y = random_f32(rng, m * top_k * h, 2.0);
        let w: Vec<f32> = (0..m * top_k).map(|_| rng.random_range(0.0..1.5)).collect();
        let ty = Tensor::from_f32(ctx, "y", &[m * top_k, h], &y)?;
        let tw = Tensor::from_f32(ctx, "weights", &[m, top_k], &w)?;
        let out = filled(ctx, "out", &[m, h])?;
        let kernel = moe_combine(ctx, &ty, &tw, &out)?;
        let magnitude = 2.0 * 1.5 * top_k as f32;
        let bytes_moved = ty.byte_size() + tw.byte_size() + out.byte_size();
        Ok(Prepared {
            kernels: vec![kernel],
            outputs: vec![Expected {
                name: "out",
                tensor: out,
                reference: Values::F32(moe_combine_ref(&y, &w, top_k, h)),
                // Same order as the reference; only FMA contraction may differ.
                check: Check::Close {
                    max_abs: (top_k as f32 + 1.0) * f32::EPSILON * magnitude,
                    nmse: 1e-12,
                },
            }],
            bytes_moved,
        })
    }
}
