//! [`PlanOptions`]: every switch that changes how a [`super::forward::ForwardPlan`] is built,
//! in one place the caller sets (`KvState::set_plan_options`; `wgemma bench` flags). The
//! library reads no environment variable, so a plan depends only on what its caller asked
//! for.

/// Forwards of up to this many rows run their RMSNorms as matvec prologues by default:
/// decode steps. A verify forward of 3 rows is slower with them (each workgroup
/// normalises every row), so verify keeps the kernels.
pub const DEFAULT_NORM_PROLOGUE_ROWS: usize = 1;

/// The fusions a forward plan may use. Each keeps every value as the unfused way computes
/// it; the default is the measured-fastest choice (tests and `wgemma bench` compare ways).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PlanOptions {
    /// Plans of at most this many rows fold the RMSNorms into the prologue of the matvec
    /// that consumes them where every linear can take one (0: every norm is a kernel).
    pub norm_prologue_rows: usize,
    /// Append new K/V rows inside the norm_rope dispatch where the cache is one buffer
    /// (off: the separate kv_append kernel; `bench --no-fold-kv-append`).
    pub fold_kv_append: bool,
    /// KV-shared layers' q_norm + RoPE applied inside the decode attention partial instead
    /// of a norm_rope dispatch (one dependent dispatch less per such layer; plans of more
    /// than `DECODE_MAX_ROWS` rows keep norm_rope). On by default: it saves 20 barriers per
    /// E2B token and decodes slightly faster; `bench --no-fold-q-norm-rope` is the before.
    pub fold_q_norm_rope: bool,
    /// Decode attention on the latency-shaped kernels (`attention_decode_latency.wgsl`:
    /// every load of a tile issued before its math, 2 barriers per tile, one tile per
    /// split) where the device has them; off: the classic decode kernels
    /// (`bench --no-latency-attention`, the before).
    pub latency_attention: bool,
}

impl Default for PlanOptions {
    fn default() -> Self {
        PlanOptions {
            norm_prologue_rows: DEFAULT_NORM_PROLOGUE_ROWS,
            fold_kv_append: true,
            fold_q_norm_rope: true,
            latency_attention: true,
        }
    }
}

impl PlanOptions {
    /// Whether a plan of `m` rows asks for norm prologues (it takes them only where every
    /// linear of the plan can).
    pub fn norm_prologues(&self, m: usize) -> bool {
        m <= self.norm_prologue_rows
    }
}
