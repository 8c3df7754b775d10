//! The operator library: one folder per operator holding its WGSL shader(s), its host side
//! (guards, route choice, binding, dispatch), its CPU reference and its harness cases (those
//! only with the `harness` feature, or in the crate's own tests).

pub mod argmax;
pub mod attention;
pub mod embedding;
pub mod gather;
pub mod geglu;
pub mod ggml_linear;
pub mod linear;
pub mod min_fill;
pub mod moe;
pub mod opset;
pub mod quantize;
// The device bandwidth probe is the op benches' roofline, apparatus of the harness only.
#[cfg(any(test, feature = "harness"))]
pub mod read_bandwidth;
pub mod rmsnorm;
pub mod rope;
pub mod scatter;
pub mod softcap;
pub mod spec_commit;
pub mod topk;

#[cfg(any(test, feature = "harness"))]
use crate::harness::{OpCase, Rng};

/// Harness cases of every op over random shapes (the test suite runs these with many seeds).
#[cfg(any(test, feature = "harness"))]
pub fn random_cases(rng: &mut Rng) -> Vec<Box<dyn OpCase>> {
    let mut cases = Vec::new();
    cases.extend(argmax::random_cases(rng));
    cases.extend(gather::random_cases(rng));
    cases.extend(topk::random_cases(rng));
    cases.extend(scatter::random_cases(rng));
    cases.extend(min_fill::random_cases(rng));
    cases.extend(linear::random_cases(rng));
    cases.extend(ggml_linear::random_cases(rng));
    cases.extend(quantize::random_cases(rng));
    cases.extend(read_bandwidth::random_cases(rng));
    cases.extend(rmsnorm::random_cases(rng));
    cases.extend(geglu::random_cases(rng));
    cases.extend(geglu::random_strided_cases(rng));
    cases.extend(softcap::random_cases(rng));
    cases.extend(spec_commit::random_cases(rng));
    cases.extend(embedding::random_cases(rng));
    cases.extend(attention::random_cases(rng));
    cases.extend(rope::random_cases(rng));
    cases.extend(moe::random_cases(rng));
    cases.extend(attention::decode_random_cases(rng));
    cases
}

/// Cases at the real Gemma 4 E2B shapes, for `wgemma ops bench` (and checks where lavapipe
/// is fast enough).
#[cfg(any(test, feature = "harness"))]
pub fn bench_cases() -> Vec<Box<dyn OpCase>> {
    let mut cases = Vec::new();
    // First: the roofline the other cases are read against.
    cases.extend(read_bandwidth::bench_cases());
    cases.extend(argmax::bench_cases());
    cases.extend(gather::bench_cases());
    cases.extend(topk::bench_cases());
    cases.extend(scatter::bench_cases());
    cases.extend(min_fill::bench_cases());
    cases.extend(linear::bench_cases());
    cases.extend(ggml_linear::bench_cases());
    cases.extend(quantize::bench_cases());
    cases.extend(rmsnorm::bench_cases());
    cases.extend(geglu::bench_cases());
    cases.extend(softcap::bench_cases());
    cases.extend(embedding::bench_cases());
    cases.extend(attention::bench_cases());
    cases.extend(rope::bench_cases());
    cases.extend(moe::bench_cases());
    cases.extend(attention::decode_bench_cases());
    cases
}
