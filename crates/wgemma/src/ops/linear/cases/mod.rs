//! Harness cases of the linear op: every route over random shapes, forced chunk splits,
//! and the E2B shapes for benchmarks (the int8 family's own cases: [`int8`]).

mod int8;
pub use int8::int8_check_cases;

use super::quant::{quantize_q4, Q4Host, Q4Weight};
use super::reference::{linear_ref, q4_linear_ref, q4_linear_ref_f16, q4q8_linear_ref, tolerance};
use super::{
    dense_linear, q4_linear_fused_with, q4_linear_with, Epilogue, LinearOptions, LinearRoute,
    MatvecTuning, Reduction,
};
use crate::error::{Error, Result};
use crate::gpu::{Activations, DType, GpuContext, Tensor};
use crate::harness::Check;
use crate::harness::{Expected, OpCase, Prepared, Rng, Values};
use crate::ops::geglu::gelu_tanh_ref;
use rand::Rng as _;

/// How a case makes its Q4 weight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WeightData {
    /// Random f32 rows of varied magnitude (some groups all zero), through [`quantize_q4`].
    Quantized,
    /// Random packed words and f16 scales directly: an E2B lm_head never exists in f32.
    RandomPacked,
}

/// A fused epilogue a case exercises (see [`Epilogue`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CaseEpilogue {
    None,
    /// N even: y `[M, N/2]` = gelu(first half) * second half.
    GegluPairs,
    /// y = gelu(x W^T) * a random `other` of row stride N + 5 at offset 3.
    GeluMul,
}

/// One Q4 linear case. The case fails if the op does not build `route` (auto-chosen unless
/// `force`), so random cases also check route selection.
#[derive(Debug, Clone)]
pub struct Q4LinearCase {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub group: usize,
    pub route: LinearRoute,
    pub force: bool,
    pub portable: bool,
    /// Split threshold for the upload; `Some` also requires that the weight is split.
    pub max_binding: Option<u64>,
    /// Weight copies, one kernel set each, all writing the same y; rotating through copies
    /// keeps a benchmarked weight out of L2. `bytes_moved` counts every copy.
    pub copies: usize,
    pub weights: WeightData,
    pub epilogue: CaseEpilogue,
    /// Forced matvec geometry (else the adapter table's).
    pub tuning: Option<MatvecTuning>,
}

impl Q4LinearCase {
    pub fn new(m: usize, n: usize, k: usize, group: usize, route: LinearRoute) -> Self {
        Q4LinearCase {
            m,
            n,
            k,
            group,
            route,
            force: false,
            portable: false,
            max_binding: None,
            copies: 1,
            weights: WeightData::Quantized,
            epilogue: CaseEpilogue::None,
            tuning: None,
        }
    }

    fn host_weight(&self, rng: &mut Rng) -> Result<Q4Host> {
        let (n, k, group) = (self.n, self.k, self.group);
        match self.weights {
            WeightData::Quantized => {
                let mut w = vec![0.0f32; n * k];
                for row in w.chunks_mut(k) {
                    let scale = 10f32.powf(rng.random_range(-2.0..1.0));
                    row.iter_mut()
                        .for_each(|v| *v = rng.random_range(-1.0f32..1.0) * scale);
                }
                if rng.random_bool(0.5) {
                    // A zero group: scale 0, every nibble 8.
                    let (row, j) = (rng.random_range(0..n), rng.random_range(0..k / group));
                    w[row * k + j * group..row * k + (j + 1) * group].fill(0.0);
                }
                quantize_q4(&w, n, k, group)
            }
            WeightData::RandomPacked => {
                let packed = (0..n * k / 8).map(|_| rng.random::<u32>()).collect();
                let scales = (0..(n * (k / group)).div_ceil(2))
                    .map(|_| {
                        let mut s = || half::f16::from_f32(rng.random_range(0.002..0.02));
                        s().to_bits() as u32 | (s().to_bits() as u32) << 16
                    })
                    .collect();
                Q4Host::from_parts(n, k, group, packed, scales)
            }
        }
    }
}

