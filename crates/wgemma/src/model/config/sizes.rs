//! What loading a config allocates, estimated before anything is allocated, and the
//! check against the device's and the host's limits.

use super::fields::{KvSource, ModelSpec};
use crate::error::{Error, Result};

const OP: &str = "config";

/// What a load may use, for [`ModelSpec::check_sizes`]: the device's largest buffer and
/// the host's memory (the library reads no files: the caller measures it).
#[derive(Debug, Clone, Copy)]
pub struct SizeLimits {
    /// Weight bytes per parameter in the load format (Q4 group g: 0.5 + 2 / g).
    pub bytes_per_weight: f64,
    /// `--context`: positions each own KV cache holds (a sliding layer: its window).
    pub max_context: usize,
    /// Rows of the largest forward that keeps every row's logits (verify rows; prefill
    /// chunks keep the last row's only).
    pub max_rows: usize,
    /// The device's `max_buffer_size`.
    pub max_buffer_bytes: u64,
    /// Host memory in bytes, when known.
    pub host_memory_bytes: Option<u64>,
    /// The adapter is a CPU (lavapipe): its buffers are host memory too.
    pub device_is_host: bool,
}

/// Sizes a config asks for, in bytes (u128: absurd configs must not overflow).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SizeEstimate {
    /// Every weight in the load format.
    pub weights: u128,
    /// Every own layer's K and V caches (f32 rows; a sliding layer holds its window).
    pub kv_cache: u128,
    /// The largest tensor as f32 on the host (the loaders convert one tensor at a time).
    pub largest_host_tensor: u128,
    /// Logits of the largest forward, f32.
    pub logits: u128,
}

fn gib(bytes: u128) -> String {
    format!("{:.2} GiB", bytes as f64 / (1u64 << 30) as f64)
}

impl ModelSpec {
    /// Lower bounds on what loading this config allocates: enough to refuse an absurd
    /// config (a 2^28 vocabulary, 100000 layers) before any of it is allocated.
    pub fn estimate_sizes(&self, limits: &SizeLimits) -> SizeEstimate {
        let c = &self.config;
        let m = |a: usize, b: usize| a as u128 * b as u128;
        let embed = m(c.vocab_size, c.hidden_size);
        let ple_table = m(c.vocab_size, self.ple_dim) * self.layers.len() as u128;
        let mut params = embed + ple_table;
        let mut kv_cache = 0u128;
        let mut largest = embed.max(ple_table);
        for l in &self.layers {
            let q = m(c.num_attention_heads, l.head_dim) * c.hidden_size as u128;
            let kv = m(l.num_kv_heads, l.head_dim) * c.hidden_size as u128;
            let mlp = m(c.hidden_size, l.intermediate_size);
            let moe = self.moe.map_or(0, |e| {
                m(e.num_experts, e.intermediate_size) * c.hidden_size as u128 * 3
            });
            params += 2 * q + 2 * kv + 3 * mlp + moe + m(2, c.hidden_size) * self.ple_dim as u128;
            largest = largest.max(q).max(2 * mlp).max(moe);
            if l.kv == KvSource::Own {
                let positions = l
                    .window
                    .map_or(limits.max_context, |w| w.min(limits.max_context));
                let k_and_v = if l.k_eq_v { 1 } else { 2 };
                kv_cache += m(positions, l.num_kv_heads) * l.head_dim as u128 * 4 * k_and_v;
            }
        }
        SizeEstimate {
            weights: (params as f64 * limits.bytes_per_weight) as u128,
            kv_cache,
            largest_host_tensor: largest * 4,
            logits: m(limits.max_rows, c.vocab_size) * 4,
        }
    }

    /// Refuses a config whose sizes cannot fit this device or this host, stating them.
    /// Called at the top of every load, before anything is read or allocated.
    pub fn check_sizes(&self, limits: &SizeLimits) -> Result<SizeEstimate> {
        let e = self.estimate_sizes(limits);
        let c = &self.config;
        let max_buffer = limits.max_buffer_bytes as u128;
        if e.logits > max_buffer {
            return Err(Error::invalid(
                OP,
                format!(
                    "logits of one verify forward ({} rows x vocab_size {}, f32)",
                    limits.max_rows, c.vocab_size
                ),
                format!("<= the device's max_buffer_size = {}", gib(max_buffer)),
                gib(e.logits),
            ));
        }
        if let Some(host) = limits.host_memory_bytes.map(u128::from) {
            if e.largest_host_tensor > host {
                return Err(Error::invalid(
                    OP,
                    format!(
                        "the largest tensor as f32 on the host (vocab_size {} x hidden_size \
                         {}, or a layer's matrices)",
                        c.vocab_size, c.hidden_size
                    ),
                    format!("<= host memory = {}", gib(host)),
                    gib(e.largest_host_tensor),
                ));
            }
            let device = e.weights + e.kv_cache;
            if limits.device_is_host && device > host {
                return Err(Error::invalid(
                    OP,
                    format!(
                        "weights ({}) + KV caches ({}) of {} layers on a CPU adapter, whose \
                         buffers are host memory",
                        gib(e.weights),
                        gib(e.kv_cache),
                        self.layers.len()
                    ),
                    format!("<= host memory = {}", gib(host)),
                    gib(device),
                ));
            }
        }
        Ok(e)
    }
}
