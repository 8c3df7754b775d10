//! The adjustments of a row of logits before sampling: frequency, presence and repetition
//! penalties and a per-token bias, over the tokens a request has seen ([`TokenHistory`]).

use crate::error::{Error, Result};
use std::collections::HashMap;

/// The repetition penalties a request may ask for: a logit is divided (or multiplied) by
/// the penalty, so one near 0 sends logits to infinity (1e-40 made every row NaN and
/// picked `<pad>`), and one past 10 is no longer a preference but a ban.
pub const REPETITION_PENALTY_RANGE: std::ops::RangeInclusive<f32> = 0.01..=10.0;

pub(super) fn check_repetition_penalty(name: &str, penalty: f32) -> Result<()> {
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
