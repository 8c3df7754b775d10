//! The census: which operator routes a model needs at its shapes, derived from its plan.
//! It covers the routes that depend on the weights (linear routes per layout and shape,
//! embedding table formats, MoE expert routes) and the MTP head's gated routes (TopK,
//! the certified scatter); shape-generic ops every model uses (norms, RoPE, attention) are
//! not listed.
//!
//! At load every route of the models being loaded is checked against this build (the
//! route is one it knows and its shaders are in the registry) and this device (workgroup
//! limits of its shaders; for Q4 routes every guard at every shape, portable reduction:
//! subgroups are optional). MTP routes are allowed only for an instance holding an
//! assistant ([`OpSet::with_mtp`]).

use super::plan::{PlannedWeight, Prep};
use crate::error::{Error, Result};
use crate::gpu::registry;
use crate::gpu::GpuContext;
use crate::model::assistant::{AssistantHead, AssistantSpec};
use crate::ops::linear::{q4_failed_guards, DeviceCaps, LinearRoute, Q4Shape, Q4_ROUTES};
use crate::ops::opset::{GatedOp, OpSet};
use crate::weights::layout::MatrixLayout;
use crate::weights::layout::MatrixUse;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

const OP: &str = "artifact census";

/// Rows of the forwards a target runs: decode, speculative verify (k = 2 drafts), prefill
/// (the default chunk).
pub const DECODE_ROWS: usize = 1;
pub const VERIFY_ROWS: usize = 3;
pub const PREFILL_ROWS: usize = 64;

/// One route a model needs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CensusRoute {
    /// `target` or `assistant`.
    pub model: String,
    pub op: String,
    pub route: String,
    /// Rows M of the forward it serves (linear routes), else 0.
    pub rows: usize,
    /// `[N, K]` of every weight it runs on (linear and expert routes; `[rows, dim]` of
    /// tables), sorted.
    pub shapes: Vec<[usize; 2]>,
    /// Q4 group size, 0 for dense layouts.
    pub group: usize,
    /// Only an instance holding an assistant may use it.
    pub mtp: bool,
}

impl CensusRoute {
    /// `op/route`.
    pub fn id(&self) -> String {
        format!("{}/{}", self.op, self.route)
    }
}

/// A route this build has.
struct KnownRoute {
    op: &'static str,
    route: &'static str,
    shaders: &'static [&'static str],
    gated: Option<GatedOp>,
}

const fn known(
    op: &'static str,
    route: &'static str,
    shaders: &'static [&'static str],
    gated: Option<GatedOp>,
) -> KnownRoute {
    KnownRoute {
        op,
        route,
        shaders,
        gated,
    }
}

/// The shaders of the ggml routes, one per type (the matvec's portable and subgroup
/// twins; `ops/ggml_linear`).
const GGML_MATVECS: &[&str] = &[
    "ggml_matvec_q8_0",
    "ggml_matvec_q4_1",
    "ggml_matvec_q5_0",
    "ggml_matvec_q5_1",
    "ggml_matvec_q4_k",
    "ggml_matvec_q5_k",
    "ggml_matvec_q6_k",
    "ggml_matvec_q8_0_sg",
    "ggml_matvec_q4_1_sg",
    "ggml_matvec_q5_0_sg",
    "ggml_matvec_q5_1_sg",
    "ggml_matvec_q4_k_sg",
    "ggml_matvec_q5_k_sg",
    "ggml_matvec_q6_k_sg",
];
const GGML_GEMMS: &[&str] = &[
    "ggml_gemm_q8_0",
    "ggml_gemm_q4_1",
    "ggml_gemm_q5_0",
    "ggml_gemm_q5_1",
    "ggml_gemm_q4_k",
    "ggml_gemm_q5_k",
    "ggml_gemm_q6_k",
];
const GGML_GATHERS: &[&str] = &[
    "ggml_gather_q8_0",
    "ggml_gather_q4_1",
    "ggml_gather_q5_0",
    "ggml_gather_q5_1",
    "ggml_gather_q4_k",
    "ggml_gather_q5_k",
    "ggml_gather_q6_k",
];

