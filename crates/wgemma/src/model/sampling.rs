//! Token sampling on the host: greedy, temperature, top-k, top-p (nucleus), a repetition
//! penalty, seeded. Greedy decoding normally stays on the GPU (argmax op); this is the
//! sampler for temperature > 0 and the reference for the GPU argmax.

use crate::error::{Error, Result};
use rand::{Rng as _, SeedableRng};
use std::collections::VecDeque;

/// Generated tokens the repetition penalty looks back over (llama.cpp's `repeat_last_n`).
pub const REPEAT_WINDOW: usize = 64;

/// How to pick the next token. `temperature == 0` is greedy.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SamplingParams {
    pub temperature: f32,
    /// Keep the `top_k` most likely tokens (0 = no limit).
    pub top_k: usize,
    /// Keep the smallest set of tokens whose probability reaches `top_p` (1.0 = no limit).
    pub top_p: f32,
    pub seed: u64,
    /// Divides a positive logit (multiplies a negative one) of every token among the last
    /// [`REPEAT_WINDOW`] accepted ones ([`Sampler::accept`]) by this before sampling, as
    /// llama.cpp's `repeat_penalty` does; 1.0 = none. Greedy decoding ignores it (it stays
    /// the model's own argmax).
    pub repeat_penalty: f32,
}

impl Default for SamplingParams {
    fn default() -> Self {
        SamplingParams {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            seed: 0,
            repeat_penalty: 1.0,
        }
    }
}

impl SamplingParams {
    pub fn is_greedy(&self) -> bool {
        self.temperature == 0.0
    }

    pub fn validate(&self) -> Result<()> {
        if !(self.temperature >= 0.0 && self.temperature.is_finite()) {
            return Err(Error::invalid(
                "sampling",
                "temperature",
                "a finite value >= 0",
                self.temperature,
            ));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return Err(Error::invalid(
                "sampling",
                "top_p",
                "a value in (0, 1]",
                self.top_p,
            ));
        }
        if !(self.repeat_penalty > 0.0 && self.repeat_penalty.is_finite()) {
            return Err(Error::invalid(
                "sampling",
                "repeat_penalty",
                "a finite value > 0 (1.0 = none)",
                self.repeat_penalty,
            ));
        }
        Ok(())
    }
}

/// Greedy choice: the first index of the maximum (NaN counts as the maximum, like torch).
pub fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0usize;
    for (i, &v) in logits.iter().enumerate() {
        let b = logits[best];
        if !b.is_nan() && (v.is_nan() || v > b) {
            best = i;
        }
    }
    best as u32
}

/// A seeded sampler; the same seed and logits give the same tokens.
pub struct Sampler {
    params: SamplingParams,
    rng: rand_chacha::ChaCha8Rng,
    /// Scratch for candidate (index, logit) pairs, reused across steps.
    candidates: Vec<(u32, f32)>,
    /// The last [`REPEAT_WINDOW`] accepted tokens (for the repetition penalty).
    recent: VecDeque<u32>,
}

impl Sampler {
    pub fn new(params: SamplingParams) -> Result<Sampler> {
        params.validate()?;
        Ok(Sampler {
            params,
            rng: rand_chacha::ChaCha8Rng::seed_from_u64(params.seed),
            candidates: Vec::new(),
            recent: VecDeque::with_capacity(REPEAT_WINDOW),
        })
    }

    /// Records a token the caller kept, for the repetition penalty of the next draws.
    pub fn accept(&mut self, token: u32) {
        if self.recent.len() == REPEAT_WINDOW {
            self.recent.pop_front();
        }
        self.recent.push_back(token);
    }

    /// Applies the repetition penalty to `candidates` (still in token order, one per
    /// token), once per distinct recent token.
    fn penalise_recent(&mut self) {
        let penalty = self.params.repeat_penalty;
        if penalty == 1.0 || self.recent.is_empty() {
            return;
        }
        let mut seen: Vec<u32> = self.recent.iter().copied().collect();
        seen.sort_unstable();
        seen.dedup();
        for t in seen {
            if let Some(c) = self.candidates.get_mut(t as usize) {
                c.1 = if c.1 > 0.0 {
                    c.1 / penalty
                } else {
                    c.1 * penalty
                };
            }
        }
    }

    pub fn params(&self) -> &SamplingParams {
        &self.params
    }

