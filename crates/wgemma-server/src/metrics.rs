//! `GET /metrics` of `wgemma serve`: Prometheus text exposition of the counters, gauges and
//! histograms the handlers and the model thread keep (requests by endpoint and status,
//! tokens, queue depth, active sequences, KV slots, tokens/s, time to first token and the
//! time between tokens, speculative acceptance), and what each KV slot is doing
//! (`GET /slots`).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// Upper bounds (seconds) of the latency histograms' buckets: 1 ms to 60 s, enough to tell
/// a GPU's 5 ms steps from lavapipe's 100 ms ones and a queued request's seconds.
const BUCKETS_S: [f64; 14] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 60.0,
];

/// A Prometheus histogram of durations (cumulative buckets at render time).
#[derive(Default)]
pub struct Histogram {
    /// Count per bucket of [`BUCKETS_S`], then the overflow (+Inf) bucket.
    counts: [AtomicU64; BUCKETS_S.len() + 1],
    sum_us: AtomicU64,
}

impl Histogram {
    pub fn observe(&self, d: Duration) {
        let s = d.as_secs_f64();
        let i = BUCKETS_S
            .iter()
            .position(|&b| s <= b)
            .unwrap_or(BUCKETS_S.len());
        self.counts[i].fetch_add(1, Ordering::Relaxed);
        self.sum_us
            .fetch_add(d.as_micros() as u64, Ordering::Relaxed);
    }

    /// `name_bucket{le=...}` (cumulative), `name_sum`, `name_count`.
    fn render(&self, out: &mut String, name: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        let mut total = 0;
        for (i, count) in self.counts.iter().enumerate() {
            total += count.load(Ordering::Relaxed);
            let le = BUCKETS_S
                .get(i)
                .map_or("+Inf".to_string(), |b| b.to_string());
            let _ = writeln!(out, "{name}_bucket{{le=\"{le}\"}} {total}");
        }
        let sum = self.sum_us.load(Ordering::Relaxed) as f64 / 1e6;
        let _ = writeln!(out, "{name}_sum {sum}\n{name}_count {total}");
    }
}

/// What one KV slot is doing (`GET /slots`).
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct SlotState {
    /// The KV cache slot.
    pub id: usize,
    /// The request holding it (None: free).
    pub request: Option<String>,
    /// It drafts with the assistant.
    pub speculative: bool,
    pub prompt_tokens: usize,
    pub generated_tokens: usize,
}

#[derive(Default)]
pub struct Metrics {
    /// (endpoint, status) -> count.
    requests: Mutex<BTreeMap<(&'static str, u16), u64>>,
    pub prompt_tokens: AtomicU64,
    pub generated_tokens: AtomicU64,
    /// Requests whose client went away before the end (their sequences were stopped).
    pub cancelled: AtomicU64,
    /// Requests waiting for the model thread.
    pub queue_depth: AtomicU64,
    /// Sequences being generated (each holds a KV cache slot).
    pub active_sequences: AtomicU64,
    /// The most sequences that decoded together in one step.
    pub peak_batch: AtomicU64,
    /// Time the model thread spent generating, in microseconds.
    pub busy_us: AtomicU64,
    /// From a request's arrival (queueing included) to its first token.
    pub ttft: Histogram,
    /// From one token of a request to its next.
    pub token_latency: Histogram,
    pub drafted: AtomicU64,
    pub accepted: AtomicU64,
    /// The KV slots requests may hold, by slot id.
    pub slots: Mutex<BTreeMap<usize, SlotState>>,
}

impl Metrics {
    pub fn count_request(&self, endpoint: &'static str, status: u16) {
        *self
            .requests
            .lock()
            .expect("metrics lock poisoned")
            .entry((endpoint, status))
            .or_default() += 1;
    }

    /// Records what slot `id` holds now (a request's id and progress, or nothing).
    pub fn set_slot(&self, state: SlotState) {
        self.slots
            .lock()
            .expect("slots lock poisoned")
            .insert(state.id, state);
    }

    pub fn free_slot(&self, id: usize) {
        if let Some(s) = self.slots.lock().expect("slots lock poisoned").get_mut(&id) {
            s.request = None;
            s.prompt_tokens = 0;
            s.generated_tokens = 0;
        }
    }

    /// Seconds until `waiting` queued requests are served, at the rate requests have been
    /// answered so far (the model thread's busy time per answered request; 1 s per request
    /// before any), within 1..=60 (clients wait at most a minute on a `Retry-After`).
    pub fn expected_wait_s(&self, waiting: u64) -> u64 {
        let answered: u64 = self
            .requests
            .lock()
            .expect("metrics lock poisoned")
            .iter()
            .filter(|((_, status), _)| *status == 200)
            .map(|(_, n)| n)
            .sum();
        let per_request_us = match answered {
            0 => 1_000_000,
            n => self.busy_us.load(Ordering::Relaxed) / n,
        };
        (waiting * per_request_us).div_ceil(1_000_000).clamp(1, 60)
    }

    pub fn slot_states(&self) -> Vec<SlotState> {
        self.slots
            .lock()
            .expect("slots lock poisoned")
            .values()
            .cloned()
            .collect()
    }

