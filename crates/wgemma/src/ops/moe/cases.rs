//! Harness cases of the MoE ops: the router, the gathered-expert linear (every route and
//! format, the GeGLU epilogue, forced expert-chunk splits), the combine and the whole expert
//! block; random small shapes for the test suite and the 26B-A4B shapes for benchmarks.

use super::linear::{moe_expert_linear_with, MoeEpilogue, MoeLinearOptions, MoeLinearRoute};
use super::reference::{moe_combine_ref, moe_expert_linear_ref, moe_experts_ref, moe_route_ref};
use super::weight::{ExpertFormat, ExpertHost, ExpertWeight};
use super::{moe_combine, moe_route};
use crate::error::{Error, Result};
use crate::gpu::{GpuContext, Kernel, Tensor};
use crate::harness::{Check, Expected, OpCase, Prepared, Rng, Values};
use crate::ops::geglu::geglu_fused;
use crate::ops::linear::Q4Host;
use rand::seq::SliceRandom;
use rand::Rng as _;

/// A value every output element is first set to, so an unwritten element fails the check.
const UNWRITTEN: f32 = -12345.0;

fn random_f32(rng: &mut Rng, n: usize, range: f32) -> Vec<f32> {
    (0..n).map(|_| rng.random_range(-range..range)).collect()
}

/// Random expert weights in `format`: f32 rows of varied magnitude, or (`packed`) random Q4
/// words and f16 scales directly (a 26B-A4B `gate_up_proj` is 2 GB in f32).
fn random_experts(
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
fn random_ids(rng: &mut Rng, rows: usize, top_k: usize, pool: &[u32]) -> Vec<u32> {
    let mut ids = Vec::with_capacity(rows * top_k);
    for _ in 0..rows {
        let mut p = pool.to_vec();
        p.shuffle(rng);
        ids.extend_from_slice(&p[..top_k]);
    }
    ids
}

fn filled(ctx: &GpuContext, label: &str, shape: &[usize]) -> Result<Tensor> {
    let n: usize = shape.iter().product();
    Tensor::from_f32(ctx, label, shape, &vec![UNWRITTEN; n])
}

fn format_name(format: ExpertFormat) -> String {
    match format {
        ExpertFormat::F32 => "f32".into(),
        ExpertFormat::F16 => "f16".into(),
        ExpertFormat::Q4 { group } => format!("q4g{group}"),
    }
}

/// Uploads `host`, split into chunks of `split` experts when given.
fn upload(ctx: &GpuContext, host: &ExpertHost, split: Option<usize>) -> Result<ExpertWeight> {
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

// ---- the whole expert block ----

/// Router scores -> `moe_route` -> `gate_up_proj` (with the GeGLU epilogue, or plain plus
/// `geglu_fused`) -> `down_proj` -> `moe_combine`, against HF's expert block in f64.
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
    /// Upload both weights in chunks of this many experts.
    pub split: Option<usize>,
    /// Routings over disjoint expert sets (see [`MoeLinearCase::copies`]).
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
            split: None,
            copies: 1,
            packed: false,
        }
    }
}

