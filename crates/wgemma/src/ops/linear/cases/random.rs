//! Random shapes for every Q4 route: the routes' own shapes, the matvecs' small M, long
//! rows and forced geometries, and the f16 prefill GEMMs the device runs.

use super::{boxed, CaseEpilogue, Q4LinearCase};
use crate::harness::{OpCase, Rng};
use crate::ops::linear::{LinearRoute, MatvecTuning};
use rand::Rng as _;

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
pub(super) fn random_gemm_m(rng: &mut Rng) -> usize {
    [10, 11, 13, 14, 15][rng.random_range(0..5)]
}

/// Each Q4 route on shapes it is chosen for (M = 1 and 3 with subgroup and portable
/// reductions and groups of 8/16, the GEMM, the generic route auto and forced, the GEMM on
/// K tails) and a forced row-chunk split per route.
pub(super) fn route_cases(rng: &mut Rng) -> Vec<Box<dyn OpCase>> {
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
pub(super) fn matvec_cases(rng: &mut Rng) -> Vec<Box<dyn OpCase>> {
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

/// The f16 prefill GEMM routes the device runs (shader-f16; 16x16x16 cooperative
/// matrices), each forced, over random shapes: M from 16 (partial 64-row tiles), odd N
/// (partial n-tiles), groups 32..=128 (and for the tensor-core route a K tail of K % 32 with
/// group 8), and a weight split into row chunks. Empty on a device with neither.
pub fn prefill_cases(caps: &crate::ops::linear::DeviceCaps, rng: &mut Rng) -> Vec<Box<dyn OpCase>> {
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
