use super::*;
use crate::gpu::DType;
use crate::gpu::{read_tensor_f32, Step};
use crate::harness::{assert_cases_pass, check, rng, test_context, OpCase};
use rand::Rng as _;

mod decode;
mod generic;
mod plan;
mod tiled;

pub(super) fn boxed(cases: Vec<AttentionCase>) -> Vec<Box<dyn OpCase>> {
    cases
        .into_iter()
        .map(|c| Box::new(c) as Box<dyn OpCase>)
        .collect()
}

#[test]
fn random_cases_pass() {
    for seed in 0..3 {
        assert_cases_pass(&random_cases(&mut rng(500 + seed)), seed..seed + 1);
    }
}

#[test]
fn head_dims_gqa_ratios_and_row_counts() {
    let mut cases = Vec::new();
    for (i, d) in [64, 256, 512].into_iter().enumerate() {
        for (j, (h, kvh)) in [(8, 1), (4, 2), (32, 16), (6, 3)].into_iter().enumerate() {
            let m = [1, 3, 17][(i + j) % 3];
            cases.push(AttentionCase::new(h, kvh, d, m, 37 * (i + j)));
        }
    }
    assert_cases_pass(&boxed(cases), 0..1);
}

#[test]
fn sliding_windows_smaller_and_larger_than_the_context() {
    let cases = vec![
        // Window larger than the context: everything visible.
        AttentionCase::new(4, 2, 64, 3, 20).sliding(512, 3),
        // Window smaller than the context, prefill chunk longer than the window.
        AttentionCase::new(4, 1, 64, 17, 100).sliding(8, 17),
        // Window 1: each query sees only itself (output = own V row).
        AttentionCase::new(2, 1, 64, 3, 10).sliding(1, 3),
        // Exactly the window.
        AttentionCase::new(8, 1, 256, 1, 511).sliding(512, 1),
    ];
    assert_cases_pass(&boxed(cases), 0..2);
}

#[test]
fn ring_wraps_far_beyond_its_slots() {
    // S = W + max_rows - 1 = 20: positions ~100K and ~200K wrapped thousands of times.
    let cases = vec![
        AttentionCase::new(4, 1, 64, 3, 100_003).sliding(16, 5),
        AttentionCase::new(2, 2, 64, 5, 200_000).sliding(16, 5),
        AttentionCase::new(8, 1, 256, 1, 70_001).sliding(512, 3),
    ];
    assert_cases_pass(&boxed(cases), 0..2);
}

#[test]
fn split_k_and_direct_routes_agree_and_empty_splits_weigh_nothing() {
    let mut cases = Vec::new();
    for splits in [1, 2, 7, 64] {
        // Prefill from position 0: early rows see 1..17 keys, so most splits are empty.
        let mut c = AttentionCase::new(4, 2, 64, 17, 0);
        c.splits = Some(splits);
        cases.push(c);
        let mut c = AttentionCase::new(8, 1, 256, 1, 1000).sliding(300, 3);
        c.splits = Some(splits);
        cases.push(c);
    }
    assert_cases_pass(&boxed(cases), 0..1);
}

#[test]
fn chunked_full_cache_matches_the_reference() {
    let mut cases = Vec::new();
    for (m, k_eq_v, splits) in [(1, false, None), (3, false, Some(3)), (17, true, None)] {
        let mut c = AttentionCase::new(4, 2, 64, m, 700);
        c.max_len = 1200;
        c.chunk_bytes = Some(2 * 64 * 4 * 100); // 100 slots per chunk: 12 chunks, 8 active
        c.k_eq_v = k_eq_v;
        c.splits = splits;
        cases.push(c);
    }
    assert_cases_pass(&boxed(cases), 0..1);
}

#[test]
fn k_eq_v_rebuilds_keys_from_values() {
    let mut cases = Vec::new();
    for (d, m, start) in [(512, 1, 900), (512, 3, 40), (64, 17, 5)] {
        let mut c = AttentionCase::new(8, 2, d, m, start);
        c.k_eq_v = true;
        cases.push(c);
    }
    // Near the position limit: the keys' rope angles are large.
    let mut far = AttentionCase::new(2, 1, 512, 1, 200_000).sliding(64, 1);
    far.k_eq_v = true;
    cases.push(far);
    assert_cases_pass(&boxed(cases), 0..1);
}

