//! The benchmark cases: every matvec of an E2B decode token at each M, other geometries,
//! prefill and the portable reduction, with weight copies that read from memory, not cache.

use super::{boxed, copies_for, Q4LinearCase, WeightData, E2B_SHAPES};
use crate::harness::OpCase;
use crate::ops::linear::{LinearRoute, MatvecTuning};

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
    cases.extend(super::int8::int8_bench_cases());
    cases.push(e2b_case(1, 1536, 6144, Q4Gemv, true));
    cases.push(e2b_case(1, 1536, 262144, Q4Gemv, true));
    cases.push(e2b_case(128, 1536, 6144, Q4Gemm, false));
    cases.push(e2b_case(128, 6144, 1536, Q4Gemm, false));
    // Prefill (M = 512) on every GEMM route; a route the device lacks fails its case.
    for route in [Q4Gemm, Q4GemmF16, Q4GemmInt8, Q4GemmCoop] {
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
