use super::*;

fn sampler(temperature: f32, top_k: usize, top_p: f32, seed: u64) -> Sampler {
    Sampler::new(SamplingParams {
        temperature,
        top_k,
        top_p,
        seed,
        ..SamplingParams::default()
    })
    .unwrap()
}

#[test]
fn greedy_is_first_maximum() {
    assert_eq!(argmax(&[1.0, 3.0, 3.0, 2.0]), 1);
    assert_eq!(argmax(&[1.0, f32::NAN, 5.0]), 1);
    assert_eq!(sampler(0.0, 0, 1.0, 0).sample(&[0.0, -1.0, 4.0], 0), 2);
    assert_eq!(sampler(1.0, 1, 1.0, 9).sample(&[0.0, -1.0, 4.0, 3.9], 0), 2);
}

#[test]
fn same_seed_same_tokens() {
    let logits: Vec<f32> = (0..50).map(|i| (i as f32 * 0.37).sin()).collect();
    let run = |seed| {
        let mut s = sampler(0.8, 20, 0.9, seed);
        (0..32).map(|i| s.sample(&logits, i)).collect::<Vec<_>>()
    };
    assert_eq!(run(7), run(7));
    assert_ne!(run(7), run(8));
}

#[test]
fn frequencies_follow_softmax() {
    // p = softmax([ln 1, ln 2, ln 3, ln 4]) = [0.1, 0.2, 0.3, 0.4].
    let logits: Vec<f32> = [1.0f32, 2.0, 3.0, 4.0].iter().map(|v| v.ln()).collect();
    let mut s = sampler(1.0, 0, 1.0, 1);
    let mut counts = [0usize; 4];
    let n = 40_000;
    for i in 0..n {
        counts[s.sample(&logits, i as u64) as usize] += 1;
    }
    let chi2: f64 = counts
        .iter()
        .zip([0.1, 0.2, 0.3, 0.4])
        .map(|(&c, p)| {
            let e = p * n as f64;
            (c as f64 - e).powi(2) / e
        })
        .sum();
    // 3 degrees of freedom: p = 0.001 at 16.27.
    assert!(chi2 < 16.27, "chi2 = {chi2}, counts = {counts:?}");
}

#[test]
fn top_k_and_top_p_cut_the_tail() {
    let logits: Vec<f32> = [1.0f32, 2.0, 3.0, 4.0].iter().map(|v| v.ln()).collect();
    let d = sampler(1.0, 2, 1.0, 0).distribution(&logits);
    assert_eq!(d.iter().map(|p| p.0).collect::<Vec<_>>(), vec![3, 2]);
    assert!((d[0].1 - 4.0 / 7.0).abs() < 1e-6);
    // top_p 0.65: 0.4 + 0.3 reaches it; 0.2 and 0.1 are cut.
    let d = sampler(1.0, 0, 0.65, 0).distribution(&logits);
    assert_eq!(d.iter().map(|p| p.0).collect::<Vec<_>>(), vec![3, 2]);
}

#[test]
fn tiny_temperatures_sample_the_maximum() {
    // logits / 1e-38 overflowed to inf and the draws became token 0 (issue 17, item 5).
    let logits = [0.5f32, -2.0, 3.25, 3.0, -1e4];
    for t in [1e-38f32, 1e-40, 1e-45, f32::MIN_POSITIVE] {
        let mut s = sampler(t, 0, 1.0, 3);
        let dist = s.distribution(&logits);
        assert_eq!(dist, vec![(2, 1.0)], "T = {t:e}");
        assert!((0..20).all(|i| s.sample(&logits, i) == 2), "T = {t:e}");
    }
}

#[test]
fn draws_are_keyed_by_position_not_by_order() {
    let logits: Vec<f32> = (0..40).map(|i| (i as f32 * 0.71).cos()).collect();
    let mut s = sampler(1.0, 0, 1.0, 5);
    let forward: Vec<u32> = (0..16).map(|i| s.sample(&logits, i)).collect();
    let mut backward: Vec<u32> = (0..16).rev().map(|i| s.sample(&logits, i)).collect();
    backward.reverse();
    assert_eq!(forward, backward);
    assert!(forward.iter().any(|&t| t != forward[0]), "{forward:?}");
    assert_ne!(uniform_at(5, 3), uniform_at(6, 3));
    assert_ne!(uniform_at(5, 3), uniform_at(5, 4));
}