#[test]
fn softmax_is_stable_for_large_scores() {
    // Scores of several hundred: exp overflows f32 without the running max.
    let mut cases = Vec::new();
    for splits in [None, Some(5)] {
        let mut c = AttentionCase::new(4, 1, 256, 3, 600);
        c.q_scale = 40.0;
        c.splits = splits;
        cases.push(c);
    }
    assert_cases_pass(&boxed(cases), 0..2);
}

#[test]
fn long_context_8k_decode_head_dim_256() {
    let cases = vec![
        AttentionCase::new(8, 1, 256, 1, 8191),
        AttentionCase::new(8, 1, 256, 3, 8189).sliding(512, 3),
    ];
    assert_cases_pass(&boxed(cases), 0..1);
}

#[test]
fn bench_cases_are_well_formed() {
    // Names and a cheap one: the E2B sliding decode at 4K (the others are too slow for a
    // CPU rasteriser's reference; they share its routes, covered by the smaller cases).
    let cases = bench_cases();
    assert!(cases.len() >= 10);
    let ctx = test_context();
    let report = pollster::block_on(check(ctx, cases[0].as_ref(), 0)).unwrap();
    assert!(report.pass(), "{report}");
    assert!(report.case.contains("sliding") && report.case.contains("start=4095"));
}

#[test]
fn sincos_copies_are_identical() {
    let body = |name: &str| -> String {
        let src = crate::gpu::registry::shader(name).unwrap().source;
        let a = src.find("fn rope_sincos").expect("rope_sincos");
        let b = src.find("// END rope_sincos").expect("END marker");
        src[a..b].to_string()
    };
    assert_eq!(body("rope"), body("attention"));
}

/// Runs one forward of `m` rows on `cache`: advance, append, attention; returns the output.
fn forward(
    cache: &mut KvCache,
    scratch: &AttentionScratch,
    heads: usize,
    k: &[f32],
    v: &[f32],
    q: &[f32],
) -> Vec<f32> {
    let ctx = test_context();
    let cfg = *cache.config();
    let (kvh, d) = (cfg.kv_heads, cfg.head_dim);
    let m = v.len() / (kvh * d);
    let range = cache.advance(m).unwrap();
    let positions: Vec<u32> = range.map(|p| p as u32).collect();
    let tpos = Tensor::from_u32(ctx, "pos", &[m], &positions).unwrap();
    let tq = Tensor::from_f32(ctx, "q", &[m, heads, d], q).unwrap();
    let tk = Tensor::from_f32(ctx, "k", &[m, kvh, d], k).unwrap();
    let tv = Tensor::from_f32(ctx, "v", &[m, kvh, d], v).unwrap();
    let out = Tensor::zeros(ctx, "out", &[m, heads, d], DType::F32).unwrap();
    let append = cache.append_kernel(ctx, Some(&tk), &tv, &tpos).unwrap();
    let attention = Attention::new(
        ctx,
        AttentionInputs {
            fold_q: None,
            q: &tq,
            positions: &tpos,
            cache,
            out: &out,
            key_from_v: None,
        },
        scratch,
    )
    .unwrap();
    let mut step = Step::new(ctx);
    let mut recorded = Ok(());
    step.pass(|pass| {
        recorded = append
            .record(pass, m)
            .and_then(|_| attention.record(pass, m, cache.len()).map(|_| ()));
    });
    recorded.unwrap();
    step.submit();
    pollster::block_on(read_tensor_f32(ctx, &out)).unwrap()
}

