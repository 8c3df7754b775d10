//! `GET /metrics` of `wgemma serve`: Prometheus text exposition of the counters and gauges
//! the handlers and the model thread keep (requests by endpoint and status, tokens, queue
//! depth, active sequences, KV slots, tokens/s, time to first token, speculative acceptance).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

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
    /// Sum of the times to first token, microseconds, and their count.
    pub ttft_us: AtomicU64,
    pub ttft_count: AtomicU64,
    pub drafted: AtomicU64,
    pub accepted: AtomicU64,
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

    /// The exposition text; `kv_slots` is how many sequences the model can hold at once.
    pub fn render(&self, kv_slots: usize) -> String {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
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
        let one = |v: f64| vec![(String::new(), v)];
        let generated = get(&self.generated_tokens);
        let busy_s = get(&self.busy_us) as f64 / 1e6;
        metric(
            "wgemma_prompt_tokens_total",
            "counter",
            "Prompt tokens prefilled.",
            &one(get(&self.prompt_tokens) as f64),
        );
        metric(
            "wgemma_generated_tokens_total",
            "counter",
            "Tokens generated.",
            &one(generated as f64),
        );
        metric(
            "wgemma_requests_cancelled_total",
            "counter",
            "Requests whose client disconnected before the end; their sequences stopped.",
            &one(get(&self.cancelled) as f64),
        );
        metric(
            "wgemma_queue_depth",
            "gauge",
            "Requests waiting for a sequence slot.",
            &one(get(&self.queue_depth) as f64),
        );
        metric(
            "wgemma_active_sequences",
            "gauge",
            "Sequences being generated.",
            &one(get(&self.active_sequences) as f64),
        );
        metric(
            "wgemma_batch_rows_peak",
            "gauge",
            "The most sequences one decode step advanced together (continuous batching).",
            &one(get(&self.peak_batch) as f64),
        );
        metric(
            "wgemma_kv_slots_in_use",
            "gauge",
            "KV cache slots held by sequences.",
            &one(get(&self.active_sequences) as f64),
        );
        metric(
            "wgemma_kv_slots",
            "gauge",
            "KV cache slots the model has.",
            &one(kv_slots as f64),
        );
        metric(
            "wgemma_generation_seconds_total",
            "counter",
            "Time the model spent generating (prefill and decode).",
            &one(busy_s),
        );
        metric(
            "wgemma_tokens_per_second",
            "gauge",
            "Generated tokens over the time spent generating, since start.",
            &one(if busy_s > 0.0 {
                generated as f64 / busy_s
            } else {
                0.0
            }),
        );
        let ttft_n = get(&self.ttft_count);
        metric(
            "wgemma_time_to_first_token_seconds_sum",
            "counter",
            "Sum of the times from a request's start of generation to its first token.",
            &one(get(&self.ttft_us) as f64 / 1e6),
        );
        metric(
            "wgemma_time_to_first_token_seconds_count",
            "counter",
            "Requests counted in the sum above.",
            &one(ttft_n as f64),
        );
        let (drafted, accepted) = (get(&self.drafted), get(&self.accepted));
        metric(
            "wgemma_draft_tokens_total",
            "counter",
            "Tokens the MTP assistant drafted.",
            &one(drafted as f64),
        );
        metric(
            "wgemma_draft_tokens_accepted_total",
            "counter",
            "Drafted tokens the target accepted.",
            &one(accepted as f64),
        );
        metric(
            "wgemma_draft_acceptance_rate",
            "gauge",
            "Accepted over drafted tokens, since start (0 without drafts).",
            &one(if drafted > 0 {
                accepted as f64 / drafted as f64
            } else {
                0.0
            }),
        );
        out
    }
}
