//! How many drafts a round makes: a fixed k, HF's heuristic schedule, or the adaptive
//! schedule, which picks k in 0..=8 from the acceptance measured so far and the costs
//! measured on this device, and falls back to plain (pipelined) decoding when drafting
//! does not pay.
//!
//! The adaptive schedule's model: draft i of a round is accepted with probability `a` when
//! the drafts before it were (an exponentially decayed estimate over the rounds run), so a
//! round of k drafts commits `1 + a + .. + a^k` tokens on average; it costs `round_s(k)`
//! seconds (the measured wall time of rounds of k drafts: the drafter's steps, the verify
//! forward, the host's encode and the readback), while a plain pipelined step costs
//! `plain_step_s`. The schedule picks the k with the most expected tokens per second. Plain
//! decoding runs in chunks, each followed by one probe round (one draft) so that a rising
//! acceptance is noticed; a chunk is long enough that its probe costs at most ~2% of it
//! (16 tokens at least, doubling while plain keeps winning, 256 at most; the probe's loss
//! is measured, the pipeline restarts around it included). The first round of a
//! generation drafts k_init (HF's), and the decisions after it and after each probe wait
//! for their outcome. The costs outlive the generation ([`DraftCosts`]).

use super::MAX_DRAFT_TOKENS;
pub use crate::model::assistant::DraftCosts;

/// Which schedule picks the drafts of each round.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DraftSchedule {
    /// `draft_tokens` drafts every round (HF `num_assistant_tokens_schedule = "constant"`).
    #[default]
    Fixed,
    /// HF's heuristic schedule (`"heuristic"`): k += 2 after a round that accepted every
    /// draft, else k = max(1, k - 1).
    Heuristic,
    /// k in 0..=8 maximising expected tokens per second on this device (module docs);
    /// 0 = plain pipelined decode steps.
    Adaptive,
}

/// Tokens a round of `k` drafts commits on average when each draft is accepted with
/// probability `acceptance` given that the drafts before it were: the accepted prefix plus
/// the bonus token, `1 + a + a^2 + .. + a^k`.
pub fn expected_tokens(acceptance: f64, k: usize) -> f64 {
    let a = acceptance.clamp(0.0, 1.0);
    (0..=k).map(|i| a.powi(i as i32)).sum()
}

/// Speculation must beat plain decoding by this fraction to be chosen: measured costs are
/// noisy, and a tie should go to the path that cannot lose.
const MARGIN: f64 = 0.03;

/// The number of drafts (0 = a plain step) with the most expected tokens per second:
/// `round_s[k - 1]` is the cost of a round of k drafts (k = 1..=round_s.len()),
/// `plain_step_s` the cost of a plain pipelined step. Ties go to the smaller k.
pub fn best_draft_count(acceptance: f64, plain_step_s: f64, round_s: &[f64]) -> usize {
    let plain = 1.0 / plain_step_s.max(1e-12);
    let mut best = (0, plain * (1.0 + MARGIN));
    for (i, &cost) in round_s.iter().enumerate() {
        let k = i + 1;
        let rate = expected_tokens(acceptance, k) / cost.max(1e-12);
        if rate > best.1 {
            best = (k, rate);
        }
    }
    best.0
}

/// What the adaptive schedule runs next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NextRound {
    /// A round of this many drafts (>= 1).
    Draft(usize),
    /// This many plain (pipelined) decode steps.
    Plain(usize),
}

/// Plain chunks: the first after a round that drafted, and the longest.
const MIN_PLAIN_RUN: usize = 16;
const MAX_PLAIN_RUN: usize = 256;
/// The most a probe round may cost over plain steps, as a share of its chunk's time.
const PROBE_SHARE: f64 = 0.02;
/// Weight of the newest round in the acceptance estimate (decay 0.9: ~10 rounds).
const ACCEPTANCE_DECAY: f64 = 0.9;
/// The adaptive schedule's state: the acceptance measured in this generation and the costs
/// measured so far.
#[derive(Debug, Clone)]
pub struct AdaptiveDrafts {
    k_init: usize,
    k_cap: usize,
    /// Decayed counts of accepted drafts and of rejections (a round rejects at most once).
    accepted: f64,
    rejected: f64,
    pub costs: DraftCosts,
    /// The ks timed before the schedule decides (those not measured yet).
    calibration: Vec<usize>,
    plain_run: usize,
    last_was_plain: bool,
    /// Rounds drafted in this generation (booked or in flight).
    rounds: usize,
    /// A round whose outcome the next decision needs (the first, or a probe) is in flight.
    awaiting: bool,
}