    /// The normalised distribution the sampler draws from (for speculative sampling's
    /// p/q ratios): (token, probability) pairs, most likely first, zero-probability
    /// tokens omitted.
    pub fn distribution(&mut self, logits: &[f32]) -> Vec<(u32, f32)> {
        if self.params.is_greedy() {
            return vec![(argmax(logits), 1.0)];
        }
        // Ranked on the raw logits and divided by T only after the maximum is subtracted:
        // `l / T` overflows to inf for a tiny T (1e-38), and inf - inf is NaN, which made
        // every draw token 0. `(l - max) / T` is <= 0, so a tiny T gives -inf (weight 0)
        // to every token below the maximum: greedy, as the limit T -> 0 should be.
        let t = self.params.temperature as f64;
        self.candidates.clear();
        self.candidates
            .extend(logits.iter().enumerate().map(|(i, &l)| (i as u32, l)));
        self.penalise_recent();
        // Most likely first; ties by lower index, for determinism.
        let by_logit = |a: &(u32, f32), b: &(u32, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
        let k = match self.params.top_k {
            0 => self.candidates.len(),
            k => k.min(self.candidates.len()),
        };
        if k < self.candidates.len() {
            self.candidates.select_nth_unstable_by(k - 1, by_logit);
            self.candidates.truncate(k);
        }
        self.candidates.sort_unstable_by(by_logit);
        let max = self.candidates[0].1;
        let mut probs: Vec<(u32, f32)> = self
            .candidates
            .iter()
            .map(|&(i, l)| (i, (((l - max) as f64) / t).exp() as f32))
            .collect();
        let total: f64 = probs.iter().map(|p| p.1 as f64).sum();
        for p in &mut probs {
            p.1 = (p.1 as f64 / total) as f32;
        }
        if self.params.top_p < 1.0 {
            let mut acc = 0.0f64;
            let mut keep = probs.len();
            for (i, p) in probs.iter().enumerate() {
                acc += p.1 as f64;
                if acc >= self.params.top_p as f64 {
                    keep = i + 1;
                    break;
                }
            }
            probs.truncate(keep);
            let total: f64 = probs.iter().map(|p| p.1 as f64).sum();
            for p in &mut probs {
                p.1 = (p.1 as f64 / total) as f32;
            }
        }
        probs.retain(|p| p.1 > 0.0);
        probs
    }

    /// Draws one token from `distribution` with this sampler's RNG.
    pub fn draw(&mut self, distribution: &[(u32, f32)]) -> u32 {
        let u: f64 = self.rng.random();
        let mut acc = 0.0f64;
        for &(token, p) in distribution {
            acc += p as f64;
            if u < acc {
                return token;
            }
        }
        distribution.last().map_or(0, |p| p.0)
    }

    /// Picks the next token from one row of logits.
    pub fn sample(&mut self, logits: &[f32]) -> u32 {
        if self.params.is_greedy() {
            return argmax(logits);
        }
        let dist = self.distribution(logits);
        self.draw(&dist)
    }
}

#[cfg(test)]
mod tests {
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
        assert_eq!(sampler(0.0, 0, 1.0, 0).sample(&[0.0, -1.0, 4.0]), 2);
        assert_eq!(sampler(1.0, 1, 1.0, 9).sample(&[0.0, -1.0, 4.0, 3.9]), 2);
    }

    #[test]
    fn same_seed_same_tokens() {
        let logits: Vec<f32> = (0..50).map(|i| (i as f32 * 0.37).sin()).collect();
        let run = |seed| {
            let mut s = sampler(0.8, 20, 0.9, seed);
            (0..32).map(|_| s.sample(&logits)).collect::<Vec<_>>()
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
        for _ in 0..n {
            counts[s.sample(&logits) as usize] += 1;
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
            assert!((0..20).all(|_| s.sample(&logits) == 2), "T = {t:e}");
        }
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
    fn repeat_penalty_lowers_recent_tokens_only() {
        let mut s = Sampler::new(SamplingParams {
            temperature: 1.0,
            repeat_penalty: 2.0,
            ..Default::default()
        })
        .unwrap();
        // Token 1: logit 2 (positive, divided); token 2: -1 (negative, multiplied).
        let logits = [0.0f32, 2.0, -1.0, 1.0];
        let before = s.distribution(&logits);
        for _ in 0..3 {
            // Accepted thrice, penalised once.
            s.accept(1);
        }
        s.accept(2);
        let after = s.distribution(&logits);
        let p = |d: &[(u32, f32)], t: u32| d.iter().find(|c| c.0 == t).map_or(0.0, |c| c.1);
        // softmax of [0, 1, -2, 1]: tokens 1 and 3 tie at e / (1 + 2e + e^-2).
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
        // The window forgets: after REPEAT_WINDOW other tokens, 1 and 2 are free again.
        for _ in 0..REPEAT_WINDOW {
            s.accept(0);
        }
        // Token 0's logit is 0, which the penalty leaves as it is: all is as before.
        assert_eq!(s.distribution(&logits), before);
    }
}