#[test]
fn decode_after_rollback_equals_decode_without_the_rejected_rows() {
    let ctx = test_context();
    let (heads, kvh, d, n) = (4, 1, 64, 40);
    let row = kvh * d;
    let scratch = AttentionScratch::for_head_dim(ctx, d).unwrap();
    let mut r = rng(9);
    let mut rand =
        |len: usize| -> Vec<f32> { (0..len).map(|_| r.random_range(-1.0..1.0)).collect() };
    let (k_prompt, v_prompt) = (rand(n * row), rand(n * row));
    // Verify forward: the seed row at n, then 3 drafts that get rejected.
    let (k_verify, v_verify, q_verify) = (rand(4 * row), rand(4 * row), rand(4 * heads * d));
    let (k_next, v_next, q_next) = (rand(row), rand(row), rand(heads * d));
    // W = 8, max_rows = 4: a ring of 11 slots, so the drafts overwrite the slots of
    // positions n - 10 ..= n - 8, which position n + 1's window (n - 6 ..= n + 1) no longer
    // needs. A ring of only W slots would lose position n - 5 and fail this test.
    for layout in [
        KvLayout::Sliding {
            window: 8,
            max_rows: 4,
        },
        KvLayout::Full { max_len: 64 },
    ] {
        let config = KvCacheConfig {
            kv_heads: kvh,
            head_dim: d,
            layout,
            k_eq_v: false,
            max_binding_bytes: None,
            sequences: 1,
        };
        // A: verify 4 rows, accept only the seed row, then decode.
        let mut a = KvCache::new(ctx, "a", config).unwrap();
        a.load_rows(ctx, 0, Some(&k_prompt), &v_prompt).unwrap();
        forward(&mut a, &scratch, heads, &k_verify, &v_verify, &q_verify);
        assert_eq!(a.len(), n + 4);
        a.rollback(n + 1).unwrap();
        assert_eq!(a.len(), n + 1);
        let out_a = forward(&mut a, &scratch, heads, &k_next, &v_next, &q_next);
        // B: the seed row alone, then the same decode.
        let mut b = KvCache::new(ctx, "b", config).unwrap();
        b.load_rows(ctx, 0, Some(&k_prompt), &v_prompt).unwrap();
        forward(
            &mut b,
            &scratch,
            heads,
            &k_verify[..row],
            &v_verify[..row],
            &q_verify[..heads * d],
        );
        let out_b = forward(&mut b, &scratch, heads, &k_next, &v_next, &q_next);
        assert_eq!(out_a, out_b, "{layout:?}");
        // And both equal the reference over the accepted history.
        let k_hist: Vec<f32> = [&k_prompt[..], &k_verify[..row], &k_next].concat();
        let v_hist: Vec<f32> = [&v_prompt[..], &v_verify[..row], &v_next].concat();
        let want = attention_ref(
            &q_next,
            &[n as u32 + 1],
            heads,
            kvh,
            d,
            layout.window(),
            &KvHistory {
                first: 0,
                k: &k_hist,
                v: &v_hist,
            },
        );
        let err = out_a
            .iter()
            .zip(&want)
            .map(|(g, w)| (g - w).abs())
            .fold(0f32, f32::max);
        assert!(err < 2e-5, "{layout:?}: max err {err}");
    }
}

#[test]
fn cache_bookkeeping_fails_closed() {
    let ctx = test_context();
    let config = KvCacheConfig {
        kv_heads: 1,
        head_dim: 8,
        layout: KvLayout::Sliding {
            window: 4,
            max_rows: 3,
        },
        k_eq_v: false,
        max_binding_bytes: None,
        sequences: 1,
    };
    let mut ring = KvCache::new(ctx, "ring", config).unwrap();
    assert_eq!(ring.slots(), 6);
    assert!(ring.advance(4).is_err()); // more rows than the ring was sized for
    assert_eq!(ring.advance(3).unwrap(), 0..3);
    assert_eq!(ring.advance(3).unwrap(), 3..6);
    assert!(matches!(ring.rollback(7), Err(Error::Invalid { .. }))); // past the length
    ring.rollback(4).unwrap(); // within the last forward
    assert!(matches!(ring.rollback(2), Err(Error::Invalid { .. }))); // keys overwritten
    ring.reset();
    assert!(ring.is_empty());

    let mut full = KvCache::new(
        ctx,
        "full",
        KvCacheConfig {
            layout: KvLayout::Full { max_len: 10 },
            ..config
        },
    )
    .unwrap();
    assert_eq!(full.advance(8).unwrap(), 0..8);
    assert!(full.advance(3).is_err()); // past max_len
    full.rollback(0).unwrap(); // a full cache can roll back anywhere
    assert!(full.load_rows(ctx, 2, Some(&[0.0; 8]), &[0.0; 8]).is_err()); // hole
    assert!(full.load_rows(ctx, 0, None, &[0.0; 8]).is_err()); // k missing
    assert!(matches!(
        KvCache::new(
            ctx,
            "big ring",
            KvCacheConfig {
                max_binding_bytes: Some(64),
                sequences: 1,
                ..config
            }
        ),
        Err(Error::Invalid { .. })
    ));
}

