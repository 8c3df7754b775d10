//! Harness cases of the linear op: every route over random shapes, forced chunk splits,
//! and the E2B shapes for benchmarks (the int8 family's own cases: [`int8`]).
//! The random shapes are in `random`, the benchmark shapes in `bench`.

mod bench;
mod int8;
mod random;

pub use bench::bench_cases;
pub use int8::int8_check_cases;
#[cfg(test)]
pub(super) use int8::int8_gemm_cases;
pub use random::prefill_cases;

use super::quant::{quantize_q4, Q4Host, Q4Weight};
use super::reference::{linear_ref, q4_linear_ref, q4_linear_ref_f16, q4q8_linear_ref, tolerance};
use super::{
    dense_linear, q4_linear_fused_with, q4_linear_with, Epilogue, LinearOptions, LinearRoute,
    MatvecTuning, Reduction,
};
use crate::error::{Error, Result};
use crate::gpu::{Activations, DType, GpuContext, Tensor};
use crate::harness::{Check, Expected, OpCase, Prepared, Rng, Values};
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
        // A matvec or int8 GEMM case runs its family's activations whatever the context's
        // default.
        let activations = match self.route {
            LinearRoute::Q4Q8Matvec | LinearRoute::Q4GemmInt8 => Some(Activations::Int8),
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
            LinearRoute::Q4Q8Matvec | LinearRoute::Q4GemmInt8 => q4q8_linear_ref(&x, self.m, &host),
            _ => q4_linear_ref(&x, self.m, &host),
        };
        let n = self.n;
        let linear_check = match self.route {
            LinearRoute::Q4Q8Matvec | LinearRoute::Q4GemmInt8 => {
                int8::tolerance(self.k, bound, &host)
            }
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

/// Weight copies so that one run reads more than ~200 MB (the H200's L2 is 50 MB): up to
/// 1024, so that even the per-layer input shapes (~220 KB) come from HBM as in a decode
/// step (at 128 copies they fit in L2).
pub(super) fn copies_for(n: usize, k: usize, group: usize) -> usize {
    let bytes = n * k / 2 + n * (k / group) * 2;
    200_000_000usize.div_ceil(bytes).clamp(1, 1024)
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

/// Random shapes for every route: M = 1 and 3 (subgroup and portable reductions, contract
/// groups and per-word groups of 8/16), M = 2 and 4..=9 (small-M matvec, forced matvec
/// geometries), GEMM over M in 10..=15,
/// the generic route (auto with K % 32 != 0, and forced on any shape), GEMM forced on K
/// tails, a forced row-chunk split per route, and dense f32/f16. N is odd.
pub fn random_cases(rng: &mut Rng) -> Vec<Box<dyn OpCase>> {
    let mut cases = random::route_cases(rng);
    cases.extend(random::matvec_cases(rng));
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