impl OpCase for Q4LinearCase {
    fn name(&self) -> String {
        // A forced geometry follows the route's name (`q4_gemv@r1l16s2u`), so a filter on
        // "q4_gemv m=" selects the adapter table's cases alone.
        let tuning = self.tuning.map_or(String::new(), |t| {
            let unroll = if t.unroll { "u" } else { "" };
            format!("@r{}l{}s{}{unroll}", t.rows, t.lanes, t.ksplit)
        });
        let mut s = format!(
            "q4_linear {}{tuning}{} m={} k={} n={} g={}",
            self.route,
            if self.force { " (forced)" } else { "" },
            self.m,
            self.k,
            self.n,
            self.group
        );
        if self.portable {
            s.push_str(" portable");
        }
        if let Some(b) = self.max_binding {
            s.push_str(&format!(" split<={b}B"));
        }
        if self.copies > 1 {
            s.push_str(&format!(" x{} copies/run", self.copies));
        }
        match self.epilogue {
            CaseEpilogue::None => {}
            CaseEpilogue::GegluPairs => s.push_str(" +geglu"),
            CaseEpilogue::GeluMul => s.push_str(" +gelu*other"),
        }
        s
    }

    fn prepare(&self, ctx: &GpuContext, rng: &mut Rng) -> Result<Prepared> {
        const OP: &str = "q4_linear case";
        let host = self.host_weight(rng)?;
        let x: Vec<f32> = (0..self.m * self.k)
            .map(|_| rng.random_range(-1.0..1.0))
            .collect();
        let tx = Tensor::from_f32(ctx, "x", &[self.m, self.k], &x)?;
        let y_cols = match self.epilogue {
            CaseEpilogue::GegluPairs => self.n / 2,
            _ => self.n,
        };
        let ty = Tensor::zeros(ctx, "y", &[self.m, y_cols], DType::F32)?;
        let (other_stride, other_offset) = (self.n + 5, 3);
        let other: Vec<f32> = (0..self.m * other_stride)
            .map(|_| rng.random_range(-1.0..1.0))
            .collect();
        let t_other = Tensor::from_f32(ctx, "other", &[self.m, other_stride], &other)?;
        let epilogue = match self.epilogue {
            CaseEpilogue::None => Epilogue::None,
            CaseEpilogue::GegluPairs => Epilogue::GegluPairs,
            CaseEpilogue::GeluMul => Epilogue::GeluMul {
                other: &t_other,
                stride: other_stride,
                offset: other_offset,
            },
        };
        // A matvec case runs its family's activations whatever the context's default.
        let activations = match self.route {
            LinearRoute::Q4Q8Matvec => Some(Activations::Int8),
            r if r.is_matvec() => Some(Activations::F32),
            _ => None,
        };
        let options = LinearOptions {
            route: self.force.then_some(self.route),
            portable: self.portable,
            tuning: self.tuning,
            activations,
        };
        let mut kernels = Vec::new();
        let mut bytes_moved = 0;
        for _ in 0..self.copies.max(1) {
            let w = match self.max_binding {
                Some(b) => Q4Weight::upload_with_max_binding(ctx, &host, b)?,
                None => Q4Weight::upload(ctx, &host)?,
            };
            if self.max_binding.is_some() && w.chunks().len() < 2 {
                return Err(Error::invalid(
                    OP,
                    "weight chunks",
                    ">= 2",
                    w.chunks().len(),
                ));
            }
            let linear = match epilogue {
                Epilogue::None => q4_linear_with(ctx, &tx, &w, &ty, &options)?,
                e => q4_linear_fused_with(ctx, &tx, &w, &ty, e, &options)?,
            };
            if linear.route() != self.route {
                return Err(Error::invalid(OP, "route", self.route, linear.route()));
            }
            if self.portable && linear.reduction() == Reduction::Subgroup {
                return Err(Error::invalid(OP, "reduction", "workgroup", "subgroup"));
            }
            bytes_moved += w.bytes() + tx.byte_size() + ty.byte_size();
            kernels.extend(linear.into_kernels());
        }
        let (linear, bound) = match self.route {
            LinearRoute::Q4GemmCoop => q4_linear_ref_f16(&x, self.m, &host),
            LinearRoute::Q4Q8Matvec => q4q8_linear_ref(&x, self.m, &host),
            _ => q4_linear_ref(&x, self.m, &host),
        };
        let n = self.n;
        let linear_check = match self.route {
            LinearRoute::Q4Q8Matvec => int8::tolerance(self.k, bound, &host),
            _ => tolerance(self.k, bound),
        };
        let (reference, check) = match self.epilogue {
            CaseEpilogue::None => (linear, linear_check),
            CaseEpilogue::GegluPairs => (
                linear
                    .chunks(n)
                    .flat_map(|row| (0..n / 2).map(move |j| gelu_tanh_ref(row[j]) * row[n / 2 + j]))
                    .collect(),
                epilogue_tolerance(self.k, bound, bound),
            ),
            CaseEpilogue::GeluMul => (
                linear
                    .chunks(n)
                    .enumerate()
                    .flat_map(|(m, row)| {
                        let other = &other[m * other_stride + other_offset..];
                        row.iter().zip(other).map(|(&v, &o)| gelu_tanh_ref(v) * o)
                    })
                    .collect(),
                epilogue_tolerance(self.k, bound, 1.0),
            ),
        };
        Ok(Prepared {
            kernels,
            outputs: vec![Expected {
                name: "y",
                tensor: ty,
                reference: Values::F32(reference),
                check,
            }],
            bytes_moved,
        })
    }
}

