//! Harness cases of the ggml linear op: each format and route against
//! [`ggml_linear_ref`], on random blocks whose scales are drawn finite (every other byte
//! random, so every nibble, 6-bit scale and sign pattern occurs).

use super::blocks::{dequantize_to_vec, GgmlType};
use super::{
    choose_route_on, ggml_linear_ref, ggml_linear_with, ggml_q8q8_linear_ref, GgmlRoute,
    GgmlWeight, NATIVE_TYPES,
};
use crate::error::Result;
use crate::gpu::{DType, GpuContext, Tensor};
use crate::harness::{Check, Expected, OpCase, Prepared, Rng, Values};
use crate::ops::linear::tolerance;
use rand::Rng as _;

/// One case: `m` rows of x times a random `[n, k]` weight in `ty`.
pub struct GgmlLinearCase {
    pub ty: GgmlType,
    pub m: usize,
    pub k: usize,
    pub n: usize,
    /// Forced route (None: chosen by M and the context's activations).
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
        let route = self
            .route
            .unwrap_or_else(|| choose_route_on(ctx, m, self.ty));
        let op = ggml_linear_with(ctx, &tx, &w, &ty, Some(route))?;
        let (want, check) = if route == GgmlRoute::MatvecInt8 {
            let (want, bound) = ggml_q8q8_linear_ref(&x, m, k, self.ty, &blocks, n)?;
            (want, int8_tolerance(k, bound, self.ty, &blocks)?)
        } else {
            let (want, bound) = ggml_linear_ref(&x, m, k, self.ty, &blocks, n)?;
            (want, tolerance(k, bound))
        };
        Ok(Prepared {
            kernels: op.into_kernels(),
            outputs: vec![Expected {
                name: "y",
                tensor: ty,
                reference: Values::F32(want),
                check,
            }],
            bytes_moved: w.bytes() + 4 * (m * k + m * n) as u64,
        })
    }
}

/// The int8 route against [`ggml_q8q8_linear_ref`]: the f32 bound of [`tolerance`] plus two
/// activation roundings that the kernel's `127 / max|x|` (WGSL division, 2.5 ulp) may place
/// on the other side of a tie than the reference's, each off by one step d = max|x| / 127
/// (x in [-1, 1]: d <= 1/127) times the largest weight; nmse 1e-7, which one such flip
/// stays under while one wrong weight exceeds it.
fn int8_tolerance(k: usize, bound: f64, ty: GgmlType, blocks: &[u8]) -> Result<Check> {
    let Check::Close { max_abs, .. } = tolerance(k, bound) else {
        unreachable!("tolerance is a Close check")
    };
    // A few thousand blocks at a time: the lm_head's weights never exist in f32 at once.
    let mut max_weight = 0.0f32;
    for part in blocks.chunks(4096 * ty.block_bytes()) {
        let values = dequantize_to_vec(ty, part)?;
        max_weight = values.iter().fold(max_weight, |a, v| a.max(v.abs()));
    }
    Ok(Check::Close {
        max_abs: max_abs + 2.0 * max_weight / 127.0,
        nmse: 1e-7,
    })
}

/// Every format on both routes over small random shapes, and Q8_0 on the int8 matvec at a
/// short K and at a long one staged in several chunks (the test suite runs these with
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
    let k = 32 * rng.random_range(1..12);
    let mut int8 = GgmlLinearCase::new(GgmlType::Q8_0, rng.random_range(1..=8), k, 77);
    int8.route = Some(GgmlRoute::MatvecInt8);
    cases.push(int8);
    // K = 6,400..12,800 at M = 8: more than 16 KiB of staged blocks, so several chunks.
    let k = 32 * rng.random_range(200..=400);
    let mut long = GgmlLinearCase::new(GgmlType::Q8_0, 8, k, rng.random_range(1..40));
    long.route = Some(GgmlRoute::MatvecInt8);
    cases.push(long);
    cases
        .into_iter()
        .map(|c| Box::new(c) as Box<dyn OpCase>)
        .collect()
}

/// E2B's linear shapes (K x N: q_proj 1536 x 2048, k/v_proj 1536 x 256, gate_up 1536 x
/// 12288, down 6144 x 1536, o_proj 2048 x 1536) at M = 1, 3 and 8 (matvec) and a 40-row
/// prefill (GEMM), for every format; the tied lm_head (1536 x 262144) in the formats
/// llama.cpp gives token_embd (Q8_0, Q6_K, Q5_K, Q4_K), split at 128 MiB so that every
/// device runs it chunked; and Q8_0 on the int8 matvec at the same shapes and rows (auto
/// takes it only where the context runs int8 activations). For `wgemma ops check` (too
/// slow for lavapipe's test runs).
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
    for m in [1, 3, 8] {
        for &(k, n) in shapes.iter().chain([&(1536, 262_144)]) {
            let mut int8 = GgmlLinearCase::new(GgmlType::Q8_0, m, k, n);
            int8.route = Some(GgmlRoute::MatvecInt8);
            if n == 262_144 {
                int8.max_binding = Some(128 << 20);
            }
            cases.push(int8);
        }
    }
    cases
        .into_iter()
        .map(|c| Box::new(c) as Box<dyn OpCase>)
        .collect()
}

/// `wgemma ops bench`: decode-sized matvecs (M = 1 and 3) at E2B's shapes and the lm_head,
/// Q8_0 on the f32 and the int8 matvec (the same bytes, two kernels) and the K-quants on
/// theirs; a 64-row prefill GEMM per format at the MLP's gate_up shape.
pub fn bench_cases() -> Vec<Box<dyn OpCase>> {
    let shapes = [(1536, 2048), (1536, 12288), (6144, 1536), (1536, 262_144)];
    let mut cases = Vec::new();
    for &(k, n) in &shapes {
        for m in [1, 3] {
            for route in [GgmlRoute::Matvec, GgmlRoute::MatvecInt8] {
                let mut c = GgmlLinearCase::new(GgmlType::Q8_0, m, k, n);
                c.route = Some(route);
                cases.push(c);
            }
            for ty in [GgmlType::Q6_K, GgmlType::Q5_K, GgmlType::Q4_K] {
                let mut c = GgmlLinearCase::new(ty, m, k, n);
                c.route = Some(GgmlRoute::Matvec);
                cases.push(c);
            }
        }
    }
    for ty in [
        GgmlType::Q8_0,
        GgmlType::Q6_K,
        GgmlType::Q5_K,
        GgmlType::Q4_K,
    ] {
        cases.push(GgmlLinearCase::new(ty, 64, 1536, 12288));
    }
    cases
        .into_iter()
        .map(|c| Box::new(c) as Box<dyn OpCase>)
        .collect()
}