/// Every route a census may name, with the shaders it runs.
const KNOWN_ROUTES: &[KnownRoute] = &[
    known("q4_linear", "q4_gemv", &["q4_matvec"], None),
    known("q4_linear", "q4_linear_m3", &["q4_matvec"], None),
    known(
        "q4_linear",
        "q4_linear_small_m",
        &["q4_matvec", "q4_matvec_wide"],
        None,
    ),
    known("q4_linear", "q4_gemm", &["q4_gemm"], None),
    known("q4_linear", "q4_generic", &["q4_linear_generic"], None),
    known("dense_linear", "dense_f32", &["dense_linear"], None),
    known("dense_linear", "dense_f16", &["dense_linear"], None),
    known("embedding", "f32", &["embedding"], None),
    known("embedding", "f16", &["embedding"], None),
    known("embedding", "q4", &["embedding"], None),
    known("embedding", "ggml", GGML_GATHERS, None),
    known("ggml_linear", "matvec", GGML_MATVECS, None),
    known("ggml_linear", "gemm", GGML_GEMMS, None),
    known("gather_rows", "f32", &["gather_rows_words"], None),
    known(
        "gather_rows",
        "f16",
        &["gather_rows_words", "gather_rows_f16_f32"],
        None,
    ),
    known("moe_expert_linear", "q4_grouped", &["moe_q4_matvec"], None),
    known("moe_expert_linear", "q4_generic", &["moe_q4_generic"], None),
    known(
        "moe_expert_linear",
        "dense_f32",
        &["moe_dense_linear"],
        None,
    ),
    known(
        "moe_expert_linear",
        "dense_f16",
        &["moe_dense_linear"],
        None,
    ),
    known(
        "topk",
        "fast_2048_32",
        &["topk_2048_32"],
        Some(GatedOp::TopK),
    ),
    known("topk", "generic", &["topk_generic"], Some(GatedOp::TopK)),
    known(
        "scatter",
        "parallel_unique",
        &["scatter_unique"],
        Some(GatedOp::CertifiedScatter),
    ),
];

fn find_known(op: &str, route: &str) -> Option<&'static KnownRoute> {
    KNOWN_ROUTES.iter().find(|k| k.op == op && k.route == route)
}

/// A device that passes every device guard: what the census uses to pick routes by the
/// shape guards alone (the device is checked at load).
fn any_device() -> DeviceCaps {
    DeviceCaps {
        max_invocations_per_workgroup: u32::MAX,
        max_workgroup_size_x: u32::MAX,
        max_workgroup_storage: u32::MAX,
        subgroups: false,
        min_subgroup_size: 0,
        max_subgroup_size: 0,
        // The census records the portable prefill route (f32 GEMM) whatever the device.
        shader_f16: false,
        coop_16x16_f16: false,
        // And the f32 matvecs: the int8 family runs the same ops where the context asks.
        int8_activations: false,
        gemm_int8: false,
    }
}

/// The Q4 route a `[.., K]` weight takes for `m` rows (first whose shape guards hold).
fn q4_route(m: usize, k: usize, group: usize) -> LinearRoute {
    let shape = Q4Shape { m, k, group };
    Q4_ROUTES
        .into_iter()
        .find(|&r| q4_failed_guards(r, shape, &any_device(), false).is_empty())
        .unwrap_or(LinearRoute::Q4Generic)
}

/// What identifies one census entry: op, route, rows, group, mtp.
type RouteKey = (String, String, usize, usize, bool);

#[derive(Default)]
struct Tally {
    routes: BTreeMap<RouteKey, Vec<[usize; 2]>>,
}

impl Tally {
    fn add(
        &mut self,
        op: &str,
        route: &str,
        rows: usize,
        group: usize,
        mtp: bool,
        shape: [usize; 2],
    ) {
        let shapes = self
            .routes
            .entry((op.into(), route.into(), rows, group, mtp))
            .or_default();
        if !shapes.contains(&shape) {
            shapes.push(shape);
        }
    }

    fn linear(&mut self, rows: &[usize], n: usize, k: usize, layout: MatrixLayout) {
        match layout {
            MatrixLayout::Q4 { group } => {
                for &m in rows {
                    self.add(
                        "q4_linear",
                        q4_route(m, k, group).name(),
                        m,
                        group,
                        false,
                        [n, k],
                    );
                }
            }
            MatrixLayout::F32 => self.add("dense_linear", "dense_f32", 0, 0, false, [n, k]),
            MatrixLayout::F16 => self.add("dense_linear", "dense_f16", 0, 0, false, [n, k]),
        }
    }

