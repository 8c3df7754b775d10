//! What speculative rounds cost with this assistant on this device: the adaptive schedule's
//! cost model (`generate::speculative::schedule`), measured there. It lives with the
//! assistant, which carries it from one generation to the next, so that the model layer
//! need not import the generation layer above it.

use crate::ops::spec_commit::MAX_ROUND_ROWS;

/// Weight of the newest measurement in a cost's moving average.
const COST_EMA: f64 = 0.25;
/// Per-draft cost, relative to the round measured, assumed while only one k has been
/// timed (calibration times several before the schedule decides).
const PRIOR_DRAFT_COST: f64 = 0.15;

fn average(slot: &mut Option<f64>, seconds: Option<f64>) {
    if let Some(s) = seconds.filter(|s| s.is_finite() && *s > 0.0) {
        *slot = Some(slot.map_or(s, |old| old + COST_EMA * (s - old)));
    }
}

/// What rounds and plain steps cost on this device, measured (moving averages). The
/// assistant keeps it from one generation to the next ([`super::Assistant`]),
/// as a server keeps it from one request to the next, so the adaptive schedule calibrates
/// once per process rather than once per generation; every greedy generation's rounds
/// refine it, whatever their schedule.
#[derive(Debug, Clone, Copy, Default)]
pub struct DraftCosts {
    /// Seconds of a pipelined round of k drafts, index k (a round's k + 1 rows fit in
    /// MAX_ROUND_ROWS, the generation layer's MAX_DRAFT_TOKENS + 1).
    pub(crate) round_s: [Option<f64>; MAX_ROUND_ROWS],
    /// Seconds of a pipelined plain step.
    pub(crate) plain_step_s: Option<f64>,
    /// What a probe costs over the plain steps its tokens replace: the probe round (seeded
    /// by the host after a plain chunk, so not pipelined) and the restart of plain steps
    /// after it, from the end of one chunk to the first token of the next.
    pub(crate) probe_loss_s: Option<f64>,
}

impl DraftCosts {
    /// A pipelined round of `k` drafts took `seconds` (None: not representative).
    pub fn record_round(&mut self, k: usize, seconds: Option<f64>) {
        if (1..MAX_ROUND_ROWS).contains(&k) {
            average(&mut self.round_s[k], seconds);
        }
    }

    /// Plain pipelined steps took `step_seconds` each (None: not representative).
    pub fn record_plain(&mut self, step_seconds: Option<f64>) {
        average(&mut self.plain_step_s, step_seconds);
    }

    /// A probe cost `seconds` over plain steps (may be negative: a probe that paid).
    pub fn record_probe_loss(&mut self, seconds: f64) {
        if seconds.is_finite() {
            let s = seconds.max(0.0);
            self.probe_loss_s = Some(self.probe_loss_s.map_or(s, |o| o + COST_EMA * (s - o)));
        }
    }

    pub fn plain_step_s(&self) -> Option<f64> {
        self.plain_step_s
    }

    /// The cost of a round of k drafts: measured, or from the line through the measured
    /// ones (least squares; slope >= 0).
    pub(crate) fn round_cost(&self, k: usize) -> Option<f64> {
        if let Some(s) = self.round_s[k] {
            return Some(s);
        }
        let points: Vec<(f64, f64)> = (1..MAX_ROUND_ROWS)
            .filter_map(|j| self.round_s[j].map(|s| (j as f64, s)))
            .collect();
        match points.len() {
            0 => None,
            1 => {
                let (j, s) = points[0];
                Some(s * (1.0 + PRIOR_DRAFT_COST * (k as f64 - j)).max(0.1))
            }
            n => {
                let n = n as f64;
                let (mx, my) = (
                    points.iter().map(|p| p.0).sum::<f64>() / n,
                    points.iter().map(|p| p.1).sum::<f64>() / n,
                );
                let sxx: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
                let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
                let slope = (sxy / sxx).max(0.0);
                Some((my + slope * (k as f64 - mx)).max(1e-9))
            }
        }
    }
}