/// gelu(a) * b with `a` off by the linear tolerance e (|a| <= bound, |b| <= b_bound): the
/// error is at most |gelu'| e |b| + |gelu(a)| e (|gelu'| < 1.13) plus the GPU's tanh
/// (~1e-6 relative) on values up to bound * b_bound.
fn epilogue_tolerance(k: usize, bound: f64, b_bound: f64) -> Check {
    let Check::Close { max_abs, nmse } = tolerance(k, bound) else {
        unreachable!("tolerance is a Close check")
    };
    let e = f64::from(max_abs);
    Check::Close {
        max_abs: (e * (1.13 * b_bound + bound + e) + 4e-6 * bound * b_bound) as f32
            + f32::MIN_POSITIVE,
        nmse,
    }
}

/// One dense f32/f16 linear case.
#[derive(Debug, Clone)]
pub struct DenseLinearCase {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub f16: bool,
}

impl OpCase for DenseLinearCase {
    fn name(&self) -> String {
        format!(
            "dense_linear {} m={} k={} n={}",
            if self.f16 { "f16" } else { "f32" },
            self.m,
            self.k,
            self.n
        )
    }

    fn prepare(&self, ctx: &GpuContext, rng: &mut Rng) -> Result<Prepared> {
        let (m, n, k) = (self.m, self.n, self.k);
        let mut w: Vec<f32> = (0..n * k).map(|_| rng.random_range(-0.5..0.5)).collect();
        let x: Vec<f32> = (0..m * k).map(|_| rng.random_range(-1.0..1.0)).collect();
        let tw = if self.f16 {
            let h: Vec<half::f16> = w.iter().map(|&v| half::f16::from_f32(v)).collect();
            w = h.iter().map(|v| v.to_f32()).collect();
            Tensor::from_f16(ctx, "w", &[n, k], &h)?
        } else {
            Tensor::from_f32(ctx, "w", &[n, k], &w)?
        };
        let tx = Tensor::from_f32(ctx, "x", &[m, k], &x)?;
        let ty = Tensor::zeros(ctx, "y", &[m, n], DType::F32)?;
        let linear = dense_linear(ctx, &tx, &tw, &ty)?;
        let (reference, bound) = linear_ref(&x, m, k, &w, n);
        Ok(Prepared {
            bytes_moved: tw.byte_size() + tx.byte_size() + ty.byte_size(),
            kernels: linear.into_kernels(),
            outputs: vec![Expected {
                name: "y",
                tensor: ty,
                reference: Values::F32(reference),
                check: tolerance(k, bound),
            }],
        })
    }
}

