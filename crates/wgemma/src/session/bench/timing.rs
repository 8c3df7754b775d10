//! Repeated measurements and what they can say: mean ± standard deviation (`bench`, as
//! llama-bench prints), median and range (`demo`), whether two figures differ by more
//! than their spread, and the warm-up that precedes the timed runs.

use web_time::{Duration, Instant};

/// How long a test's warm-up runs at least. A GPU that idled while the model loaded runs
/// at low clocks until it has been busy for a while: on the H100, pp512 after a single
/// warm-up run measured 9,197 ± 5,249 t/s (one slow run of three) and 11,982 ± 279 when
/// the clocks were already up. Repeating the warm-up for this long makes the first
/// process's figures those of the next ones.
pub const WARM_UP: Duration = Duration::from_millis(1500);

/// The values of one quantity (tokens/s) over repeated timed runs.
#[derive(Debug, Clone, Default)]
pub struct Samples {
    pub values: Vec<f64>,
}

impl Samples {
    pub fn push(&mut self, v: f64) {
        self.values.push(v);
    }

    pub fn mean(&self) -> f64 {
        if self.values.is_empty() {
            return 0.0;
        }
        self.values.iter().sum::<f64>() / self.values.len() as f64
    }

    /// The sample standard deviation (n - 1); 0 for fewer than two values.
    pub fn sd(&self) -> f64 {
        let n = self.values.len();
        if n < 2 {
            return 0.0;
        }
        let m = self.mean();
        (self.values.iter().map(|v| (v - m).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt()
    }

    pub fn median(&self) -> f64 {
        let mut v = self.values.clone();
        v.sort_by(f64::total_cmp);
        match v.len() {
            0 => 0.0,
            n if n % 2 == 1 => v[n / 2],
            n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
        }
    }

    pub fn min(&self) -> f64 {
        self.values.iter().copied().fold(f64::INFINITY, f64::min)
    }

    pub fn max(&self) -> f64 {
        self.values
            .iter()
            .copied()
            .fold(f64::NEG_INFINITY, f64::max)
    }

    /// `14045.12 ± 23.10` (llama-bench's form).
    pub fn mean_sd(&self) -> String {
        format!("{:.2} ± {:.2}", self.mean(), self.sd())
    }

    /// `244.1 (min 240.2, max 246.0)`; one value alone.
    pub fn median_range(&self) -> String {
        if self.values.len() < 2 {
            return format!("{:.1}", self.median());
        }
        format!(
            "{:.1} (min {:.1}, max {:.1})",
            self.median(),
            self.min(),
            self.max()
        )
    }

    /// llama-bench's JSON fields (`avg_ts`, `stddev_ts`, `samples_ts`) and the median.
    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "avg_ts": self.mean(),
            "stddev_ts": self.sd(),
            "median_ts": self.median(),
            "min_ts": self.min(),
            "max_ts": self.max(),
            "samples_ts": self.values,
        })
    }
}

/// How a ratio of two measured rates reads: "no measurable speedup" when the ranges of
/// the runs overlap (the difference is inside the spread), else the ratio of the medians.
/// One run of either has no spread to judge by, and says so.
pub fn compare(base: &Samples, other: &Samples) -> Comparison {
    let ratio = if base.median() > 0.0 {
        other.median() / base.median()
    } else {
        0.0
    };
    let overlap = other.min() <= base.max() && base.min() <= other.max();
    let single = base.values.len() < 2 || other.values.len() < 2;
    Comparison {
        ratio,
        measurable: !overlap && !single,
        single,
    }
}

/// See [`compare`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Comparison {
    /// The medians' ratio.
    pub ratio: f64,
    /// Whether the two sets of runs do not overlap (and each has two or more).
    pub measurable: bool,
    /// One run of either: no spread to judge the difference by.
    pub single: bool,
}

impl Comparison {
    /// `x1.81 faster`, `x0.80 (slower)` or `no measurable speedup (x1.03, inside the spread
    /// of the runs)`.
    pub fn describe(&self) -> String {
        if self.single {
            format!(
                "x{:.2} from one run each: no spread to judge it by (-r 3 or more)",
                self.ratio
            )
        } else if !self.measurable {
            format!(
                "no measurable speedup (x{:.2}, inside the spread of the runs)",
                self.ratio
            )
        } else if self.ratio >= 1.0 {
            format!("x{:.2} faster", self.ratio)
        } else {
            format!("x{:.2} (slower)", self.ratio)
        }
    }
}

