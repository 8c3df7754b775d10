//! Harness cases of GeGLU: both layouts and the strided `up` vs their CPU references.

use super::{geglu, geglu_fused, geglu_ref, geglu_strided, geglu_strided_ref};
use crate::error::Result;
use crate::gpu::{DType, GpuContext, Tensor};
use crate::harness::{Check, Expected, OpCase, Prepared, Rng, Values};
use rand::Rng as _;

/// Harness case: `m` rows of intermediate size `inter`; `range` bounds the gate values.
pub struct GegluCase {
    pub m: usize,
    pub inter: usize,
    pub fused: bool,
    pub range: f32,
}

impl GegluCase {
    pub fn new(m: usize, inter: usize, fused: bool) -> Self {
        GegluCase {
            m,
            inter,
            fused,
            range: 6.0,
        }
    }
}

impl OpCase for GegluCase {
    fn name(&self) -> String {
        format!(
            "geglu {} m={} inter={} range={}",
            if self.fused { "fused" } else { "split" },
            self.m,
            self.inter,
            self.range
        )
    }

    fn prepare(&self, ctx: &GpuContext, rng: &mut Rng) -> Result<Prepared> {
        let (m, i) = (self.m, self.inter);
        let n = m * i;
        let r = self.range;
        let gate: Vec<f32> = (0..n).map(|_| rng.random_range(-r..r)).collect();
        let up: Vec<f32> = (0..n).map(|_| rng.random_range(-3.0..3.0)).collect();
        let out = Tensor::zeros(ctx, "out", &[m, i], DType::F32)?;
        let kernel = if self.fused {
            let gate_up: Vec<f32> = gate
                .chunks(i)
                .zip(up.chunks(i))
                .flat_map(|(g, u)| g.iter().chain(u).copied())
                .collect();
            let t = Tensor::from_f32(ctx, "gate_up", &[m, 2 * i], &gate_up)?;
            geglu_fused(ctx, &t, &out)?
        } else {
            let tg = Tensor::from_f32(ctx, "gate", &[m, i], &gate)?;
            let tu = Tensor::from_f32(ctx, "up", &[m, i], &up)?;
            geglu(ctx, &tg, &tu, &out)?
        };
        Ok(Prepared {
            kernels: vec![kernel],
            outputs: vec![Expected {
                name: "out",
                tensor: out,
                reference: Values::F32(geglu_ref(&gate, &up)),
                // lavapipe measures ~2e-6 / 2e-15; erf-GELU instead of tanh-GELU would be off
                // by up to ~5e-4.
                check: Check::Close {
                    max_abs: 2e-5,
                    nmse: 1e-12,
                },
            }],
            bytes_moved: 3 * 4 * n as u64,
        })
    }
}

/// Both layouts over random sizes (not multiples of the workgroup, single rows).
pub fn random_cases(rng: &mut Rng) -> Vec<Box<dyn OpCase>> {
    [false, true]
        .into_iter()
        .map(|fused| {
            Box::new(GegluCase::new(
                rng.random_range(1..5),
                rng.random_range(1..1500),
                fused,
            )) as Box<dyn OpCase>
        })
        .collect()
}

/// E2B: intermediate 6144 (12288 on the KV-shared layers), decode and a 512-row prefill.
pub fn bench_cases() -> Vec<Box<dyn OpCase>> {
    let mut cases: Vec<Box<dyn OpCase>> = Vec::new();
    for inter in [6144, 12288] {
        for fused in [false, true] {
            cases.push(Box::new(GegluCase::new(1, inter, fused)));
        }
        cases.push(Box::new(GegluCase::new(512, inter, true)));
    }
    cases
}

/// Harness case: M rows, I columns, the slice `layer` of `layers`.
pub struct GegluStridedCase {
    pub m: usize,
    pub inter: usize,
    pub layers: usize,
    pub layer: usize,
}

impl OpCase for GegluStridedCase {
    fn name(&self) -> String {
        format!(
            "geglu_strided m={} i={} layer={}/{}",
            self.m, self.inter, self.layer, self.layers
        )
    }

    fn prepare(&self, ctx: &GpuContext, rng: &mut Rng) -> Result<Prepared> {
        let stride = self.layers * self.inter;
        let gate: Vec<f32> = (0..self.m * self.inter)
            .map(|_| rng.random_range(-4.0..4.0))
            .collect();
        let up: Vec<f32> = (0..self.m * stride)
            .map(|_| rng.random_range(-2.0..2.0))
            .collect();
        let tg = Tensor::from_f32(ctx, "gate", &[self.m, self.inter], &gate)?;
        let tu = Tensor::from_f32(ctx, "up", &[self.m, stride], &up)?;
        let out = Tensor::zeros(ctx, "out", &[self.m, self.inter], DType::F32)?;
        let offset = self.layer * self.inter;
        let kernel = geglu_strided(ctx, &tg, &tu, stride, offset, &out)?;
        Ok(Prepared {
            kernels: vec![kernel],
            outputs: vec![Expected {
                name: "out",
                tensor: out,
                reference: Values::F32(geglu_strided_ref(&gate, &up, self.inter, stride, offset)),
                check: Check::Close {
                    max_abs: 1e-5,
                    nmse: 1e-10,
                },
            }],
            bytes_moved: 12 * (self.m * self.inter) as u64,
        })
    }
}

pub fn random_strided_cases(rng: &mut Rng) -> Vec<Box<dyn OpCase>> {
    let layers = rng.random_range(1..6);
    vec![Box::new(GegluStridedCase {
        m: rng.random_range(1..9),
        inter: rng.random_range(1..300),
        layers,
        layer: rng.random_range(0..layers),
    })]
}