#[test]
fn guards_fail_closed() {
    let ctx = test_context();
    let scratch = AttentionScratch::for_head_dim(ctx, 128).unwrap();
    let cache_for = |d: usize, kvh: usize, k_eq_v: bool| {
        KvCache::new(
            ctx,
            "c",
            KvCacheConfig {
                kv_heads: kvh,
                head_dim: d,
                layout: KvLayout::Full { max_len: 16 },
                k_eq_v,
                max_binding_bytes: None,
                sequences: 1,
            },
        )
        .unwrap()
    };
    let t = |shape: &[usize], dtype| Tensor::zeros(ctx, "t", shape, dtype).unwrap();
    let pos = t(&[2], DType::U32);
    let build = |q: &Tensor, out: &Tensor, pos: &Tensor, cache: &KvCache| {
        Attention::new(
            ctx,
            AttentionInputs {
                fold_q: None,
                q,
                positions: pos,
                cache,
                out,
                key_from_v: None,
            },
            &scratch,
        )
    };
    // head_dim 600 is past both split-K routes (512); 6 heads over 4 kv heads: no route,
    // both named.
    let c600 = cache_for(600, 4, false);
    let q600 = t(&[2, 6, 600], DType::F32);
    match build(&q600, &t(&[2, 6, 600], DType::F32), &pos, &c600) {
        Err(Error::NoRoute { failed, .. }) => {
            assert!(
                failed.iter().any(|f| f.contains("head_dim 600")),
                "{failed:?}"
            );
            assert!(
                failed.iter().any(|f| f.contains("multiple of kv_heads")),
                "{failed:?}"
            );
        }
        other => panic!("expected NoRoute, got {other:?}"),
    }
    let c = cache_for(64, 2, false);
    let q = t(&[2, 4, 64], DType::F32);
    let out = t(&[2, 4, 64], DType::F32);
    let invalid = |r: Result<Attention>| matches!(r, Err(Error::Invalid { .. }));
    assert!(invalid(build(&q, &q, &pos, &c))); // out aliases q
    assert!(invalid(build(&t(&[2, 4, 32], DType::F32), &out, &pos, &c))); // head_dim
    assert!(invalid(build(&t(&[2, 4, 64], DType::I32), &out, &pos, &c))); // dtype
    assert!(invalid(build(&q, &t(&[2, 4, 32], DType::F32), &pos, &c))); // out shape
    assert!(invalid(build(&q, &out, &t(&[1], DType::U32), &c))); // positions too short
    assert!(invalid(build(&q, &out, &t(&[2], DType::F32), &c))); // positions dtype
                                                                 // K = V caches need key_from_v, and plain caches refuse it.
    assert!(invalid(build(&q, &out, &pos, &cache_for(64, 2, true))));
    let attention = build(&q, &out, &pos, &c).unwrap();
    assert!(attention.plan(3, 5).is_err());
    assert!(attention.plan(2, 17).is_err());
    // Appends: K = V caches take no k, plain caches need one; shapes must match.
    let rows = t(&[2, 2, 64], DType::F32);
    assert!(c.append_kernel(ctx, None, &rows, &pos).is_err());
    assert!(cache_for(64, 2, true)
        .append_kernel(ctx, Some(&rows), &rows, &pos)
        .is_err());
    assert!(c
        .append_kernel(ctx, Some(&t(&[2, 1, 64], DType::F32)), &rows, &pos)
        .is_err());
    assert!(c.append_kernel(ctx, Some(&rows), &rows, &pos).is_ok());
}