pub(super) fn boxed(case: Q4LinearCase) -> Box<dyn OpCase> {
    Box::new(case)
}

/// Random shapes for every route: M = 1 and 3 (subgroup and portable reductions, contract
/// groups and per-word groups of 8/16), M = 2 and 4..=9 (small-M matvec, forced matvec
/// geometries), GEMM over M in 10..=15,
/// the generic route (auto with K % 32 != 0, and forced on any shape), GEMM forced on K
/// tails, a forced row-chunk split per route, and dense f32/f16. N is odd.
pub fn random_cases(rng: &mut Rng) -> Vec<Box<dyn OpCase>> {
    let mut cases = route_cases(rng);
    cases.extend(matvec_cases(rng));
    cases.extend(int8::random_cases(rng));
    for f16 in [false, true] {
        cases.push(Box::new(DenseLinearCase {
            m: rng.random_range(1..=9),
            n: rng.random_range(1..=150),
            k: rng.random_range(1..=300),
            f16,
        }));
    }
    cases
}

/// A Q4 group size of the model's routes.
pub(super) fn random_group(rng: &mut Rng) -> usize {
    [32, 64, 128][rng.random_range(0..3)]
}

/// A K of whole groups `g`, up to 512.
pub(super) fn random_k(rng: &mut Rng, g: usize) -> usize {
    g * rng.random_range(1..=(512 / g))
}

/// An odd N in `lo..hi` (odd Ns leave partial row quads).
pub(super) fn random_odd_n(rng: &mut Rng, lo: usize, hi: usize) -> usize {
    rng.random_range(lo..hi) | 1
}

/// An M for the Q4 GEMM below PREFILL_GEMM_MIN_ROWS: from 16 rows the f16 GEMMs win where
/// the device has them (their cases: [`prefill_cases`]).
fn random_gemm_m(rng: &mut Rng) -> usize {
    [10, 11, 13, 14, 15][rng.random_range(0..5)]
}

/// Each Q4 route on shapes it is chosen for (M = 1 and 3 with subgroup and portable
/// reductions and groups of 8/16, the GEMM, the generic route auto and forced, the GEMM on
/// K tails) and a forced row-chunk split per route.
fn route_cases(rng: &mut Rng) -> Vec<Box<dyn OpCase>> {
    use LinearRoute::*;
    let mut cases = Vec::new();
    for (m, route) in [(1, Q4Gemv), (3, Q4LinearM3)] {
        for portable in [false, true] {
            let g = random_group(rng);
            let mut c = Q4LinearCase::new(m, random_odd_n(rng, 1, 200), random_k(rng, g), g, route);
            c.portable = portable;
            cases.push(boxed(c));
        }
        // Groups below 32: one scale per packed word inside each vec4 load.
        let g = [8, 16][rng.random_range(0..2)];
        let mut c = Q4LinearCase::new(
            m,
            random_odd_n(rng, 1, 120),
            32 * rng.random_range(1..=12),
            g,
            route,
        );
        c.portable = rng.random_bool(0.5);
        cases.push(boxed(c));
    }
    let g = random_group(rng);
    cases.push(boxed(Q4LinearCase::new(
        random_gemm_m(rng),
        random_odd_n(rng, 1, 200),
        random_k(rng, g),
        g,
        Q4Gemm,
    )));
    // M = 1 with K % 32 != 0: only the generic route is eligible.
    cases.push(boxed(Q4LinearCase::new(
        1,
        random_odd_n(rng, 1, 200),
        8 * (2 * rng.random_range(0..40) + 1),
        8,
        Q4Generic,
    )));
    let g = [8, 16, 32, 64, 128][rng.random_range(0..5)];
    let mut c = Q4LinearCase::new(
        rng.random_range(1..=17),
        random_odd_n(rng, 1, 200),
        random_k(rng, g),
        g,
        Q4Generic,
    );
    c.force = true;
    cases.push(boxed(c));
    // GEMM with a K tail (K % 32 != 0), including M = 3.
    let mut c = Q4LinearCase::new(
        [2, 3, 5][rng.random_range(0..3)],
        random_odd_n(rng, 1, 200),
        8 * (2 * rng.random_range(0..40) + 1),
        8,
        Q4Gemm,
    );
    c.force = true;
    cases.push(boxed(c));
    for (m, route) in [
        (1, Q4Gemv),
        (3, Q4LinearM3),
        (random_gemm_m(rng), Q4Gemm),
        (rng.random_range(1..=5), Q4Generic),
    ] {
        let g = random_group(rng);
        let k = random_k(rng, g);
        let mut c = Q4LinearCase::new(m, random_odd_n(rng, 129, 320), k, g, route);
        c.force = route == Q4Generic;
        c.max_binding = Some(64 * k as u64 / 2);
        c.portable = rng.random_bool(0.5);
        cases.push(boxed(c));
    }
    cases
}

