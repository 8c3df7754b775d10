use super::*;
use crate::error::Error;
use crate::gpu::{read_tensor_f32, Step};
use crate::harness::{assert_cases_pass, rng, test_context, OpCase};
use rand::Rng as _;

fn hf_inv_freq_f64(base: f64, i: usize, dim: usize) -> f64 {
    1.0 / base.powf((2 * i) as f64 / dim as f64)
}

#[test]
fn inv_freq_follows_hf_default_and_proportional() {
    let sliding = rope_inv_freq(&RopeConfig::gemma4_sliding(256));
    assert_eq!(sliding.len(), 128);
    assert_eq!(sliding[0], 1.0);
    for (i, &f) in sliding.iter().enumerate() {
        let want = hf_inv_freq_f64(1e4, i, 256);
        assert!(
            ((f as f64 - want) / want).abs() < 3e-7,
            "sliding {i}: {f} vs {want}"
        );
    }
    let full_cfg = RopeConfig::gemma4_full(512);
    assert_eq!(full_cfg.rotated_pairs(), 64);
    let full = rope_inv_freq(&full_cfg);
    assert_eq!(full.len(), 256);
    for (i, &f) in full.iter().enumerate() {
        if i < 64 {
            // Exponents are over the whole head_dim (512), not over the 128 rotated dims.
            let want = hf_inv_freq_f64(1e6, i, 512);
            assert!(
                ((f as f64 - want) / want).abs() < 3e-7,
                "full {i}: {f} vs {want}"
            );
        } else {
            assert_eq!(f, 0.0, "full pair {i} must pass through");
        }
    }
    assert_eq!(RopeConfig::gemma4_full(64).rotated_pairs(), 8);
    let mut odd = RopeConfig::gemma4_full(100);
    odd.partial_rotary_factor = 0.3; // int(0.3 * 100 // 2) = int(30.0 // 2) = 15
    assert_eq!(odd.rotated_pairs(), 15);
}

#[test]
fn random_cases_pass_all_entries() {
    for seed in 0..3 {
        assert_cases_pass(&random_cases(&mut rng(77 + seed)), seed..seed + 1);
    }
}

#[test]
fn positions_near_the_limit_stay_accurate() {
    // inv_freq[0] = 1, so angles reach 2^18 rad: the range reduction must be exact.
    let cases: Vec<Box<dyn OpCase>> = [
        RopeConfig::gemma4_sliding(256),
        RopeConfig::gemma4_full(512),
    ]
    .into_iter()
    .map(|config| {
        Box::new(RopeCase {
            config,
            mode: RopeMode::OutOfPlace,
            rows: 16,
            heads: 2,
            kv_heads: 1,
            max_position: MAX_POSITION,
        }) as Box<dyn OpCase>
    })
    .collect();
    assert_cases_pass(&cases, 0..3);
}

#[test]
fn in_place_leaves_pass_through_dims_and_later_rows_untouched() {
    let ctx = test_context();
    let (rows, heads, d) = (5, 2, 512);
    let rope = Rope::new(ctx, RopeConfig::gemma4_full(d)).unwrap();
    let mut r = rng(5);
    let x: Vec<f32> = (0..rows * heads * d)
        .map(|_| r.random_range(-1.0..1.0))
        .collect();
    let positions: Vec<u32> = vec![1000, 1001, 1002, 1003, 1004];
    let tx = Tensor::from_f32(ctx, "x", &[rows, heads, d], &x).unwrap();
    let tp = Tensor::from_u32(ctx, "pos", &[rows], &positions).unwrap();
    let kernel = rope.in_place(ctx, &tx, &tp).unwrap();
    let mut step = Step::new(ctx);
    let mut recorded = Ok(());
    step.pass(|pass| recorded = kernel.record(pass, 2)); // only the 2 rows of this step
    recorded.unwrap();
    step.submit();
    let got = pollster::block_on(read_tensor_f32(ctx, &tx)).unwrap();
    let want = rope_ref(&x, rows, heads, rope.config(), &positions);
    for (i, (&g, (&w, &orig))) in got.iter().zip(want.iter().zip(&x)).enumerate() {
        let (row, dim) = (i / (heads * d), i % d);
        if row >= 2 || (64..256).contains(&dim) || dim >= 320 {
            assert_eq!(g.to_bits(), orig.to_bits(), "element {i} must be untouched");
        } else {
            assert!((g - w).abs() <= 1e-6, "element {i}: {g} vs {w}");
        }
    }
    assert!(kernel.grid_for_rows(0).is_err());
    assert!(kernel.grid_for_rows(rows + 1).is_err());
}

