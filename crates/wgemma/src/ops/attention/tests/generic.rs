//! The generic split-K route (`attention_generic.wgsl`): head dims that are not powers of
//! two, against the f64 reference, over the same shapes the power-of-two kernels are
//! tested on (GQA, rows, sliding rings, chunked caches, forced splits, K = V, large scores).

use super::super::build::split_k_shader;
use super::super::*;
use crate::harness::{assert_cases_pass, OpCase};

fn boxed(cases: Vec<AttentionCase>) -> Vec<Box<dyn OpCase>> {
    cases
        .into_iter()
        .map(|c| Box::new(c) as Box<dyn OpCase>)
        .collect()
}

#[test]
fn the_generic_route_is_chosen_only_where_the_power_of_two_one_is_not() {
    assert_eq!(split_k_shader(64, false), Some(SHADER));
    assert_eq!(split_k_shader(512, true), Some(SHADER));
    for d in [4, 12, 24, 48, 100, 200, 508] {
        assert_eq!(split_k_shader(d, false), Some(GENERIC_SHADER), "D {d}");
    }
    assert_eq!(split_k_shader(24, true), Some(GENERIC_SHADER));
    // K = V rebuilds keys from two halves of vec4s: D must be a multiple of 8.
    assert_eq!(split_k_shader(12, true), None);
    assert_eq!(split_k_shader(516, false), None);
    assert_eq!(split_k_shader(6, false), None);
}

#[test]
fn non_power_of_two_head_dims_match_the_reference() {
    let mut cases = Vec::new();
    // Gemma 4 configs HF runs with head dims 24 (sliding) and 48 (full), and others: the
    // P V phase's thread map differs when D/4 does not divide the 128-thread workgroup.
    for (i, d) in [24, 48, 12, 40, 100, 200, 4, 508].into_iter().enumerate() {
        let (h, kvh) = [(8, 1), (4, 2), (6, 3), (32, 16)][i % 4];
        let m = [1, 3, 17][i % 3];
        cases.push(AttentionCase::new(h, kvh, d, m, 29 * i + 3));
    }
    assert_cases_pass(&boxed(cases), 0..1);
}

#[test]
fn non_power_of_two_head_dims_on_rings_chunks_splits_and_k_eq_v() {
    let mut cases = vec![
        AttentionCase::new(4, 1, 24, 17, 100).sliding(8, 17),
        AttentionCase::new(2, 1, 48, 3, 20_000).sliding(16, 5),
        AttentionCase::new(8, 1, 200, 1, 900).sliding(300, 3),
    ];
    for splits in [1, 7] {
        let mut c = AttentionCase::new(4, 2, 24, 17, 0);
        c.splits = Some(splits);
        cases.push(c);
    }
    let mut chunked = AttentionCase::new(4, 2, 48, 3, 700);
    chunked.max_len = 1200;
    chunked.chunk_bytes = Some(2 * 48 * 4 * 100);
    chunked.splits = Some(3);
    cases.push(chunked);
    for (d, m) in [(24, 1), (48, 3), (40, 17)] {
        let mut c = AttentionCase::new(8, 2, d, m, 300);
        c.k_eq_v = true;
        cases.push(c);
    }
    let mut loud = AttentionCase::new(4, 1, 48, 3, 600);
    loud.q_scale = 40.0;
    cases.push(loud);
    assert_cases_pass(&boxed(cases), 0..1);
}
