//! The forward plans a [`KvState`](super::state::KvState) has built, kept least recently used
//! first out.

use super::forward::{ForwardPlan, LogitRows};
use crate::error::{Error, Result};
use std::collections::HashMap;

/// Plans kept at most: a server's batches take every row count from 1 to `--parallel`,
/// prefill chunks end at any length, and each plan holds its activations.
const MAX_PLANS: usize = 16;

/// The forward plans built so far, keyed by (rows, logit rows), at most [`MAX_PLANS`]: the
/// least recently used one is dropped when another is built.
#[derive(Default)]
pub(super) struct PlanCache {
    pub(super) plans: HashMap<(usize, LogitRows), (ForwardPlan, u64)>,
    /// Counts plan requests: the "last used" stamp.
    pub(super) clock: u64,
}

impl PlanCache {
    pub(super) fn get(&self, key: (usize, LogitRows)) -> Option<&ForwardPlan> {
        self.plans.get(&key).map(|(plan, _)| plan)
    }

    /// The plan of `m` rows with `rows` logits, or an error saying it was not built
    /// (recording entry points need the caller to have built it, for its buffers).
    pub(super) fn built(&self, m: usize, rows: LogitRows) -> Result<&ForwardPlan> {
        self.get((m, rows)).ok_or_else(|| {
            Error::invalid(
                "model",
                format!("plan of {m} rows ({rows:?} logits)"),
                "built by KvState::plan",
                "none",
            )
        })
    }

    pub(super) fn insert(&mut self, key: (usize, LogitRows), plan: ForwardPlan, now: u64) {
        if self.plans.len() >= MAX_PLANS {
            if let Some(oldest) = self
                .plans
                .iter()
                .min_by_key(|(_, (_, used))| *used)
                .map(|(k, _)| *k)
            {
                self.plans.remove(&oldest);
            }
        }
        self.plans.insert(key, (plan, now));
    }

    pub(super) fn clear(&mut self) {
        self.plans.clear();
    }

    pub(super) fn len(&self) -> usize {
        self.plans.len()
    }
}