/// The matvec routes' own shapes: small M (2, 4, 5..=9), long rows split over K, fused
/// GeGLU epilogues, and forced geometries (lanes per quad, K splits).
fn matvec_cases(rng: &mut Rng) -> Vec<Box<dyn OpCase>> {
    use LinearRoute::*;
    let mut cases = Vec::new();
    // M = 2 and 4 take the small-M matvec route.
    for m in [2, 4] {
        let g = random_group(rng);
        let mut c = Q4LinearCase::new(
            m,
            random_odd_n(rng, 1, 200),
            random_k(rng, g),
            g,
            Q4LinearSmallM,
        );
        c.portable = rng.random_bool(0.5);
        cases.push(boxed(c));
    }
    // Long rows over few rows: the matvec splits K across 2..8 units per row quad.
    for (m, route) in [(1, Q4Gemv), (3, Q4LinearM3)] {
        let mut c = Q4LinearCase::new(
            m,
            random_odd_n(rng, 1, 200),
            32 * rng.random_range(32..=260),
            32,
            route,
        );
        c.portable = rng.random_bool(0.5);
        c.epilogue = [CaseEpilogue::None, CaseEpilogue::GeluMul][rng.random_range(0..2)];
        cases.push(boxed(c));
    }
    // Fused GeGLU epilogues on both matvec routes and reductions.
    for (m, route) in [(1, Q4Gemv), (3, Q4LinearM3)] {
        for epilogue in [CaseEpilogue::GegluPairs, CaseEpilogue::GeluMul] {
            let g = random_group(rng);
            // Pairs: an even N of any size (halves not a multiple of 16 leave partial
            // workgroups).
            let n = 2 * rng.random_range(1..100);
            let mut c = Q4LinearCase::new(m, n, random_k(rng, g), g, route);
            c.epilogue = epilogue;
            c.portable = rng.random_bool(0.5);
            cases.push(boxed(c));
        }
    }
    // M = 5..=9 (verify of up to 8 drafts) and forced geometries: 8, 16 or 32 lanes per
    // quad, K splits, K fixed at build time or not, plain and fused.
    for m in [1, rng.random_range(5..=9)] {
        let g = random_group(rng);
        let route = if m == 1 { Q4Gemv } else { Q4LinearSmallM };
        let mut c = Q4LinearCase::new(m, random_odd_n(rng, 1, 200), random_k(rng, g), g, route);
        c.portable = rng.random_bool(0.5);
        c.tuning = Some(random_tuning(rng));
        c.epilogue = [CaseEpilogue::None, CaseEpilogue::GeluMul][rng.random_range(0..2)];
        cases.push(boxed(c));
    }
    let g = random_group(rng);
    let mut c = Q4LinearCase::new(
        rng.random_range(5..=9),
        2 * rng.random_range(1..100),
        random_k(rng, g),
        g,
        Q4LinearSmallM,
    );
    c.epilogue = CaseEpilogue::GegluPairs;
    c.portable = rng.random_bool(0.5);
    c.tuning = Some(MatvecTuning {
        ksplit: 1,
        lanes: [16, 32][rng.random_range(0..2)],
        ..random_tuning(rng)
    });
    cases.push(boxed(c));
    cases
}

