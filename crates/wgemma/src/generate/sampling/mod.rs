//! Token sampling on the host: greedy, temperature, top-k, top-p (nucleus), min-p, seeded,
//! and the logit adjustments before it (frequency / presence / repetition penalties, a
//! per-token bias). Greedy decoding normally stays on the GPU (argmax op); this is the
//! sampler for temperature > 0 or adjusted logits, and the reference for the GPU argmax.
//!
//! Each draw is keyed by the token's position in the output (the uniform of position i is
//! a function of the seed and i only), not taken from a running random stream: a run that
//! evaluates the same distributions in another order or grouping (speculative rounds of
//! any k, a batch) draws the same tokens.
//!
//! The logit adjustments are in `adjust`.

mod adjust;

pub use adjust::{LogitAdjust, TokenHistory, REPETITION_PENALTY_RANGE};

use crate::error::{Error, Result};
use adjust::check_repetition_penalty;
use rand::{Rng as _, SeedableRng};

/// How to pick the next token. `temperature == 0` is greedy.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SamplingParams {
    pub temperature: f32,
    /// Keep the `top_k` most likely tokens (0 = no limit).
    pub top_k: usize,
    /// Keep the smallest set of tokens whose probability reaches `top_p` (1.0 = no limit).
    pub top_p: f32,
    pub seed: u64,
    /// The repetition penalty (1.0 = none): [`LogitAdjust::repetition_penalty`] over the
    /// prompt and the output, through [`SamplingParams::adjust`] and the caller's
    /// [`TokenHistory`] (the sampler keeps no history). Greedy decoding ignores it (it stays
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

    /// The logit adjustment these parameters ask for: the repetition penalty when sampling
    /// (greedy decoding ignores it), nothing else.
    pub fn adjust(&self) -> LogitAdjust {
        LogitAdjust {
            repetition_penalty: if self.is_greedy() {
                1.0
            } else {
                self.repeat_penalty
            },
            ..LogitAdjust::default()
        }
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
        check_repetition_penalty("repeat_penalty", self.repeat_penalty)
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

/// The uniform in [0, 1) that draws output position `position` under `seed`: ChaCha8 on
/// the seed, one stream per position.
pub fn uniform_at(seed: u64, position: u64) -> f64 {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(position);
    rng.random::<f64>()
}

/// Log-probabilities of a row of logits (log-softmax, at temperature 1): the chosen
/// token's and the `top` most likely (most likely first, ties by lower id).
pub fn logprobs(logits: &[f32], chosen: u32, top: usize) -> (f32, Vec<(u32, f32)>) {
    let max = logits
        .iter()
        .copied()
        .filter(|v| !v.is_nan())
        .fold(f32::NEG_INFINITY, f32::max);
    let log_total = (logits
        .iter()
        .map(|&l| ((l - max) as f64).exp())
        .sum::<f64>())
    .ln() as f32
        + max;
    let lp = |l: f32| l - log_total;
    let mut best: Vec<(u32, f32)> = logits
        .iter()
        .enumerate()
        .map(|(i, &l)| (i as u32, l))
        .collect();
    let by_logit = |a: &(u32, f32), b: &(u32, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
    let top = top.min(best.len());
    if top > 0 && top < best.len() {
        best.select_nth_unstable_by(top - 1, by_logit);
    }
    best.truncate(top);
    best.sort_unstable_by(by_logit);
    let chosen_lp = logits
        .get(chosen as usize)
        .map_or(f32::NEG_INFINITY, |&l| lp(l));
    (
        chosen_lp,
        best.into_iter().map(|(i, l)| (i, lp(l))).collect(),
    )
}

/// A seeded sampler; the same seed and logits at the same output position give the same
/// token.
pub struct Sampler {
    params: SamplingParams,
    /// Keep tokens whose probability is at least this fraction of the most likely one's
    /// (0 = off), after top-k and top-p.
    min_p: f32,
    /// Scratch for candidate (index, logit) pairs, reused across steps.
    candidates: Vec<(u32, f32)>,
}

impl Sampler {
    pub fn new(params: SamplingParams) -> Result<Sampler> {
        params.validate()?;
        Ok(Sampler {
            params,
            min_p: 0.0,
            candidates: Vec::new(),
        })
    }

    /// The sampler with min-p truncation (`min_p` in [0, 1]).
    pub fn with_min_p(mut self, min_p: f32) -> Result<Sampler> {
        if !(0.0..=1.0).contains(&min_p) {
            return Err(Error::invalid(
                "sampling",
                "min_p",
                "a value in [0, 1]",
                min_p,
            ));
        }
        self.min_p = min_p;
        Ok(self)
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
            renormalise(&mut probs);
        }
        if self.min_p > 0.0 {
            // Most likely first: probs[0] is the maximum.
            let floor = probs[0].1 * self.min_p;
            probs.retain(|p| p.1 >= floor);
            renormalise(&mut probs);
        }
        probs.retain(|p| p.1 > 0.0);
        probs
    }

    /// Draws output position `position`'s token from `distribution` with this sampler's
    /// seed.
    pub fn draw(&self, distribution: &[(u32, f32)], position: u64) -> u32 {
        let u = uniform_at(self.params.seed, position);
        let mut acc = 0.0f64;
        for &(token, p) in distribution {
            acc += p as f64;
            if u < acc {
                return token;
            }
        }
        distribution.last().map_or(0, |p| p.0)
    }

    /// Picks output position `position`'s token from one row of logits.
    pub fn sample(&mut self, logits: &[f32], position: u64) -> u32 {
        if self.params.is_greedy() {
            return argmax(logits);
        }
        let dist = self.distribution(logits);
        self.draw(&dist, position)
    }
}

fn renormalise(probs: &mut [(u32, f32)]) {
    let total: f64 = probs.iter().map(|p| p.1 as f64).sum();
    for p in probs {
        p.1 = (p.1 as f64 / total) as f32;
    }
}

#[cfg(test)]
mod tests;
