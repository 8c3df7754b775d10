//! Harness cases of the int8 family: the matvecs (`q4q8_matvec`) on random shapes at
//! M = 1..=9 with every epilogue, both reductions, staged chunks and forced geometries, the
//! prefill GEMM (`q4_gemm_int8`) on random shapes; and every E2B shape at M = 1, 2, 3, 4 and
//! 8 (matvec) and 64 and 512 (GEMM, the prefill shapes) for `wgemma ops check`.

use super::random::{random_group, random_k, random_odd_n, random_tuning};
use super::{boxed, copies_for, CaseEpilogue, Q4LinearCase, WeightData, E2B_SHAPES};
use crate::harness::{Check, OpCase, Rng};
use crate::ops::linear::quant::Q4Host;
use crate::ops::linear::reference::tolerance as f32_tolerance;
use crate::ops::linear::LinearRoute::{Q4GemmInt8, Q4Q8Matvec};
use crate::ops::linear::MatvecTuning;
use rand::Rng as _;

/// The int8 route against [`super::super::q4q8_linear_ref`]: the f32 bound of
/// [`f32_tolerance`] plus two activation roundings that the kernel's `127 / max|x|` (WGSL
/// division, 2.5 ulp) may place on the other side of a tie than the reference's, each off by
/// one step d = max|x| / 127 (x in [-1, 1]: d <= 1/127) times the largest weight; nmse
/// 1e-7, which one such flip stays under while one wrong weight exceeds it.
pub(super) fn tolerance(k: usize, bound: f64, host: &Q4Host) -> Check {
    let Check::Close { max_abs, .. } = f32_tolerance(k, bound) else {
        unreachable!("tolerance is a Close check")
    };
    let groups = host.k / host.group;
    let max_scale = (0..host.n * groups)
        .map(|e| host.scale(e / groups, e % groups).abs())
        .fold(0.0f32, f32::max);
    Check::Close {
        max_abs: max_abs + 2.0 * 8.0 * max_scale / 127.0,
        nmse: 1e-7,
    }
}

/// Random int8 cases: M = 1, 2, 3, 4 and 5..=9 with each epilogue and reduction, a long K
/// staged in chunks at M = 8, a forced geometry and a split weight.
pub(super) fn random_cases(rng: &mut Rng) -> Vec<Box<dyn OpCase>> {
    let mut cases = Vec::new();
    for m in [1, 2, 3, 4, rng.random_range(5..=9)] {
        let g = random_group(rng);
        let epilogue = [
            CaseEpilogue::None,
            CaseEpilogue::GegluPairs,
            CaseEpilogue::GeluMul,
        ][rng.random_range(0..3)];
        let n = match epilogue {
            CaseEpilogue::GegluPairs => 2 * rng.random_range(1..100),
            _ => random_odd_n(rng, 1, 200),
        };
        let mut c = Q4LinearCase::new(m, n, random_k(rng, g), g, Q4Q8Matvec);
        c.epilogue = epilogue;
        c.portable = rng.random_bool(0.5);
        cases.push(boxed(c));
    }
    // K = 6,400..12,800 at M = 8: several staged chunks (a barrier pair each).
    let mut c = Q4LinearCase::new(
        8,
        random_odd_n(rng, 1, 60),
        32 * rng.random_range(200..=400),
        32,
        Q4Q8Matvec,
    );
    c.portable = rng.random_bool(0.5);
    cases.push(boxed(c));
    let g = random_group(rng);
    let mut c = Q4LinearCase::new(
        rng.random_range(1..=9),
        random_odd_n(rng, 1, 200),
        random_k(rng, g),
        g,
        Q4Q8Matvec,
    );
    c.tuning = Some(random_tuning(rng));
    c.epilogue = [CaseEpilogue::None, CaseEpilogue::GeluMul][rng.random_range(0..2)];
    cases.push(boxed(c));
    let k = random_k(rng, 32);
    let mut c = Q4LinearCase::new(3, random_odd_n(rng, 129, 320), k, 32, Q4Q8Matvec);
    c.max_binding = Some(64 * k as u64 / 2);
    cases.push(boxed(c));
    cases.extend(int8_gemm_cases(rng));
    cases
}

