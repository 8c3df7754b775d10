//! Harness cases for scatter.

use super::{scatter, scatter_on_route, scatter_ref, ScatterRoute, UniqueIndices};
use crate::error::Result;
use crate::gpu::{GpuContext, Tensor};
use crate::harness::{Check, Expected, OpCase, Prepared, Rng, Values};
use crate::ops::opset::OpSet;
use rand::Rng as _;

/// What the index tensor of a case holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScatterIndices {
    /// Drawn from a small range: many duplicates; uncertified.
    Duplicates,
    /// Distinct within each row, certified on upload ([`UniqueIndices::verify_and_upload`]).
    CertifiedUnique,
}

/// Scatter `s` source elements per row into `rows` rows of `n`.
pub struct ScatterCase {
    pub rows: usize,
    pub n: usize,
    pub s: usize,
    pub indices: ScatterIndices,
    /// Mix in indices >= n (dropped).
    pub out_of_range: bool,
    /// `None`: the route `scatter` picks (parallel exactly when certified).
    pub route: Option<ScatterRoute>,
}

/// Indices for one row: `s` values, distinct when `unique` (then `s <= n + extra`).
pub fn row_indices(
    rng: &mut Rng,
    n: usize,
    s: usize,
    unique: bool,
    out_of_range: bool,
) -> Vec<u32> {
    let extra = if out_of_range { s / 8 + 1 } else { 0 };
    if unique {
        // Partial Fisher-Yates over 0..n + extra: values >= n are distinct out-of-range ones.
        let mut pool: Vec<u32> = (0..(n + extra) as u32).collect();
        for i in 0..s {
            let j = rng.random_range(i..pool.len());
            pool.swap(i, j);
        }
        pool.truncate(s);
        pool
    } else {
        let range = (s / 4).clamp(1, n) as u32;
        (0..s)
            .map(|_| {
                if out_of_range && rng.random_range(0..8) == 0 {
                    [n as u32, u32::MAX][rng.random_range(0..2)]
                } else {
                    rng.random_range(0..range)
                }
            })
            .collect()
    }
}

impl OpCase for ScatterCase {
    fn name(&self) -> String {
        format!(
            "scatter {} rows={} n={} s={} {:?}{}",
            match self.route {
                Some(r) => format!("{r:?}"),
                None => "auto".into(),
            },
            self.rows,
            self.n,
            self.s,
            self.indices,
            if self.out_of_range { " +oob" } else { "" }
        )
    }

    fn prepare(&self, ctx: &GpuContext, rng: &mut Rng) -> Result<Prepared> {
        let (rows, n, s) = (self.rows, self.n, self.s);
        let dst_host: Vec<f32> = (0..rows * n)
            .map(|_| rng.random_range(-9.0..-8.0))
            .collect();
        let src_host: Vec<f32> = (0..rows * s).map(|_| rng.random_range(-4.0..4.0)).collect();
        let unique = self.indices == ScatterIndices::CertifiedUnique;
        let idx_host: Vec<u32> = (0..rows)
            .flat_map(|_| row_indices(rng, n, s, unique, self.out_of_range))
            .collect();
        let dst = Tensor::from_f32(ctx, "dst", &[rows, n], &dst_host)?;
        let src = Tensor::from_f32(ctx, "src", &[rows, s], &src_host)?;
        let certificate = if unique {
            Some(UniqueIndices::verify_and_upload(
                ctx,
                "idx",
                &[rows, s],
                &idx_host,
            )?)
        } else {
            None
        };
        let idx = match &certificate {
            Some(c) => c.tensor().clone(),
            None => Tensor::from_u32(ctx, "idx", &[rows, s], &idx_host)?,
        };
        let ops = OpSet::with_mtp();
        let plan = match self.route {
            None => scatter(ctx, &ops, &dst, &idx, &src, certificate.as_ref())?,
            Some(r) => scatter_on_route(ctx, &ops, &dst, &idx, &src, certificate.as_ref(), r)?,
        };
        // 4-byte accesses per source element: idx, src, dst (+ winner x3 and idx x2 safe).
        let per_elem = match plan.route {
            ScatterRoute::ParallelUnique => 12,
            ScatterRoute::DuplicateSafe => 32,
        };
        Ok(Prepared {
            kernels: plan.kernels,
            outputs: vec![Expected {
                name: "dst",
                tensor: dst,
                reference: Values::F32(scatter_ref(&dst_host, n, &idx_host, &src_host, s)),
                check: Check::Exact,
            }],
            bytes_moved: (rows * s * per_elem) as u64,
        })
    }
}

/// Duplicates (safe route), certified unique (parallel route) and certified unique forced
/// onto the safe route, over random shapes, with and without out-of-range indices.
pub fn random_cases(rng: &mut Rng) -> Vec<Box<dyn OpCase>> {
    let mut case = |indices, route| {
        let n = rng.random_range(1..3000);
        let s = match indices {
            ScatterIndices::Duplicates => rng.random_range(1..3000),
            ScatterIndices::CertifiedUnique => rng.random_range(1..=n),
        };
        Box::new(ScatterCase {
            rows: rng.random_range(1..=3),
            n,
            s,
            indices,
            out_of_range: rng.random_range(0..2) == 0,
            route,
        }) as Box<dyn OpCase>
    };
    vec![
        case(ScatterIndices::Duplicates, None),
        case(ScatterIndices::CertifiedUnique, None),
        case(
            ScatterIndices::CertifiedUnique,
            Some(ScatterRoute::DuplicateSafe),
        ),
    ]
}

/// E2B's centroid head: 4096 certified-unique ids into a 262144 row, on both routes.
pub fn bench_cases() -> Vec<Box<dyn OpCase>> {
    [ScatterRoute::ParallelUnique, ScatterRoute::DuplicateSafe]
        .into_iter()
        .map(|route| {
            Box::new(ScatterCase {
                rows: 1,
                n: 262_144,
                s: 4096,
                indices: ScatterIndices::CertifiedUnique,
                out_of_range: false,
                route: Some(route),
            }) as Box<dyn OpCase>
        })
        .collect()
}