    /// A matrix stored in ggml blocks: its table gather and its linear routes by rows.
    fn ggml(&mut self, rows: &[usize], n: usize, k: usize, usage: MatrixUse) {
        if matches!(usage, MatrixUse::Table | MatrixUse::TableAndLinear) {
            self.add("embedding", "ggml", 0, 0, false, [n, k]);
        }
        if matches!(usage, MatrixUse::Linear | MatrixUse::TableAndLinear) {
            for &m in rows {
                let route = crate::ops::ggml_linear::choose_route(m).name();
                self.add("ggml_linear", route, m, 0, false, [n, k]);
            }
        }
    }

    fn into_routes(self, model: &str) -> Vec<CensusRoute> {
        self.routes
            .into_iter()
            .map(|((op, route, rows, group, mtp), mut shapes)| {
                shapes.sort();
                CensusRoute {
                    model: model.into(),
                    op,
                    route,
                    rows,
                    shapes,
                    group,
                    mtp,
                }
            })
            .collect()
    }
}

fn layout_name(layout: MatrixLayout) -> (&'static str, usize) {
    match layout {
        MatrixLayout::F32 => ("f32", 0),
        MatrixLayout::F16 => ("f16", 0),
        MatrixLayout::Q4 { group } => ("q4", group),
    }
}

fn tally_plan(t: &mut Tally, plan: &[PlannedWeight], rows: &[usize]) {
    for w in plan {
        if let Prep::Ggml { n, k, usage, .. } = w.prep {
            t.ggml(rows, n, k, usage);
            continue;
        }
        let Prep::Matrix {
            n,
            k,
            layout,
            usage,
        } = &w.prep
        else {
            continue;
        };
        let (n, k, layout) = (*n, *k, *layout);
        match usage {
            MatrixUse::Linear => t.linear(rows, n, k, layout),
            MatrixUse::Table => {
                let (name, group) = layout_name(layout);
                t.add("embedding", name, 0, group, false, [n, k]);
            }
            MatrixUse::TableAndLinear => {
                let (name, group) = layout_name(layout);
                t.add("embedding", name, 0, group, false, [n, k]);
                t.linear(rows, n, k, layout);
            }
            MatrixUse::Rows => {
                let (name, _) = layout_name(layout);
                t.add("gather_rows", name, 0, 0, false, [n, k]);
            }
            MatrixUse::Experts { experts } => {
                let per = [n / experts.max(&1), k];
                let route = match layout {
                    MatrixLayout::Q4 { .. } if k % 32 == 0 => "q4_grouped",
                    MatrixLayout::Q4 { .. } => "q4_generic",
                    MatrixLayout::F32 => "dense_f32",
                    MatrixLayout::F16 => "dense_f16",
                };
                t.add(
                    "moe_expert_linear",
                    route,
                    0,
                    layout_name(layout).1,
                    false,
                    per,
                );
            }
        }
    }
}

/// The target's routes: every linear at decode, verify and prefill rows.
pub fn target_census(plan: &[PlannedWeight]) -> Vec<CensusRoute> {
    let mut t = Tally::default();
    tally_plan(&mut t, plan, &[DECODE_ROWS, VERIFY_ROWS, PREFILL_ROWS]);
    t.into_routes("target")
}

/// The assistant's routes: one-row linears, and the centroid head's gated routes.
pub fn assistant_census(spec: &AssistantSpec, plan: &[PlannedWeight]) -> Vec<CensusRoute> {
    let mut t = Tally::default();
    tally_plan(&mut t, plan, &[DECODE_ROWS]);
    if let AssistantHead::Centroids {
        num_centroids,
        top_k,
    } = spec.head
    {
        let topk = if (num_centroids, top_k) == (2048, 32) {
            "fast_2048_32"
        } else {
            "generic"
        };
        t.add("topk", topk, 0, 0, true, [num_centroids, top_k]);
        let selected = top_k * spec.text.config.vocab_size / num_centroids;
        let vocab = spec.text.config.vocab_size;
        t.add("scatter", "parallel_unique", 0, 0, true, [vocab, selected]);
        // The selected rows dot the hidden state through the dense linear.
        let dense = match rows_layout(plan) {
            Some(MatrixLayout::F32) => "dense_f32",
            _ => "dense_f16",
        };
        t.add(
            "dense_linear",
            dense,
            0,
            0,
            false,
            [selected, spec.text.config.hidden_size],
        );
    }
    t.into_routes("assistant")
}

/// The layout of the centroid head's row table in `plan`, if it has one.
fn rows_layout(plan: &[PlannedWeight]) -> Option<MatrixLayout> {
    plan.iter().find_map(|w| match w.prep {
        Prep::Matrix {
            layout,
            usage: MatrixUse::Rows,
            ..
        } => Some(layout),
        _ => None,
    })
}