impl AdaptiveDrafts {
    /// Starts at `k_init` drafts, never more than `k_cap` (1..=8), with the costs measured
    /// so far.
    pub fn new(k_init: usize, k_cap: usize, costs: DraftCosts) -> AdaptiveDrafts {
        let k_cap = k_cap.clamp(1, MAX_DRAFT_TOKENS);
        let k_init = k_init.clamp(1, k_cap);
        let mut calibration = Vec::new();
        for k in [k_init, 1] {
            if !calibration.contains(&k) {
                calibration.push(k);
            }
        }
        AdaptiveDrafts {
            k_init,
            k_cap,
            // A prior of one acceptance and one rejection: a = 0.5 until rounds say more.
            accepted: 1.0,
            rejected: 1.0,
            costs,
            calibration,
            plain_run: MIN_PLAIN_RUN,
            last_was_plain: false,
            rounds: 0,
            awaiting: false,
        }
    }

    /// The estimated probability that a draft is accepted given the ones before it were.
    pub fn acceptance(&self) -> f64 {
        self.accepted / (self.accepted + self.rejected)
    }

    /// Whether the next decision should wait for the round in flight: it is the
    /// generation's first or a probe after plain steps, whose acceptance decides whether
    /// drafting goes on (pipelining the next round would decide from the prior).
    pub fn awaits_round(&self) -> bool {
        self.awaiting
    }

    /// A round of `k` drafts accepted `accepted` of them; `seconds` is its wall time (None
    /// when it is not representative, e.g. it built a plan).
    pub fn record_round(&mut self, k: usize, accepted: usize, seconds: Option<f64>) {
        if k == 0 {
            return;
        }
        self.accepted = ACCEPTANCE_DECAY * self.accepted + accepted.min(k) as f64;
        self.rejected = ACCEPTANCE_DECAY * self.rejected + if accepted < k { 1.0 } else { 0.0 };
        self.costs.record_round(k, seconds);
        self.last_was_plain = false;
        self.awaiting = false;
    }

    /// Plain steps ran at `step_seconds` each (None: not representative).
    pub fn record_plain(&mut self, step_seconds: Option<f64>) {
        self.costs.record_plain(step_seconds);
        self.last_was_plain = true;
    }

    fn draft(&mut self, k: usize, awaited: bool) -> NextRound {
        self.rounds += 1;
        self.awaiting = awaited;
        NextRound::Draft(k)
    }