#[test]
fn guards_reject_bad_inputs() {
    let ctx = test_context();
    let rope = Rope::new(ctx, RopeConfig::gemma4_sliding(64)).unwrap();
    let x = Tensor::zeros(ctx, "x", &[3, 2, 64], DType::F32).unwrap();
    let x_bad_d = Tensor::zeros(ctx, "x", &[3, 2, 32], DType::F32).unwrap();
    let x_i32 = Tensor::zeros(ctx, "x", &[3, 2, 64], DType::I32).unwrap();
    let pos = Tensor::zeros(ctx, "pos", &[3], DType::U32).unwrap();
    let pos_short = Tensor::zeros(ctx, "pos", &[2], DType::U32).unwrap();
    let pos_f32 = Tensor::zeros(ctx, "pos", &[3], DType::F32).unwrap();
    let k_rows = Tensor::zeros(ctx, "k", &[4, 1, 64], DType::F32).unwrap();
    let invalid = |r: Result<RopeKernel>| matches!(r, Err(Error::Invalid { .. }));
    assert!(invalid(rope.in_place(ctx, &x_bad_d, &pos)));
    assert!(invalid(rope.in_place(ctx, &x_i32, &pos)));
    assert!(invalid(rope.in_place(ctx, &x, &pos_short)));
    assert!(invalid(rope.in_place(ctx, &x, &pos_f32)));
    assert!(invalid(rope.out_of_place(ctx, &x, &pos, &x)));
    assert!(invalid(rope.out_of_place(ctx, &x, &pos, &x_bad_d)));
    assert!(invalid(rope.qk_in_place(ctx, &x, &x, &pos)));
    assert!(invalid(rope.qk_in_place(ctx, &x, &k_rows, &pos)));
    assert!(rope.in_place(ctx, &x, &pos).is_ok());
    let mut bad = RopeConfig::gemma4_sliding(63);
    assert!(matches!(Rope::new(ctx, bad), Err(Error::Invalid { .. })));
    bad = RopeConfig::gemma4_full(64);
    bad.partial_rotary_factor = 1.5;
    assert!(matches!(Rope::new(ctx, bad), Err(Error::Invalid { .. })));
}

