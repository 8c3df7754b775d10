//! Harness cases of the ggml linear op: each format and route against
//! [`ggml_linear_ref`], on random blocks whose scales are drawn finite (every other byte
//! random, so every nibble, 6-bit scale and sign pattern occurs).

use super::blocks::GgmlType;
use super::{ggml_linear_ref, ggml_linear_with, GgmlRoute, GgmlWeight, NATIVE_TYPES};
use crate::error::Result;
use crate::gpu::{DType, GpuContext, Tensor};
use crate::harness::{Expected, OpCase, Prepared, Rng, Values};
use crate::ops::linear::tolerance;
use rand::Rng as _;

/// One case: `m` rows of x times a random `[n, k]` weight in `ty`.
pub struct GgmlLinearCase {
    pub ty: GgmlType,
    pub m: usize,
    pub k: usize,
    pub n: usize,
    /// Forced route (None: chosen by M).
    pub route: Option<GgmlRoute>,
    /// Bytes per weight chunk (None: the device's binding limit).
    pub max_binding: Option<u64>,
}

impl GgmlLinearCase {
    pub fn new(ty: GgmlType, m: usize, k: usize, n: usize) -> Self {
        GgmlLinearCase {
            ty,
            m,
            k,
            n,
            route: None,
            max_binding: None,
        }
    }
}

/// Byte ranges of a block's f16 scales (`d`, `dmin` / `m`), drawn finite.
fn scale_fields(ty: GgmlType) -> &'static [(usize, usize)] {
    match ty {
        GgmlType::Q8_0 | GgmlType::Q5_0 | GgmlType::Q4_0 => &[(0, 2)],
        GgmlType::Q6_K => &[(208, 210)],
        _ => &[(0, 2), (2, 4)],
    }
}

/// `rows` rows of `k` weights in random blocks of `ty` with scales of magnitude about
/// `1 / 2^7` (values of order one) and random signs.
pub fn random_blocks(rng: &mut Rng, ty: GgmlType, rows: usize, k: usize) -> Vec<u8> {
    let mut bytes: Vec<u8> = (0..rows * ty.bytes_of(k)).map(|_| rng.random()).collect();
    for block in bytes.chunks_exact_mut(ty.block_bytes()) {
        for &(a, _) in scale_fields(ty) {
            let v = rng.random_range(0.002f32..0.01) * if rng.random() { 1.0 } else { -1.0 };
            block[a..a + 2].copy_from_slice(&half::f16::from_f32(v).to_le_bytes());
        }
    }
    bytes
}

impl OpCase for GgmlLinearCase {
    fn name(&self) -> String {
        let route = self.route.map_or("auto".to_string(), |r| r.to_string());
        let chunk = self
            .max_binding
            .map_or(String::new(), |b| format!(" chunk<={}MiB", b >> 20));
        format!(
            "ggml_linear {:?} {route} m={} k={} n={}{chunk}",
            self.ty, self.m, self.k, self.n
        )
    }

    fn prepare(&self, ctx: &GpuContext, rng: &mut Rng) -> Result<Prepared> {
        let (m, k, n) = (self.m, self.k, self.n);
        let blocks = random_blocks(rng, self.ty, n, k);
        let x: Vec<f32> = (0..m * k).map(|_| rng.random_range(-1.0..1.0)).collect();
        let w = GgmlWeight::upload(ctx, self.ty, n, k, &blocks, self.max_binding)?;
        let tx = Tensor::from_f32(ctx, "x", &[m, k], &x)?;
        let ty = Tensor::zeros(ctx, "y", &[m, n], DType::F32)?;
        let op = ggml_linear_with(ctx, &tx, &w, &ty, self.route)?;
        let (want, bound) = ggml_linear_ref(&x, m, k, self.ty, &blocks, n)?;
        Ok(Prepared {
            kernels: op.into_kernels(),
            outputs: vec![Expected {
                name: "y",
                tensor: ty,
                reference: Values::F32(want),
                check: tolerance(k, bound),
            }],
            bytes_moved: w.bytes() + 4 * (m * k + m * n) as u64,
        })
    }
}

/// Every format on both routes over small random shapes (the test suite runs these with
/// several seeds).
pub fn random_cases(rng: &mut Rng) -> Vec<Box<dyn OpCase>> {
    let mut cases = Vec::new();
    for ty in NATIVE_TYPES {
        let block = ty.block_elements().max(32);
        let k = block * rng.random_range(1..4);
        let n = rng.random_range(1..80);
        let mut matvec = GgmlLinearCase::new(ty, rng.random_range(1..=8), k, n);
        matvec.route = Some(GgmlRoute::Matvec);
        let mut gemm = GgmlLinearCase::new(ty, rng.random_range(1..40), k, n);
        gemm.route = Some(GgmlRoute::Gemm);
        cases.push(matvec);
        cases.push(gemm);
    }
    cases
        .into_iter()
        .map(|c| Box::new(c) as Box<dyn OpCase>)
        .collect()
}

/// E2B's linear shapes (K x N: q_proj 1536 x 2048, k/v_proj 1536 x 256, gate_up 1536 x
/// 12288, down 6144 x 1536, o_proj 2048 x 1536) at M = 1, 3 and 8 (matvec) and a 40-row
/// prefill (GEMM), for every format; the tied lm_head (1536 x 262144) in the formats
/// llama.cpp gives token_embd (Q8_0, Q6_K, Q5_K, Q4_K), split at 128 MiB so that every
/// device runs it chunked. For `wgemma ops check` (too slow for lavapipe's test runs).
pub fn check_cases() -> Vec<Box<dyn OpCase>> {
    let shapes = [
        (1536, 2048),
        (1536, 256),
        (1536, 12288),
        (6144, 1536),
        (2048, 1536),
    ];
    let mut cases = Vec::new();
    for ty in NATIVE_TYPES {
        for &(k, n) in &shapes {
            for m in [1, 3, 8, 40] {
                cases.push(GgmlLinearCase::new(ty, m, k, n));
            }
        }
    }
    for ty in [
        GgmlType::Q8_0,
        GgmlType::Q6_K,
        GgmlType::Q5_K,
        GgmlType::Q4_K,
    ] {
        for m in [1, 3, 8] {
            let mut head = GgmlLinearCase::new(ty, m, 1536, 262_144);
            head.max_binding = Some(128 << 20);
            cases.push(head);
        }
    }
    cases
        .into_iter()
        .map(|c| Box::new(c) as Box<dyn OpCase>)
        .collect()
}