/// A matvec geometry valid for every shape (a split of at most 4 leaves a quad per
/// workgroup at 8 lanes).
pub(super) fn random_tuning(rng: &mut Rng) -> MatvecTuning {
    MatvecTuning {
        rows: [1, 2, 4][rng.random_range(0..3)],
        lanes: [8, 16, 32][rng.random_range(0..3)],
        ksplit: [1, 2, 4][rng.random_range(0..3)],
        unroll: rng.random_bool(0.5),
    }
}

/// Weight copies so that one run reads more than ~200 MB (the H200's L2 is 50 MB): up to
/// 1024, so that even the per-layer input shapes (~220 KB) come from HBM as in a decode
/// step (at 128 copies they fit in L2).
pub(super) fn copies_for(n: usize, k: usize, group: usize) -> usize {
    let bytes = n * k / 2 + n * (k / group) * 2;
    200_000_000usize.div_ceil(bytes).clamp(1, 1024)
}

pub(super) fn e2b_case(
    m: usize,
    k: usize,
    n: usize,
    route: LinearRoute,
    portable: bool,
) -> Box<dyn OpCase> {
    let mut c = Q4LinearCase::new(m, n, k, 32, route);
    c.portable = portable;
    // A GEMM route is measured as named, not as the device's first choice.
    c.force = !route.is_matvec();
    c.weights = WeightData::RandomPacked;
    c.copies = copies_for(n, k, 32);
    boxed(c)
}

/// Every matvec of an E2B decode token (K, N): gate_up (narrow and double-wide MLP), down, q,
/// k / v and o (sliding and global layers), the per-layer input gate and projection, the
/// per-layer model projection, the LM head; and gate or up alone.
pub(super) const E2B_SHAPES: [(usize, usize); 14] = [
    (1536, 6144),
    (1536, 12288),
    (1536, 24576),
    (6144, 1536),
    (12288, 1536),
    (1536, 2048),
    (1536, 4096),
    (1536, 256),
    (1536, 512),
    (2048, 1536),
    (4096, 1536),
    (256, 1536),
    (1536, 8960),
    (1536, 262144),
];