/// One row of a bench table: a test and its timed runs.
pub struct TestRow {
    pub test: String,
    pub n_prompt: usize,
    pub n_gen: usize,
    pub tokens_per_s: Samples,
    /// Against the plain decode test (speculative rows).
    pub vs_tg: Option<Comparison>,
}

impl TestRow {
    pub fn json(&self) -> serde_json::Value {
        let mut v = self.tokens_per_s.json();
        v["test"] = self.test.clone().into();
        v["n_prompt"] = self.n_prompt.into();
        v["n_gen"] = self.n_gen.into();
        if let Some(c) = &self.vs_tg {
            v["speedup"] = c.ratio.into();
            v["measurable"] = c.measurable.into();
        }
        v
    }
}

/// A test's runs as the bench takes them: one warm-up run, repeated until [`WARM_UP`] has
/// passed, then `repetitions` timed runs. The caller runs while [`TimedRuns::wanted`] and
/// hands each run's tokens/s to [`TimedRuns::record`] (a loop that works whether a run
/// is awaited or blocked on).
pub struct TimedRuns {
    repetitions: usize,
    start: Instant,
    warming: bool,
    samples: Samples,
}

impl TimedRuns {
    pub fn new(repetitions: usize) -> TimedRuns {
        TimedRuns {
            repetitions,
            start: Instant::now(),
            warming: true,
            samples: Samples::default(),
        }
    }

    /// Whether another run is due.
    pub fn wanted(&self) -> bool {
        self.warming || self.samples.values.len() < self.repetitions
    }

    /// The tokens/s of the run just done (a warm-up run's is dropped).
    pub fn record(&mut self, tokens_per_s: f64) {
        if self.warming {
            self.warming = self.start.elapsed() < WARM_UP;
        } else {
            self.samples.push(tokens_per_s);
        }
    }

    pub fn samples(self) -> Samples {
        self.samples
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(values: &[f64]) -> Samples {
        Samples {
            values: values.to_vec(),
        }
    }

    #[test]
    fn mean_sd_median_range() {
        let a = s(&[2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]);
        assert_eq!(a.mean(), 5.0);
        // Sample variance 32 / 7.
        assert!((a.sd() - (32.0f64 / 7.0).sqrt()).abs() < 1e-12);
        assert_eq!(a.median(), 4.5);
        assert_eq!((a.min(), a.max()), (2.0, 9.0));
        assert_eq!(s(&[3.0]).sd(), 0.0);
        assert_eq!(s(&[3.0, 1.0, 2.0]).median(), 2.0);
        assert_eq!(s(&[1.0, 3.0]).mean_sd(), "2.00 ± 1.41");
        assert_eq!(s(&[1.0, 3.0, 2.0]).median_range(), "2.0 (min 1.0, max 3.0)");
    }

    #[test]
    fn overlapping_runs_are_no_measurable_speedup() {
        // A cold first run (as on an idle H200) makes x1.81 out of nothing.
        let plain = s(&[1083.0, 2036.0, 2040.0]);
        let spec = s(&[2030.0, 2060.0, 2045.0]);
        let c = compare(&plain, &spec);
        assert!(!c.measurable);
        assert!(c.describe().starts_with("no measurable speedup"), "{c:?}");
        let c = compare(&s(&[100.0, 101.0, 99.0]), &s(&[150.0, 152.0, 149.0]));
        assert!(c.measurable);
        assert_eq!(c.describe(), "x1.50 faster");
        let c = compare(&s(&[100.0, 101.0, 99.0]), &s(&[80.0, 81.0, 79.0]));
        assert_eq!(c.describe(), "x0.80 (slower)");
        // One run has no spread: never a verdict either way.
        let c = compare(&s(&[100.0]), &s(&[150.0]));
        assert!(!c.measurable && c.single);
        assert!(c.describe().contains("no spread"), "{c:?}");
    }

    #[test]
    fn timed_runs_keep_only_the_runs_after_the_warm_up() {
        let mut runs = TimedRuns::new(3);
        let mut n = 0.0;
        while runs.wanted() {
            n += 1.0;
            runs.record(n);
            // From the second run on, the warm-up has lasted WARM_UP: it ends after that run.
            runs.start -= WARM_UP;
        }
        assert_eq!(runs.samples().values, vec![3.0, 4.0, 5.0]);
    }
}
