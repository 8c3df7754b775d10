//! Harness cases of top-k: both routes over uniform, tied and special (NaN, inf) inputs vs
//! [`topk_ref`].

use super::{topk, topk_on_route, topk_ref, TopKRoute, FAST_K, FAST_N};
use crate::error::Result;
use crate::gpu::{DType, GpuContext, Tensor};
use crate::harness::{Check, Expected, OpCase, Prepared, Rng, Values};
use crate::ops::opset::OpSet;
use rand::Rng as _;

/// What a case's input holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TopKData {
    /// Continuous uniform values (ties unlikely).
    Uniform,
    /// Few distinct values: ties everywhere.
    Ties,
    /// Ties plus NaNs, +-inf and +-0.
    Specials,
}

/// Harness case: TopK of `rows` x `n` -> `k` on `route` (None: the route [`topk`] picks).
pub struct TopKCase {
    pub rows: usize,
    pub n: usize,
    pub k: usize,
    pub route: Option<TopKRoute>,
    pub data: TopKData,
}

/// Input values for a case (shared with the route-equality tests).
pub fn case_input(rng: &mut Rng, len: usize, data: TopKData) -> Vec<f32> {
    match data {
        TopKData::Uniform => (0..len).map(|_| rng.random_range(-8.0..8.0)).collect(),
        TopKData::Ties | TopKData::Specials => {
            let mut x: Vec<f32> = (0..len)
                .map(|_| rng.random_range(-6i32..6) as f32 * 0.25)
                .collect();
            if data == TopKData::Specials {
                let specials = [
                    f32::NAN,
                    -f32::NAN,
                    f32::from_bits(0x7fc0_1234),
                    f32::INFINITY,
                    f32::NEG_INFINITY,
                    0.0,
                    -0.0,
                ];
                for _ in 0..(len / 16).max(1) {
                    let i = rng.random_range(0..len);
                    x[i] = specials[rng.random_range(0..specials.len())];
                }
            }
            x
        }
    }
}

impl OpCase for TopKCase {
    fn name(&self) -> String {
        let route = match self.route {
            Some(r) => format!("{r:?}"),
            None => "auto".into(),
        };
        format!(
            "topk {route} rows={} n={} k={} {:?}",
            self.rows, self.n, self.k, self.data
        )
    }

    fn prepare(&self, ctx: &GpuContext, rng: &mut Rng) -> Result<Prepared> {
        let x = case_input(rng, self.rows * self.n, self.data);
        let (ref_values, ref_indices) = topk_ref(&x, self.n, self.k);
        let input = Tensor::from_f32(ctx, "topk input", &[self.rows, 1, self.n], &x)?;
        let values = Tensor::zeros(ctx, "topk values", &[self.rows, 1, self.k], DType::F32)?;
        let indices = Tensor::zeros(ctx, "topk indices", &[self.rows, 1, self.k], DType::U32)?;
        let ops = OpSet::with_mtp();
        let plan = match self.route {
            Some(route) => topk_on_route(ctx, &ops, &input, &values, &indices, route)?,
            None => topk(ctx, &ops, &input, &values, &indices)?,
        };
        Ok(Prepared {
            kernels: vec![plan.kernel],
            outputs: vec![
                Expected {
                    name: "values",
                    tensor: values,
                    reference: Values::F32(ref_values),
                    check: Check::Exact,
                },
                Expected {
                    name: "indices",
                    tensor: indices,
                    reference: Values::U32(ref_indices),
                    check: Check::Exact,
                },
            ],
            bytes_moved: (self.rows * (self.n + 2 * self.k) * 4) as u64,
        })
    }
}

/// The fast shape (auto route) and the generic route over random rows, lengths and k.
pub fn random_cases(rng: &mut Rng) -> Vec<Box<dyn OpCase>> {
    let data = [TopKData::Uniform, TopKData::Ties, TopKData::Specials];
    let n = rng.random_range(1..3000);
    let small_n = rng.random_range(1..100);
    vec![
        Box::new(TopKCase {
            rows: 1,
            n: FAST_N,
            k: FAST_K,
            route: None,
            data: data[rng.random_range(0..3)],
        }),
        Box::new(TopKCase {
            rows: rng.random_range(1..=3),
            n,
            k: rng.random_range(1..=n.min(64)),
            route: Some(TopKRoute::Generic),
            data: data[rng.random_range(0..3)],
        }),
        // k == n: a full sort.
        Box::new(TopKCase {
            rows: rng.random_range(1..=3),
            n: small_n,
            k: small_n,
            route: Some(TopKRoute::Generic),
            data: TopKData::Specials,
        }),
    ]
}

/// E2B's centroid head: 2048 centroid logits -> 32, on both routes.
pub fn bench_cases() -> Vec<Box<dyn OpCase>> {
    [TopKRoute::Fast2048To32, TopKRoute::Generic]
        .into_iter()
        .map(|route| {
            Box::new(TopKCase {
                rows: 1,
                n: FAST_N,
                k: FAST_K,
                route: Some(route),
                data: TopKData::Uniform,
            }) as Box<dyn OpCase>
        })
        .collect()
}