    /// What to run next with `budget` tokens left (>= 1).
    pub fn next(&mut self, budget: usize) -> NextRound {
        let budget = budget.max(1);
        let k_cap = self.k_cap.min(budget.saturating_sub(1));
        if k_cap == 0 {
            return NextRound::Plain(budget);
        }
        if self.rounds == 0 {
            // HF's first round drafts k_init: the acceptance is unknown.
            return self.draft(self.k_init.min(k_cap), true);
        }
        if let Some(&k) = self
            .calibration
            .iter()
            .find(|&&k| k <= k_cap && self.costs.round_s[k].is_none())
        {
            return self.draft(k, false);
        }
        let Some(plain) = self.costs.plain_step_s else {
            return NextRound::Plain(MIN_PLAIN_RUN.min(budget));
        };
        let costs: Vec<f64> = (1..=k_cap)
            .map(|k| self.costs.round_cost(k).unwrap_or(f64::INFINITY))
            .collect();
        let a = self.acceptance();
        match best_draft_count(a, plain, &costs) {
            0 if self.last_was_plain => {
                // A probe: the best round that drafts, so that a rising acceptance shows.
                let probe = best_draft_count(a, f64::INFINITY, &costs).max(1);
                self.draft(probe, true)
            }
            0 => {
                // Long enough that the next probe costs at most PROBE_SHARE of the chunk
                // over plain steps: its measured loss (the round and the restarts of the
                // pipeline around it), else the one-draft round's over its tokens.
                let probe_loss = self
                    .costs
                    .probe_loss_s
                    .unwrap_or((costs[0] - expected_tokens(a, 1) * plain).max(0.0));
                let floor = (probe_loss / (plain * PROBE_SHARE)).ceil() as usize;
                let run = self.plain_run.max(floor).min(MAX_PLAIN_RUN);
                self.plain_run = (self.plain_run * 2).min(MAX_PLAIN_RUN);
                NextRound::Plain(run.min(budget))
            }
            k => {
                self.plain_run = MIN_PLAIN_RUN;
                self.draft(k, false)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Costs shaped like the H200's (ms): a plain step 4.2, a round 6 + 0.9 per draft.
    fn costs(k_max: usize) -> Vec<f64> {
        (1..=k_max).map(|k| 6.0 + 0.9 * k as f64).collect()
    }

    #[test]
    fn expected_tokens_counts_the_prefix_and_the_bonus() {
        assert_eq!(expected_tokens(0.0, 4), 1.0);
        assert_eq!(expected_tokens(1.0, 4), 5.0);
        assert!((expected_tokens(0.5, 2) - 1.75).abs() < 1e-12);
    }

    #[test]
    fn low_acceptance_is_plain_and_high_acceptance_drafts_more() {
        let c = costs(8);
        assert_eq!(best_draft_count(0.0, 4.2, &c), 0);
        assert_eq!(best_draft_count(0.3, 4.2, &c), 0);
        let mid = best_draft_count(0.7, 4.2, &c);
        let high = best_draft_count(0.95, 4.2, &c);
        assert!(mid >= 1, "0.7 -> {mid}");
        assert!(high > mid, "0.95 -> {high}, 0.7 -> {mid}");
        assert_eq!(best_draft_count(1.0, 4.2, &c), 8);
        // More acceptance never picks fewer drafts.
        let mut last = 0;
        for i in 0..=100 {
            let k = best_draft_count(i as f64 / 100.0, 4.2, &c);
            assert!(k >= last, "a = {} -> {k} after {last}", i as f64 / 100.0);
            last = k;
        }
        // A free round always drafts; a round dearer than k + 1 plain steps never does.
        assert!(best_draft_count(0.1, 4.2, &[0.1; 8]) > 0);
        assert_eq!(best_draft_count(1.0, 1.0, &[2.5, 3.5, 4.5]), 0);
    }

    /// Drives the schedule with a simulated device and drafter; returns tokens per second.
    fn simulate(acceptance: f64, rounds: usize) -> (f64, AdaptiveDrafts) {
        let plain = 4.2;
        let c = costs(8);
        let mut s = AdaptiveDrafts::new(2, 8, DraftCosts::default());
        let (mut tokens, mut seconds) = (0usize, 0.0f64);
        // Deterministic "random" acceptance: a draft is accepted when a low-discrepancy
        // sequence falls below the rate.
        let mut u = 0.0f64;
        for _ in 0..rounds {
            match s.next(1000) {
                NextRound::Plain(n) => {
                    tokens += n;
                    seconds += n as f64 * plain;
                    s.record_plain(Some(plain));
                }
                NextRound::Draft(k) => {
                    let mut n = 0;
                    while n < k {
                        u = (u + 0.618_033_988_75) % 1.0;
                        if u >= acceptance {
                            break;
                        }
                        n += 1;
                    }
                    tokens += n + 1;
                    seconds += c[k - 1];
                    s.record_round(k, n, Some(c[k - 1]));
                }
            }
        }
        (tokens as f64 / seconds, s)
    }

    #[test]
    fn the_schedule_never_loses_much_and_wins_when_drafts_are_good() {
        let plain = 1.0 / 4.2;
        let (low, s) = simulate(0.1, 300);
        assert!(low > 0.97 * plain, "{} vs plain {plain}", low);
        assert!(s.acceptance() < 0.3, "{}", s.acceptance());
        let (zero, _) = simulate(0.0, 300);
        assert!(zero > 0.97 * plain, "{zero} vs plain {plain}");
        let (high, _) = simulate(0.9, 300);
        assert!(high > 1.5 * plain, "{high} vs plain {plain}");
    }

    #[test]
    fn a_rising_acceptance_brings_drafting_back() {
        let mut s = AdaptiveDrafts::new(2, 8, DraftCosts::default());
        let c = costs(8);
        assert_eq!(s.next(1000), NextRound::Draft(2));
        s.record_plain(Some(4.2));
        for k in [2, 1] {
            s.record_round(k, 0, Some(c[k - 1]));
        }
        for _ in 0..10 {
            s.record_round(1, 0, None);
        }
        assert!(matches!(s.next(1000), NextRound::Plain(_)));
        // Probes after each plain chunk: all accepted now.
        let mut drafted = false;
        for _ in 0..40 {
            match s.next(1000) {
                NextRound::Plain(_) => s.record_plain(Some(4.2)),
                NextRound::Draft(k) => {
                    s.record_round(k, k, Some(c[k - 1]));
                    drafted |= k > 1;
                }
            }
        }
        assert!(drafted && s.acceptance() > 0.8, "{}", s.acceptance());
        assert!(matches!(s.next(1000), NextRound::Draft(k) if k >= 4));
    }

    #[test]
    fn measured_costs_skip_calibration_and_probes_wait_for_their_outcome() {
        let c = costs(8);
        let mut measured = DraftCosts::default();
        measured.record_plain(Some(4.2));
        for k in 1..=2 {
            measured.record_round(k, Some(c[k - 1]));
        }
        let mut s = AdaptiveDrafts::new(2, 8, measured);
        // The first round drafts k_init and the next decision waits for it.
        assert_eq!(s.next(1000), NextRound::Draft(2));
        assert!(s.awaits_round());
        s.record_round(2, 0, None);
        assert!(!s.awaits_round());
        // Nothing accepted: plain at once, no calibration round.
        let NextRound::Plain(first) = s.next(1000) else {
            panic!("drafted after a rejection with measured costs");
        };
        s.record_plain(Some(4.2));
        // The probe after a chunk is awaited too.
        assert!(matches!(s.next(1000), NextRound::Draft(_)));
        assert!(s.awaits_round());
        s.record_round(1, 0, None);
        // A measured probe loss of 10 ms at 4.2 ms a step: chunks of >= 10 / (4.2 * 2%).
        s.costs.record_probe_loss(10.0);
        let NextRound::Plain(second) = s.next(1000) else {
            panic!("drafted after rejections");
        };
        assert!(second >= 120 && second > first, "{first} then {second}");
        // The costs outlive the generation.
        let again = AdaptiveDrafts::new(2, 8, s.costs);
        assert_eq!(again.costs.round_cost(2), Some(c[1]));
    }

    #[test]
    fn calibration_times_several_ks_then_plain_and_respects_the_budget() {
        let mut s = AdaptiveDrafts::new(2, 8, DraftCosts::default());
        assert_eq!(s.next(100), NextRound::Draft(2));
        // A round that built a plan is not timed: the same k comes again.
        s.record_round(2, 1, None);
        assert_eq!(s.next(100), NextRound::Draft(2));
        s.record_round(2, 1, Some(7.0));
        assert_eq!(s.next(100), NextRound::Draft(1));
        s.record_round(1, 1, Some(6.1));
        assert_eq!(s.next(100), NextRound::Plain(MIN_PLAIN_RUN));
        assert_eq!(s.next(1), NextRound::Plain(1));
        assert!(matches!(
            s.next(3),
            NextRound::Plain(3) | NextRound::Draft(1..=2)
        ));
        // Unmeasured ks come from the line through the measured ones.
        let five = s.costs.round_cost(5).unwrap();
        assert!((five - 9.7).abs() < 1e-9, "{five}");
    }
}