/// Checks the routes of `model` (`target` or `assistant`) in `census` against this build,
/// this device and `op_set`; the error names the route and what does not hold.
pub fn check_routes(
    census: &[CensusRoute],
    model: &str,
    ctx: &GpuContext,
    op_set: &OpSet,
) -> Result<()> {
    let caps = DeviceCaps::of(ctx);
    for r in census.iter().filter(|r| r.model == model) {
        let id = r.id();
        let Some(k) = find_known(&r.op, &r.route) else {
            let names: Vec<String> = KNOWN_ROUTES
                .iter()
                .map(|k| format!("{}/{}", k.op, k.route))
                .collect();
            return Err(Error::invalid(
                OP,
                format!("route `{id}` needed by the {model}"),
                format!("one this build has ({})", names.join(", ")),
                format!("`{id}`, unknown to wgemma {}", env!("CARGO_PKG_VERSION")),
            ));
        };
        if r.mtp != k.gated.is_some() {
            return Err(Error::invalid(
                OP,
                format!("`mtp` of route `{id}`"),
                k.gated.is_some(),
                r.mtp,
            ));
        }
        if let Some(gated) = k.gated {
            op_set.require(
                gated,
                "artifact census",
                &format!("route `{id}` of the {model}"),
            )?;
        }
        for shader in k.shaders {
            let entry = registry::shader(shader).ok_or_else(|| {
                Error::invalid(
                    OP,
                    format!("shader of route `{id}`"),
                    format!("`{shader}` in this build's shader registry"),
                    "missing",
                )
            })?;
            for ep in entry.entry_points {
                let [x, y, z] = ep.workgroup_size;
                let l = &ctx.limits;
                if x * y * z > l.max_compute_invocations_per_workgroup
                    || x > l.max_compute_workgroup_size_x
                    || y > l.max_compute_workgroup_size_y
                    || z > l.max_compute_workgroup_size_z
                {
                    return Err(Error::invalid(
                        OP,
                        format!("workgroup of `{shader}::{}` (route `{id}`)", ep.name),
                        format!(
                            "within this device's limits ({} invocations, {}x{}x{})",
                            l.max_compute_invocations_per_workgroup,
                            l.max_compute_workgroup_size_x,
                            l.max_compute_workgroup_size_y,
                            l.max_compute_workgroup_size_z
                        ),
                        format!("{x}x{y}x{z}"),
                    ));
                }
            }
        }
        if r.op == "q4_linear" {
            let route = Q4_ROUTES
                .into_iter()
                .find(|q| q.name() == r.route)
                .expect("known q4 routes are Q4_ROUTES");
            for &[n, kk] in &r.shapes {
                let shape = Q4Shape {
                    m: r.rows,
                    k: kk,
                    group: r.group,
                };
                let failed = q4_failed_guards(route, shape, &caps, false);
                if !failed.is_empty() {
                    return Err(Error::NoRoute {
                        op: "q4_linear",
                        shapes: format!(
                            "{model} weight [{n}, {kk}] group {}, M = {} (artifact census)",
                            r.group, r.rows
                        ),
                        failed,
                    });
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::artifact::plan::target_plan;
    use crate::formats::synthetic::SyntheticShape;
    use crate::model::weights::WeightFormat;

    #[test]
    fn e2b_q4_census_names_the_matvec_verify_and_gemm_routes() {
        let spec = SyntheticShape::E2b.spec();
        let census = target_census(&target_plan(&spec, WeightFormat::Q4 { group: 32 }, &|_| {
            true
        }));
        let ids: Vec<String> = census.iter().map(|r| r.id()).collect();
        for id in [
            "q4_linear/q4_gemv",
            "q4_linear/q4_linear_m3",
            "q4_linear/q4_gemm",
            "embedding/q4",
        ] {
            assert!(ids.contains(&id.to_string()), "{id} in {ids:?}");
        }
        let gemv = census.iter().find(|r| r.route == "q4_gemv").unwrap();
        assert!(gemv.shapes.contains(&[262144, 1536]), "lm_head");
        assert!(census.iter().all(|r| !r.mtp));
    }

    #[test]
    fn every_known_route_has_its_shaders_in_the_registry() {
        for k in KNOWN_ROUTES {
            for s in k.shaders {
                assert!(registry::shader(s).is_some(), "{}/{}: {s}", k.op, k.route);
            }
        }
    }
}