/// norm_rope equals q_norm / k_norm / v_norm (rmsnorm) followed by rope, for the three
/// layer kinds: own K and V, K = V (V from k_proj's output), KV-shared (q only).
#[test]
fn norm_rope_equals_the_unfused_ops() {
    use crate::gpu::run_kernels;
    use crate::ops::rmsnorm::{rmsnorm, EPS};
    use rand::Rng as _;
    let ctx = test_context();
    let mut r = rng(21);
    for (config, rows, nq, nkv) in [
        (RopeConfig::gemma4_sliding(256), 3, 8, 1),
        (RopeConfig::gemma4_full(512), 2, 4, 2),
    ] {
        let d = config.head_dim;
        let rope = Rope::new(ctx, config).unwrap();
        let mut vals =
            |n: usize| -> Vec<f32> { (0..n).map(|_| r.random_range(-3.0f32..3.0)).collect() };
        let (qv, kv, vv, wq, wk) = (
            vals(rows * nq * d),
            vals(rows * nkv * d),
            vals(rows * nkv * d),
            vals(d),
            vals(d),
        );
        let positions: Vec<u32> = (0..rows as u32).map(|i| 4000 + 17 * i).collect();
        let pos = Tensor::from_u32(ctx, "pos", &[rows], &positions).unwrap();
        let t = |name: &str, v: &[f32], heads: usize| {
            Tensor::from_f32(ctx, name, &[rows, heads, d], v).unwrap()
        };
        let w = |name: &str, v: &[f32]| Tensor::from_f32(ctx, name, &[d], v).unwrap();
        let (wq_t, wk_t) = (w("wq", &wq), w("wk", &wk));
        let read = |t: &Tensor| pollster::block_on(read_tensor_f32(ctx, t)).unwrap();
        let close = |a: &[f32], b: &[f32], what: &str| {
            let err = a
                .iter()
                .zip(b)
                .fold(0.0f32, |m, (x, y)| m.max((x - y).abs()));
            assert!(err <= 2e-6, "{what} d={d}: max |diff| {err}");
        };
        for kind in ["own", "k_eq_v", "shared"] {
            let (q1, k1, v1) = (t("q", &qv, nq), t("k", &kv, nkv), t("v", &vv, nkv));
            let (q2, k2, v2) = (t("q", &qv, nq), t("k", &kv, nkv), t("v", &vv, nkv));
            let (fused, unfused) = match kind {
                "own" => (
                    rope.norm_rope(
                        ctx,
                        &pos,
                        (&q1, &wq_t),
                        Some((&k1, &wk_t)),
                        VHeads::InPlace(&v1),
                        EPS,
                    )
                    .unwrap(),
                    vec![
                        rmsnorm(ctx, &q2, Some(&wq_t), &q2, EPS).unwrap(),
                        rmsnorm(ctx, &k2, Some(&wk_t), &k2, EPS).unwrap(),
                        rmsnorm(ctx, &v2, None, &v2, EPS).unwrap(),
                        rope.qk_in_place(ctx, &q2, &k2, &pos)
                            .unwrap()
                            .kernel()
                            .with_grid(Grid::new((nq + nkv) as u32, rows as u32, 1)),
                    ],
                ),
                "k_eq_v" => (
                    rope.norm_rope(
                        ctx,
                        &pos,
                        (&q1, &wq_t),
                        None,
                        VHeads::FromK { k_raw: &k1, v: &v1 },
                        EPS,
                    )
                    .unwrap(),
                    vec![
                        rmsnorm(ctx, &q2, Some(&wq_t), &q2, EPS).unwrap(),
                        rmsnorm(ctx, &k2, None, &v2, EPS).unwrap(),
                        rope.in_place(ctx, &q2, &pos)
                            .unwrap()
                            .kernel_for_rows(rows)
                            .unwrap(),
                    ],
                ),
                _ => (
                    rope.norm_rope(ctx, &pos, (&q1, &wq_t), None, VHeads::None, EPS)
                        .unwrap(),
                    vec![
                        rmsnorm(ctx, &q2, Some(&wq_t), &q2, EPS).unwrap(),
                        rope.in_place(ctx, &q2, &pos)
                            .unwrap()
                            .kernel_for_rows(rows)
                            .unwrap(),
                    ],
                ),
            };
            run_kernels(ctx, &[fused.kernel_for_rows(rows).unwrap()]);
            run_kernels(ctx, &unfused);
            close(&read(&q1), &read(&q2), &format!("{kind} q"));
            close(&read(&k1), &read(&k2), &format!("{kind} k"));
            close(&read(&v1), &read(&v2), &format!("{kind} v"));
        }
    }
    // Aliased buffers are refused.
    let rope = Rope::new(ctx, RopeConfig::gemma4_sliding(256)).unwrap();
    let q = Tensor::zeros(ctx, "q", &[1, 2, 256], DType::F32).unwrap();
    let w = Tensor::zeros(ctx, "w", &[256], DType::F32).unwrap();
    let pos = Tensor::from_u32(ctx, "pos", &[1], &[0]).unwrap();
    let err = rope
        .norm_rope(ctx, &pos, (&q, &w), Some((&q, &w)), VHeads::None, 1e-6)
        .unwrap_err();
    assert!(err.to_string().contains("distinct buffers"), "{err}");
}
