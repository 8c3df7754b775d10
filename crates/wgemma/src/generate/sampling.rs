//! Token sampling on the host: greedy, temperature, top-k, top-p (nucleus), min-p, seeded,
//! and the logit adjustments before it (frequency / presence / repetition penalties, a
//! per-token bias). Greedy decoding normally stays on the GPU (argmax op); this is the
//! sampler for temperature > 0 or adjusted logits, and the reference for the GPU argmax.
//!
//! Each draw is keyed by the token's position in the output (the uniform of position i is
//! a function of the seed and i only), not taken from a running random stream: a run that
//! evaluates the same distributions in another order or grouping (speculative rounds of
//! any k, a batch) draws the same tokens.

use crate::error::{Error, Result};
use rand::{Rng as _, SeedableRng};
use std::collections::HashMap;

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

/// The repetition penalties a request may ask for: a logit is divided (or multiplied) by
/// the penalty, so one near 0 sends logits to infinity (1e-40 made every row NaN and
/// picked `<pad>`), and one past 10 is no longer a preference but a ban.
pub const REPETITION_PENALTY_RANGE: std::ops::RangeInclusive<f32> = 0.01..=10.0;

fn check_repetition_penalty(name: &str, penalty: f32) -> Result<()> {
    if REPETITION_PENALTY_RANGE.contains(&penalty) {
        return Ok(());
    }
    Err(Error::invalid(
        "sampling",
        name,
        format!(
            "a value in [{}, {}] (1 = none)",
            REPETITION_PENALTY_RANGE.start(),
            REPETITION_PENALTY_RANGE.end()
        ),
        penalty,
    ))
}

/// The uniform in [0, 1) that draws output position `position` under `seed`: ChaCha8 on
/// the seed, one stream per position.
pub fn uniform_at(seed: u64, position: u64) -> f64 {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(position);
    rng.random::<f64>()
}

/// Changes to a row of logits before sampling (all off by default): OpenAI's frequency and
/// presence penalties over the generated tokens, HF's repetition penalty over the prompt and
/// the generated tokens, and a bias per token id.
#[derive(Debug, Clone, PartialEq)]
pub struct LogitAdjust {
    /// Subtracted once per earlier occurrence of the token in the output (-2..=2).
    pub frequency_penalty: f32,
    /// Subtracted once if the token occurs in the output (-2..=2).
    pub presence_penalty: f32,
    /// HF's: the logit of a token seen in the prompt or output is divided by it when
    /// positive, multiplied by it when negative (1 = off; > 0).
    pub repetition_penalty: f32,
    /// Added to the token's logit (-100..=100; -100 bans it, as OpenAI's does in effect).
    pub logit_bias: Vec<(u32, f32)>,
}

impl Default for LogitAdjust {
    fn default() -> Self {
        LogitAdjust {
            frequency_penalty: 0.0,
            presence_penalty: 0.0,
            repetition_penalty: 1.0,
            logit_bias: Vec::new(),
        }
    }
}

impl LogitAdjust {
    /// True when it changes nothing (the logits can stay on the GPU for greedy decoding).
    pub fn is_identity(&self) -> bool {
        self.frequency_penalty == 0.0
            && self.presence_penalty == 0.0
            && self.repetition_penalty == 1.0
            && self.logit_bias.is_empty()
    }

    /// Checks the ranges (and every biased id against `vocab`).
    pub fn validate(&self, vocab: usize) -> Result<()> {
        for (name, v) in [
            ("frequency_penalty", self.frequency_penalty),
            ("presence_penalty", self.presence_penalty),
        ] {
            if !(-2.0..=2.0).contains(&v) {
                return Err(Error::invalid("sampling", name, "a value in [-2, 2]", v));
            }
        }
        check_repetition_penalty("repetition_penalty", self.repetition_penalty)?;
        for (i, &(id, bias)) in self.logit_bias.iter().enumerate() {
            // Two entries of one id would add up past the range.
            if self.logit_bias[..i].iter().any(|&(other, _)| other == id) {
                return Err(Error::invalid(
                    "sampling",
                    "logit_bias",
                    "one bias per token id",
                    format!("two for id {id}"),
                ));
            }
            if id as usize >= vocab {
                return Err(Error::invalid(
                    "sampling",
                    "logit_bias",
                    format!("token ids < {vocab} (the vocabulary size)"),
                    id,
                ));
            }
            if !(-100.0..=100.0).contains(&bias) {
                return Err(Error::invalid(
                    "sampling",
                    "logit_bias",
                    "biases in [-100, 100]",
                    bias,
                ));
            }
        }
        Ok(())
    }
}

/// The tokens an adjustment looks back on: the prompt's and the output's.
#[derive(Debug, Clone, Default)]
pub struct TokenHistory {
    /// Occurrences of each token in the output.
    generated: HashMap<u32, u32>,
    /// Tokens of the prompt (for the repetition penalty).
    prompt: std::collections::HashSet<u32>,
}

impl TokenHistory {
    pub fn new(prompt: &[u32]) -> TokenHistory {
        TokenHistory {
            generated: HashMap::new(),
            prompt: prompt.iter().copied().collect(),
        }
    }

    pub fn push(&mut self, token: u32) {
        *self.generated.entry(token).or_default() += 1;
    }

    /// `adjust` applied to one row of logits, in place.
    pub fn apply(&self, adjust: &LogitAdjust, logits: &mut [f32]) {
        let mut penalise = |id: u32, count: u32| {
            let Some(l) = logits.get_mut(id as usize) else {
                return;
            };
            if adjust.repetition_penalty != 1.0 {
                *l = if *l > 0.0 {
                    *l / adjust.repetition_penalty
                } else {
                    *l * adjust.repetition_penalty
                };
            }
            if count > 0 {
                *l -= count as f32 * adjust.frequency_penalty + adjust.presence_penalty;
            }
        };
        for (&id, &count) in &self.generated {
            penalise(id, count);
        }
        if adjust.repetition_penalty != 1.0 {
            for &id in self
                .prompt
                .iter()
                .filter(|id| !self.generated.contains_key(*id))
            {
                penalise(id, 0);
            }
        }
        for &(id, bias) in &adjust.logit_bias {
            if let Some(l) = logits.get_mut(id as usize) {
                *l += bias;
            }
        }
    }
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
}