    /// The exposition text; `kv_slots` is how many sequences the model can hold at once.
    pub fn render(&self, kv_slots: usize) -> String {
        let mut out = String::new();
        let mut metric = |name: &str, kind: &str, help: &str, samples: &[(String, f64)]| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
            for (labels, value) in samples {
                let _ = writeln!(out, "{name}{labels} {value}");
            }
        };
        let requests: Vec<(String, f64)> = self
            .requests
            .lock()
            .expect("metrics lock poisoned")
            .iter()
            .map(|((endpoint, status), n)| {
                (
                    format!("{{endpoint=\"{endpoint}\",status=\"{status}\"}}"),
                    *n as f64,
                )
            })
            .collect();
        metric(
            "wgemma_requests_total",
            "counter",
            "HTTP requests answered, by endpoint and status.",
            &requests,
        );
        for (name, kind, help, value) in self.scalars(kv_slots) {
            metric(name, kind, help, &[(String::new(), value)]);
        }
        self.ttft.render(
            &mut out,
            "wgemma_time_to_first_token_seconds",
            "Time from a request's arrival (queueing and prefill included) to its first token.",
        );
        self.token_latency.render(
            &mut out,
            "wgemma_time_per_output_token_seconds",
            "Time from one generated token of a request to its next (a speculative round's \
             tokens arrive together: its first carries the round's time, the rest ~0).",
        );
        out
    }

    /// The metrics of one unlabelled sample each, in the order the exposition lists them:
    /// (name, type, help, value).
    fn scalars(&self, kv_slots: usize) -> Vec<(&'static str, &'static str, &'static str, f64)> {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let generated = get(&self.generated_tokens);
        let busy_s = get(&self.busy_us) as f64 / 1e6;
        let (drafted, accepted) = (get(&self.drafted), get(&self.accepted));
        vec![
            (
                "wgemma_prompt_tokens_total",
                "counter",
                "Prompt tokens prefilled.",
                get(&self.prompt_tokens) as f64,
            ),
            (
                "wgemma_generated_tokens_total",
                "counter",
                "Tokens generated.",
                generated as f64,
            ),
            (
                "wgemma_requests_cancelled_total",
                "counter",
                "Requests whose client disconnected before the end; their sequences stopped.",
                get(&self.cancelled) as f64,
            ),
            (
                "wgemma_queue_depth",
                "gauge",
                "Requests waiting for a sequence slot.",
                get(&self.queue_depth) as f64,
            ),
            (
                "wgemma_active_sequences",
                "gauge",
                "Sequences being generated.",
                get(&self.active_sequences) as f64,
            ),
            (
                "wgemma_batch_rows_peak",
                "gauge",
                "The most sequences one decode step advanced together (continuous batching).",
                get(&self.peak_batch) as f64,
            ),
            (
                "wgemma_kv_slots_in_use",
                "gauge",
                "KV cache slots held by sequences.",
                get(&self.active_sequences) as f64,
            ),
            (
                "wgemma_kv_slots",
                "gauge",
                "KV cache slots the model has.",
                kv_slots as f64,
            ),
            (
                "wgemma_generation_seconds_total",
                "counter",
                "Time the model spent generating (prefill and decode).",
                busy_s,
            ),
            (
                "wgemma_tokens_per_second",
                "gauge",
                "Generated tokens over the time spent generating, since start.",
                if busy_s > 0.0 {
                    generated as f64 / busy_s
                } else {
                    0.0
                },
            ),
            (
                "wgemma_draft_tokens_total",
                "counter",
                "Tokens the MTP assistant drafted.",
                drafted as f64,
            ),
            (
                "wgemma_draft_tokens_accepted_total",
                "counter",
                "Drafted tokens the target accepted.",
                accepted as f64,
            ),
            (
                "wgemma_draft_acceptance_rate",
                "gauge",
                "Accepted over drafted tokens, since start (0 without drafts).",
                if drafted > 0 {
                    accepted as f64 / drafted as f64
                } else {
                    0.0
                },
            ),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histograms_are_cumulative() {
        let m = Metrics::default();
        for ms in [0, 3, 3, 40, 70_000] {
            m.ttft.observe(Duration::from_millis(ms));
        }
        let text = m.render(1);
        for line in [
            "wgemma_time_to_first_token_seconds_bucket{le=\"0.001\"} 1",
            "wgemma_time_to_first_token_seconds_bucket{le=\"0.005\"} 3",
            "wgemma_time_to_first_token_seconds_bucket{le=\"0.05\"} 4",
            "wgemma_time_to_first_token_seconds_bucket{le=\"60\"} 4",
            "wgemma_time_to_first_token_seconds_bucket{le=\"+Inf\"} 5",
            "wgemma_time_to_first_token_seconds_count 5",
            "wgemma_time_to_first_token_seconds_sum 70.046",
            "wgemma_time_per_output_token_seconds_count 0",
            "# TYPE wgemma_time_to_first_token_seconds histogram",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} not in\n{text}");
        }
    }
}