/// The int8 prefill GEMM on random shapes: M = 10..=15 chosen on its own (below the
/// tensor-core GEMM's 16 rows, so on every device with int8 activations), then forced at
/// M = 16..=150 (partial 64-row tiles), odd N (partial 128-row tiles), groups 32..=128, an
/// odd count of blocks per row, and a weight split into row chunks.
pub fn int8_gemm_cases(rng: &mut Rng) -> Vec<Box<dyn OpCase>> {
    let mut cases = Vec::new();
    let g = random_group(rng);
    let c = Q4LinearCase::new(
        rng.random_range(10..=15),
        random_odd_n(rng, 1, 300),
        random_k(rng, g),
        g,
        Q4GemmInt8,
    );
    cases.push(boxed(c));
    for k_blocks in [None, Some(2 * rng.random_range(0..8) + 1)] {
        let g = if k_blocks.is_some() {
            32
        } else {
            random_group(rng)
        };
        let k = k_blocks.map_or_else(|| random_k(rng, g), |b| 32 * b);
        let mut c = Q4LinearCase::new(
            rng.random_range(16..=150),
            random_odd_n(rng, 1, 300),
            k,
            g,
            Q4GemmInt8,
        );
        c.force = true;
        cases.push(boxed(c));
    }
    let k = random_k(rng, 32);
    let mut c = Q4LinearCase::new(rng.random_range(16..=80), 2 * 129 + 1, k, 32, Q4GemmInt8);
    c.force = true;
    c.max_binding = Some(64 * k as u64 / 2);
    cases.push(boxed(c));
    cases
}

/// Every E2B matvec shape at M = 1, 2, 3, 4 and 8 on the int8 route (random packed weights;
/// the LM head in row chunks where a binding cannot hold it).
pub fn int8_check_cases() -> Vec<Box<dyn OpCase>> {
    let mut cases = Vec::new();
    for (k, n) in E2B_SHAPES {
        for m in [1, 2, 3, 4, 8] {
            let mut c = Q4LinearCase::new(m, n, k, 32, Q4Q8Matvec);
            c.weights = WeightData::RandomPacked;
            c.copies = 1;
            cases.push(boxed(c));
        }
    }
    // The prefill GEMM at M = 64 on E2B's prefill projections, and at M = 512 (pp512) on
    // the first three (the CPU reference runs 1.6 to 4.8 x 10^9 products each).
    let gemm_shapes = [
        (1536, 6144),
        (1536, 2048),
        (6144, 1536),
        (1536, 256),
        (2048, 1536),
    ];
    for (i, (k, n)) in gemm_shapes.into_iter().enumerate() {
        for m in [64, 512] {
            if m == 512 && i > 2 {
                continue;
            }
            let mut c = Q4LinearCase::new(m, n, k, 32, Q4GemmInt8);
            c.weights = WeightData::RandomPacked;
            c.force = true;
            cases.push(boxed(c));
        }
    }
    cases
}

/// Other geometries of the int8 family on the widest shapes (the LM head, gate_up of the
/// double-wide MLP, its gate or up alone) at M = 1, 3 and 8: rows per quad 1, 2 or 4 and 16
/// or 32 lanes, no K split (`ops bench`: the route's table is decided from these).
pub(super) fn int8_bench_cases() -> Vec<Box<dyn OpCase>> {
    let mut cases = Vec::new();
    for (k, n) in [(1536, 262144), (1536, 24576), (1536, 12288)] {
        for m in [1, 3, 8] {
            for rows in [1, 2, 4] {
                for lanes in [16, 32] {
                    let mut c = Q4LinearCase::new(m, n, k, 32, Q4Q8Matvec);
                    c.weights = WeightData::RandomPacked;
                    c.copies = copies_for(n, k, 32);
                    c.tuning = Some(MatvecTuning {
                        rows,
                        lanes,
                        ksplit: 1,
                        unroll: false,
                    });
                    cases.push(boxed(c));
                }
            }
        }
    }
    cases
}
