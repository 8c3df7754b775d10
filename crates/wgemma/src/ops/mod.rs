//! The operator library: one folder per operator holding its WGSL shader(s), its host side
//! (guards, route choice, binding, dispatch) and its CPU reference.

pub mod elementwise;
pub mod read_bandwidth;

use crate::harness::{OpCase, Rng};

/// Harness cases of every op over random shapes (the test suite runs these with many seeds).
pub fn random_cases(rng: &mut Rng) -> Vec<Box<dyn OpCase>> {
    let mut cases = Vec::new();
    cases.extend(elementwise::random_cases(rng));
    cases.extend(read_bandwidth::random_cases(rng));
    cases
}

/// Cases at the real Gemma 4 E2B shapes, for `wgemma ops bench` (and checks where lavapipe
/// is fast enough).
pub fn bench_cases() -> Vec<Box<dyn OpCase>> {
    let mut cases = Vec::new();
    // First: the roofline the other cases are read against.
    cases.extend(read_bandwidth::bench_cases());
    cases.extend(elementwise::bench_cases());
    cases
}
