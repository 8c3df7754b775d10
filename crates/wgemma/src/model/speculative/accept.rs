//! Lossless speculative sampling (Leviathan et al. 2023, Algorithm 1) on dense probability
//! rows: the host side of a sampled round.

use rand::Rng as _;

/// A token distribution as a dense probability row.
pub(super) fn dense(dist: &[(u32, f32)], vocab: usize) -> Vec<f32> {
    let mut row = vec![0.0f32; vocab];
    for &(t, p) in dist {
        row[t as usize] = p;
    }
    row
}

/// Draws from a dense row of non-negative weights summing to `total`.
pub(super) fn draw_dense(rng: &mut rand_chacha::ChaCha8Rng, row: &[f32], total: f64) -> u32 {
    let u = rng.random::<f64>() * total;
    let mut acc = 0.0f64;
    let mut last = 0;
    for (i, &p) in row.iter().enumerate() {
        if p > 0.0 {
            acc += p as f64;
            last = i;
            if u < acc {
                return i as u32;
            }
        }
    }
    last as u32
}

/// Lossless speculative sampling of one round: `p` has k + 1 dense target rows, `q` the k
/// dense draft rows the `drafts` were drawn from. Returns the committed tokens (accepted
/// drafts, then the resampled or bonus token) and the number of drafts accepted.
pub fn speculative_accept(
    rng: &mut rand_chacha::ChaCha8Rng,
    drafts: &[u32],
    p: &[Vec<f32>],
    q: &[Vec<f32>],
) -> (Vec<u32>, usize) {
    let mut out = Vec::with_capacity(drafts.len() + 1);
    for (i, &d) in drafts.iter().enumerate() {
        let (pd, qd) = (p[i][d as usize], q[i][d as usize]);
        // qd > 0: d was drawn from q.
        if qd > 0.0 && rng.random::<f64>() < (pd as f64 / qd as f64).min(1.0) {
            out.push(d);
            continue;
        }
        let residual: Vec<f32> = p[i]
            .iter()
            .zip(&q[i])
            .map(|(&a, &b)| (a - b).max(0.0))
            .collect();
        let total: f64 = residual.iter().map(|&v| v as f64).sum();
        let t = if total > 0.0 {
            draw_dense(rng, &residual, total)
        } else {
            // p == q up to rounding: the residual is empty, p itself is the answer.
            draw_dense(rng, &p[i], p[i].iter().map(|&v| v as f64).sum())
        };
        out.push(t);
        return (out, i);
    }
    let last = &p[drafts.len()];
    out.push(draw_dense(rng, last, last.iter().map(|&v| v as f64).sum()));
    (out, drafts.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn chi2(counts: &[usize], probs: &[f64]) -> f64 {
        let n: usize = counts.iter().sum();
        counts
            .iter()
            .zip(probs)
            .filter(|(_, &p)| p > 0.0)
            .map(|(&c, &p)| {
                let e = p * n as f64;
                (c as f64 - e).powi(2) / e
            })
            .sum()
    }

    #[test]
    fn speculative_accept_is_lossless_on_known_distributions() {
        // Target p and draft q over 5 tokens, two draft positions; p2 depends on nothing
        // (the test checks the marginal of the first two committed tokens).
        let p0 = vec![0.1f32, 0.4, 0.2, 0.3, 0.0];
        let p1 = vec![0.25f32, 0.25, 0.1, 0.1, 0.3];
        let p2 = vec![0.2f32, 0.2, 0.2, 0.2, 0.2];
        let q0 = vec![0.5f32, 0.1, 0.1, 0.1, 0.2];
        let q1 = vec![0.0f32, 0.6, 0.2, 0.1, 0.1];
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
        let (mut first, mut second) = ([0usize; 5], [0usize; 5]);
        let n = 60_000;
        for _ in 0..n {
            let d0 = draw_dense(&mut rng, &q0, 1.0);
            let d1 = draw_dense(&mut rng, &q1, 1.0);
            let (toks, acc) = speculative_accept(
                &mut rng,
                &[d0, d1],
                &[p0.clone(), p1.clone(), p2.clone()],
                &[q0.clone(), q1.clone()],
            );
            assert_eq!(toks.len(), acc + 1);
            first[toks[0] as usize] += 1;
            if toks.len() > 1 {
                second[toks[1] as usize] += 1;
            }
        }
        let p0f: Vec<f64> = p0.iter().map(|&v| v as f64).collect();
        // 3 dof (token 4 has p = 0 and must never appear): p = 0.001 at 16.27.
        assert_eq!(first[4], 0, "{first:?}");
        let c = chi2(&first, &p0f);
        assert!(c < 16.27, "first token chi2 {c}: {first:?}");
        // Given that the first draft was accepted, the second token follows p1.
        let total: usize = second.iter().sum();
        assert!(total > 10_000);
        let p1f: Vec<f64> = p1.iter().map(|&v| v as f64).collect();
        let c = chi2(&second, &p1f);
        assert!(c < 18.47, "second token chi2 {c}: {second:?}"); // 4 dof
    }

    #[test]
    fn a_lossy_rule_fails_the_same_test() {
        // Sanity check of the test itself: accepting every draft gives q's distribution.
        let p0 = [0.1f32, 0.4, 0.2, 0.3];
        let q0 = [0.5f32, 0.1, 0.1, 0.3];
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        let mut counts = [0usize; 4];
        for _ in 0..20_000 {
            counts[draw_dense(&mut rng, &q0, 1.0) as usize] += 1;
        }
        let p0f: Vec<f64> = p0.iter().map(|&v| v as f64).collect();
        assert!(chi2(&counts, &p0f) > 1000.0);
    }
}