#[test]
fn adjustments_follow_their_definitions() {
    let mut h = TokenHistory::new(&[0]);
    h.push(1);
    h.push(1);
    h.push(2);
    let adjust = LogitAdjust {
        frequency_penalty: 0.5,
        presence_penalty: 0.25,
        repetition_penalty: 2.0,
        logit_bias: vec![(3, -100.0), (4, 1.5)],
    };
    let mut logits = [4.0f32, 4.0, -4.0, 1.0, 0.0, 3.0];
    h.apply(&adjust, &mut logits);
    // 0: prompt only, 4 / 2. 1: twice in the output, 4 / 2 - 2 * 0.5 - 0.25.
    // 2: once, -4 * 2 - 0.5 - 0.25. 3 and 4: biased. 5: untouched.
    assert_eq!(logits, [2.0, 0.75, -8.75, -99.0, 1.5, 3.0]);
    assert!(LogitAdjust::default().is_identity() && !adjust.is_identity());
    assert!(adjust.validate(5).is_ok() && adjust.validate(4).is_err());
    for bad in [
        LogitAdjust {
            frequency_penalty: 2.5,
            ..LogitAdjust::default()
        },
        LogitAdjust {
            repetition_penalty: 0.0,
            ..LogitAdjust::default()
        },
        // Hostile input round 4: 1e-40 sent every logit to infinity.
        LogitAdjust {
            repetition_penalty: 1e-40,
            ..LogitAdjust::default()
        },
        LogitAdjust {
            repetition_penalty: 11.0,
            ..LogitAdjust::default()
        },
        LogitAdjust {
            logit_bias: vec![(0, 101.0)],
            ..LogitAdjust::default()
        },
        // Two biases of one id add up past the range.
        LogitAdjust {
            logit_bias: vec![(5, 100.0), (5, 100.0)],
            ..LogitAdjust::default()
        },
    ] {
        assert!(bad.validate(10).is_err(), "{bad:?}");
    }
}

#[test]
fn min_p_cuts_below_a_fraction_of_the_maximum() {
    // p = [0.1, 0.2, 0.3, 0.4]; min_p 0.45 keeps p >= 0.18: tokens 3, 2, 1.
    let logits: Vec<f32> = [1.0f32, 2.0, 3.0, 4.0].iter().map(|v| v.ln()).collect();
    let mut s = sampler(1.0, 0, 1.0, 0).with_min_p(0.45).unwrap();
    let d = s.distribution(&logits);
    assert_eq!(d.iter().map(|p| p.0).collect::<Vec<_>>(), vec![3, 2, 1]);
    assert!((d[0].1 - 4.0 / 9.0).abs() < 1e-6);
    assert!(sampler(1.0, 0, 1.0, 0).with_min_p(1.5).is_err());
}

#[test]
fn logprobs_are_a_log_softmax() {
    let logits: Vec<f32> = [1.0f32, 2.0, 3.0, 4.0].iter().map(|v| v.ln()).collect();
    let (chosen, top) = logprobs(&logits, 1, 2);
    assert!((chosen - 0.2f32.ln()).abs() < 1e-5, "{chosen}");
    assert_eq!(top.iter().map(|t| t.0).collect::<Vec<_>>(), vec![3, 2]);
    assert!((top[0].1 - 0.4f32.ln()).abs() < 1e-5);
    assert!(logprobs(&logits, 0, 0).1.is_empty());
    assert_eq!(logprobs(&logits, 0, 9).1.len(), 4);
}

#[test]
fn bad_params_are_refused() {
    for (t, p) in [(-1.0, 1.0), (f32::NAN, 1.0), (1.0, 0.0), (1.0, 1.5)] {
        assert!(Sampler::new(SamplingParams {
            temperature: t,
            top_p: p,
            ..Default::default()
        })
        .is_err());
    }
    for penalty in [0.0, -1.1, f32::NAN, f32::INFINITY] {
        assert!(Sampler::new(SamplingParams {
            temperature: 1.0,
            repeat_penalty: penalty,
            ..Default::default()
        })
        .is_err());
    }
}

#[test]
fn repeat_penalty_goes_through_the_logit_adjustment() {
    let params = SamplingParams {
        temperature: 1.0,
        repeat_penalty: 2.0,
        ..Default::default()
    };
    let mut s = Sampler::new(params).unwrap();
    // Token 1: logit 2 (positive, divided); token 2: -1 (negative, multiplied).
    let logits = [0.0f32, 2.0, -1.0, 1.0];
    let before = s.distribution(&logits);
    let mut history = TokenHistory::new(&[2]);
    for _ in 0..3 {
        // Generated thrice, penalised once.
        history.push(1);
    }
    let mut adjusted = logits;
    history.apply(&params.adjust(), &mut adjusted);
    let after = s.distribution(&adjusted);
    let p = |d: &[(u32, f32)], t: u32| d.iter().find(|c| c.0 == t).map_or(0.0, |c| c.1);
    // softmax of [0, 1, -2, 1]: tokens 1 and 3 tie at e / (1 + 2e + e^-2); token 2 is
    // penalised for being in the prompt.
    let z = 1.0 + 2.0 * 1f64.exp() + (-2f64).exp();
    assert!(
        (p(&after, 1) as f64 - 1f64.exp() / z).abs() < 1e-6,
        "{after:?}"
    );
    assert!(
        (p(&after, 2) as f64 - (-2f64).exp() / z).abs() < 1e-6,
        "{after:?}"
    );
    assert!(p(&after, 1) < p(&before, 1) && p(&after, 3) > p(&before, 3));
    // Greedy decoding ignores it.
    let greedy = SamplingParams {
        temperature: 0.0,
        ..params
    };
    assert!(greedy.adjust().is_identity());
}
