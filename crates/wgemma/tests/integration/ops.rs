//! Every op through the harness on the real adapter (lavapipe in CI): GPU vs CPU reference.

use wgemma::harness::{assert_cases_pass, rng};

#[test]
fn random_cases_pass() {
    for seed in 0..4 {
        let cases = wgemma::ops::random_cases(&mut rng(1000 + seed));
        assert_cases_pass(&cases, seed..seed + 1);
    }
}