impl OpCase for MoeBlockCase {
    fn name(&self) -> String {
        let mut s = format!(
            "moe_block {} m={} k={} e={} h={} i={}{}",
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
            kernels.extend(
                moe_expert_linear_with(ctx, &a, &ids, &w_d, &y, &Default::default())?
                    .into_kernels(),
            );
            kernels.push(moe_combine(ctx, &y, &weights, &out)?);
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
        let (ids, rid, rw) = last.expect("copies >= 1");
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

// ---- case lists ----

fn boxed<C: OpCase + 'static>(c: C) -> Box<dyn OpCase> {
    Box::new(c)
}

fn random_format(rng: &mut Rng) -> ExpertFormat {
    match rng.random_range(0..5) {
        0 => ExpertFormat::F32,
        1 => ExpertFormat::F16,
        2 => ExpertFormat::Q4 { group: 64 },
        3 => ExpertFormat::Q4 { group: 128 },
        _ => ExpertFormat::Q4 { group: 32 },
    }
}

/// The Q4 group, or 32 (the unit of H and I in random shapes) for dense formats.
fn group_of(format: ExpertFormat) -> usize {
    match format {
        ExpertFormat::Q4 { group } => group,
        _ => 32,
    }
}

fn route_for(format: ExpertFormat) -> MoeLinearRoute {
    match format {
        ExpertFormat::F32 => MoeLinearRoute::DenseF32,
        ExpertFormat::F16 => MoeLinearRoute::DenseF16,
        ExpertFormat::Q4 { .. } => MoeLinearRoute::Q4Grouped,
    }
}

/// Random small shapes (E 4..16, top_k 1..4, M 1..5, H and I multiples of 32 up to 256):
/// the router (random and tied scores), the linear in all three formats with and without
/// the GeGLU epilogue and with x per token or per slot, the generic Q4 route (auto with
/// K % 32 != 0 and forced), a forced expert-chunk split, an out-of-range id, the combine and
/// the whole block.
pub fn random_cases(rng: &mut Rng) -> Vec<Box<dyn OpCase>> {
    let e = |rng: &mut Rng| rng.random_range(4..=16);
    let mut cases = Vec::new();
    for ties in [false, true] {
        let experts = e(rng);
        cases.push(boxed(MoeRouteCase {
            m: rng.random_range(1..=5),
            experts,
            top_k: rng.random_range(1..=4.min(experts)),
            ties,
        }));
    }
    let q4 = |rng: &mut Rng| ExpertFormat::Q4 {
        group: [32, 64, 128][rng.random_range(0..3)],
    };
    for format in [ExpertFormat::F32, ExpertFormat::F16, q4(rng), q4(rng)] {
        let group = group_of(format);
        let mut c = MoeLinearCase::new(
            rng.random_range(1..=5),
            rng.random_range(1..=4),
            e(rng),
            2 * rng.random_range(1..=64),
            group * rng.random_range(1..=256 / group),
            format,
            route_for(format),
        );
        c.epilogue = if rng.random_bool(0.5) {
            MoeEpilogue::Geglu
        } else {
            MoeEpilogue::None
        };
        c.x_per_slot = rng.random_bool(0.5);
        if rng.random_bool(0.5) {
            c.pool = Some(c.top_k.max(rng.random_range(1..=4)));
        }
        cases.push(boxed(c));
    }
    // K % 32 != 0: only the generic Q4 route is eligible.
    let mut c = MoeLinearCase::new(
        rng.random_range(1..=5),
        rng.random_range(1..=4),
        e(rng),
        rng.random_range(1..=40),
        8 * (2 * rng.random_range(0..12) + 1),
        ExpertFormat::Q4 { group: 8 },
        MoeLinearRoute::Q4Generic,
    );
    c.invalid_slot = true;
    cases.push(boxed(c));
    // The generic route forced on a grouped-eligible shape, with the epilogue.
    let format = q4(rng);
    let mut c = MoeLinearCase::new(
        rng.random_range(1..=5),
        rng.random_range(1..=4),
        e(rng),
        2 * rng.random_range(1..=40),
        group_of(format) * rng.random_range(1..=256 / group_of(format)),
        format,
        MoeLinearRoute::Q4Generic,
    );
    c.force = true;
    c.epilogue = MoeEpilogue::Geglu;
    cases.push(boxed(c));
    // A forced split into chunks of a few experts, any format.
    let format = random_format(rng);
    let (n, k) = (2 * rng.random_range(1..=32), 128);
    let mut c = MoeLinearCase::new(
        rng.random_range(1..=5),
        rng.random_range(1..=4),
        e(rng),
        n,
        k,
        format,
        route_for(format),
    );
    c.split = Some(rng.random_range(1..=3));
    c.invalid_slot = rng.random_bool(0.5);
    c.epilogue = if rng.random_bool(0.5) {
        MoeEpilogue::Geglu
    } else {
        MoeEpilogue::None
    };
    cases.push(boxed(c));
    cases.push(boxed(MoeCombineCase {
        m: rng.random_range(1..=5),
        top_k: rng.random_range(1..=4),
        h: 32 * rng.random_range(1..=8),
    }));
    let experts = e(rng);
    let format = random_format(rng);
    let g = group_of(format);
    let mut c = MoeBlockCase::new(
        rng.random_range(1..=5),
        rng.random_range(1..=4.min(experts)),
        experts,
        g * rng.random_range(1..=256 / g),
        g * rng.random_range(1..=128 / g),
        format,
    );
    c.fused_geglu = rng.random_bool(0.5);
    cases.push(boxed(c));
    cases
}

/// Gemma 4 26B-A4B: hidden 2816, expert intermediate 704, 128 experts, top-8.
pub const A4B_HIDDEN: usize = 2816;
pub const A4B_INTER: usize = 704;
pub const A4B_EXPERTS: usize = 128;
pub const A4B_TOP_K: usize = 8;

/// Routings per run so that each run reads its experts from memory: disjoint expert sets
/// cover all 128 experts (M = 1: 16 sets of 8; M = 3: 5 sets of 24).
fn a4b_copies(m: usize) -> usize {
    A4B_EXPERTS / (m * A4B_TOP_K)
}

fn a4b_linear(
    m: usize,
    n: usize,
    k: usize,
    epilogue: MoeEpilogue,
    per_slot: bool,
) -> MoeLinearCase {
    let mut c = MoeLinearCase::new(
        m,
        A4B_TOP_K,
        A4B_EXPERTS,
        n,
        k,
        ExpertFormat::Q4 { group: 32 },
        MoeLinearRoute::Q4Grouped,
    );
    c.epilogue = epilogue;
    c.x_per_slot = per_slot;
    c.copies = a4b_copies(m);
    c.pool = Some(m * A4B_TOP_K);
    c.packed = true;
    c
}

/// The 26B-A4B MoE shapes at M = 1 (decode) and 3 (verify), Q4 group 32: the router, the
/// gate_up projection with the GeGLU epilogue and without, the down projection (x per
/// slot), the combine, and the whole block. Us/run covers every routing of a run.
pub fn bench_cases() -> Vec<Box<dyn OpCase>> {
    let mut cases = Vec::new();
    for m in [1, 3] {
        cases.push(boxed(MoeRouteCase {
            m,
            experts: A4B_EXPERTS,
            top_k: A4B_TOP_K,
            ties: false,
        }));
        cases.push(boxed(a4b_linear(
            m,
            2 * A4B_INTER,
            A4B_HIDDEN,
            MoeEpilogue::Geglu,
            false,
        )));
        cases.push(boxed(a4b_linear(
            m,
            2 * A4B_INTER,
            A4B_HIDDEN,
            MoeEpilogue::None,
            false,
        )));
        cases.push(boxed(a4b_linear(
            m,
            A4B_HIDDEN,
            A4B_INTER,
            MoeEpilogue::None,
            true,
        )));
        cases.push(boxed(MoeCombineCase {
            m,
            top_k: A4B_TOP_K,
            h: A4B_HIDDEN,
        }));
        let mut c = MoeBlockCase::new(
            m,
            A4B_TOP_K,
            A4B_EXPERTS,
            A4B_HIDDEN,
            A4B_INTER,
            ExpertFormat::Q4 { group: 32 },
        );
        c.copies = a4b_copies(m);
        c.packed = true;
        cases.push(boxed(c));
    }
    cases
}