/// The E2B linear shapes (K -> N), group 32: every matvec M (1..=9) on all with the
/// adapter table's geometry, M = 1 with other geometries (`@rRlLsS[u]`: rows and lanes
/// per quad, K split, K fixed at build time), prefill (M = 128) on two, the portable
/// reduction on two.
/// Us/run covers all copies.
pub fn bench_cases() -> Vec<Box<dyn OpCase>> {
    use LinearRoute::*;
    let mut cases = Vec::new();
    for (k, n) in E2B_SHAPES {
        for m in 1..=9 {
            let route = match m {
                1 => Q4Gemv,
                3 => Q4LinearM3,
                _ => Q4LinearSmallM,
            };
            cases.push(e2b_case(m, k, n, route, false));
            // The int8 family beside the f32 one at every M (routes decided from these).
            cases.push(e2b_case(m, k, n, Q4Q8Matvec, false));
        }
    }
    // M = 1 with other geometries around the table's: rows per quad 1, 2, 4 with lanes
    // 16 or 32 and every split that leaves each lane at least half a step.
    for (k, n) in E2B_SHAPES {
        for rows in [1, 2, 4] {
            for lanes in [32, 16] {
                for ksplit in [1, 2, 4, 8] {
                    if 2 * (k / 32) < (lanes * ksplit) as usize || 256 / lanes < ksplit {
                        continue;
                    }
                    let mut c = Q4LinearCase::new(1, n, k, 32, Q4Gemv);
                    c.weights = WeightData::RandomPacked;
                    c.copies = copies_for(n, k, 32);
                    c.tuning = Some(MatvecTuning {
                        rows,
                        lanes,
                        ksplit,
                        unroll: true,
                    });
                    cases.push(boxed(c));
                }
            }
        }
    }
    cases.extend(int8::int8_bench_cases());
    cases.push(e2b_case(1, 1536, 6144, Q4Gemv, true));
    cases.push(e2b_case(1, 1536, 262144, Q4Gemv, true));
    cases.push(e2b_case(128, 1536, 6144, Q4Gemm, false));
    cases.push(e2b_case(128, 6144, 1536, Q4Gemm, false));
    // Prefill (M = 512) on every GEMM route; a route the device lacks fails its case.
    for route in [Q4Gemm, Q4GemmF16, Q4GemmCoop] {
        for (k, n) in [(1536, 6144), (1536, 12288), (6144, 1536), (1536, 2048)] {
            // Compute-bound: four weight copies keep a run short on the slow routes.
            let mut c = Q4LinearCase::new(512, n, k, 32, route);
            c.weights = WeightData::RandomPacked;
            c.copies = 4;
            c.force = true;
            cases.push(boxed(c));
        }
    }
    // A 4K-token prompt's gate/up-sized GEMM on the tensor cores.
    let mut c = Q4LinearCase::new(4096, 6144, 1536, 32, Q4GemmCoop);
    c.weights = WeightData::RandomPacked;
    c.force = true;
    cases.push(boxed(c));
    cases
}

/// The f16 prefill GEMM routes the device runs (shader-f16; 16x16x16 cooperative
/// matrices), each forced, over random shapes: M from 16 (partial 64-row tiles), odd N
/// (partial n-tiles), groups 32..=128 (and for the tensor-core route a K tail of K % 32 with
/// group 8), and a weight split into row chunks. Empty on a device with neither.
pub fn prefill_cases(caps: &super::DeviceCaps, rng: &mut Rng) -> Vec<Box<dyn OpCase>> {
    use LinearRoute::*;
    let mut cases = Vec::new();
    let routes = [
        (Q4GemmF16, caps.shader_f16),
        (Q4GemmCoop, caps.coop_16x16_f16),
    ];
    for (route, _) in routes.into_iter().filter(|r| r.1) {
        for tail in [false, route == Q4GemmCoop] {
            let g = [32, 64, 128][rng.random_range(0..3)];
            let k = if tail {
                8 * (2 * rng.random_range(2..40) + 1)
            } else {
                g * rng.random_range(1..=(768 / g))
            };
            let group = if tail { 8 } else { g };
            let mut c = Q4LinearCase::new(
                rng.random_range(16..=150),
                rng.random_range(1..300) | 1,
                k,
                group,
                route,
            );
            c.force = true;
            cases.push(boxed(c));
        }
        if route == Q4GemmCoop {
            // E2B's prefill shapes at M = 512 whose 128 x 128 grids split K (gemm.rs): N = 1536 (48 tiles, 6 splits), N = 256 (8 tiles, 12
            // splits), K = 256 (2 splits); and a grid of 256 tiles (N = 8192, K = 96: the
            // unsplit kernel at M = 512, cheap on the CPU reference).
            for (m, n, k) in [
                (512, 1536, 2048),
                (512, 256, 1536),
                (512, 1536, 256),
                (512, 8192, 96),
            ] {
                let mut c = Q4LinearCase::new(m, n, k, 32, route);
                c.force = true;
                cases.push(boxed(c));
            }
        }
        let k = 32 * rng.random_range(1..=16);
        let mut c = Q4LinearCase::new(rng.random_range(16..=80), 2 * 129 + 1, k, 32, route);
        c.force = true;
        c.max_binding = Some(64 * k as u64 / 2);
        cases.push(boxed(c));
    }
    cases
}
