//! `wgemma bench`'s flags and the sizes they resolve to.

use anyhow::{bail, Result};
use clap::Args;
use std::path::PathBuf;
use wgemma::formats::synthetic::SyntheticShape;
use wgemma::gpu::{GemmCeiling, ShaderChecks};
use wgemma::model::{PlanOptions, DEFAULT_NORM_PROLOGUE_ROWS};
use wgemma::session::bench::suite::SuitePlan;

/// The lab switches `bench --help` lists after its options (they are hidden above them).
pub const LAB_SWITCHES: &str = "Lab switches, for A/B measurements of plan routes and \
fusions in one process (hidden above): --norm-prologue-rows N, --compare-norm-kernels, \
--compare-fusions, --no-fold-kv-append, --no-fold-q-norm-rope, --no-latency-attention, \
--gemm coop|int8|f16|f32, --shader-checks all|bounded|bounded-except-cooperative|none, --trace-barriers.";

#[derive(Args)]
pub struct BenchArgs {
    /// A synthetic model of real shapes: e2b, e4b, 31b (or tiny: a smoke test, with small
    /// defaults).
    #[arg(long, conflicts_with = "model")]
    pub(super) synthetic: Option<String>,
    /// A Hugging Face checkpoint directory, a model artifact or a llama.cpp GGUF file
    /// instead.
    #[arg(short = 'm', long, value_name = "DIR|FILE")]
    pub(super) model: Option<PathBuf>,
    /// Weight format: q4, q4g64, q4g128, f16, f32 [default: q4; a GGUF file runs its own
    /// types, an artifact keeps its own].
    #[arg(long, alias = "quant")]
    pub(super) dtype: Option<String>,
    /// Prompt tokens of the prefill test `ppN` [default: 512; 64 for tiny].
    #[arg(short = 'p', long = "n-prompt", alias = "prompt-len", value_name = "N")]
    pub(super) prompt_len: Option<usize>,
    /// Generated tokens of the decode test `tgN` and the speculative rows [default: 128;
    /// 32 for tiny].
    #[arg(short = 'n', long = "n-gen", alias = "gen", value_name = "N")]
    pub(super) gen: Option<usize>,
    /// Tokens already in the KV cache when the decode tests start (`tgN @ dD`).
    #[arg(
        short = 'd',
        long = "n-depth",
        alias = "depth",
        default_value_t = 0,
        value_name = "D"
    )]
    pub(super) depth: usize,
    /// Timed runs of each test after its warm-up (the test repeated for at least 1.5 s, so
    /// an idle GPU's clocks are up); the table shows mean ± standard deviation [default: 5;
    /// 3 for tiny].
    #[arg(short = 'r', long, value_name = "N")]
    pub(super) repetitions: Option<usize>,
    /// Rows per prefill forward.
    #[arg(long, default_value_t = crate::args::DEFAULT_PREFILL_CHUNK)]
    pub(super) prefill_chunk: usize,
    /// Seed of the synthetic weights and of the prompt's token ids.
    #[arg(short = 's', long, default_value_t = 0)]
    pub(super) seed: u64,
    /// Acceptance rates of the oracle speculative runs (1.0 = the target's own greedy
    /// tokens; lower = each draft replaced by a rejected token with probability 1 - p).
    #[arg(long, value_delimiter = ',', default_value = "1.0")]
    pub(super) acceptance: Vec<f64>,
    /// Drafts per round of the speculative rows (0 = none). With the E2B / E4B shapes the
    /// real drafter runs too (the published assistant's shape, random weights); its JSON
    /// reports, beside each acceptance rate, `drafted` (pipelined rounds, drafter
    /// included), `verify_only` (the same rounds without the drafter), `round_ms`,
    /// `verify_round_ms`, `drafter_ms_per_round` (their difference) and `verify_ratio`
    /// (over a plain step).
    #[arg(long, default_value_t = crate::args::DEFAULT_DRAFT_TOKENS)]
    pub(super) draft_tokens: usize,
    /// Also run the adaptive schedule with the real drafter at each acceptance rate (k in
    /// 0..=8 from the measured acceptance and costs; plain steps when drafting does not pay).
    #[arg(long)]
    pub(super) adaptive_draft: bool,
    /// Also time every dispatch of a few decode steps and one verify forward (GPU
    /// timestamps) and report where the time goes, by shader.
    #[arg(long)]
    pub(super) profile: bool,
    /// Forwards of at most N rows run their RMSNorms as the prologue of the matvec that
    /// consumes them; larger ones (and N = 0: all) as kernels of their own.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_NORM_PROLOGUE_ROWS, hide = true)]
    pub(super) norm_prologue_rows: usize,
    /// Also measure, in this run, decode and a verify forward with every norm a kernel
    /// (`norm_kernels_*` fields) and a verify forward with norm prologues
    /// (`norm_prologue_verify_forward_ms`): the fusion's before/after on one load.
    #[arg(long, hide = true)]
    pub(super) compare_norm_kernels: bool,
    /// Append new K/V rows with the kv_append kernel instead of inside norm_rope (the
    /// fold's before, for a before/after in one device call).
    #[arg(long, hide = true)]
    pub(super) no_fold_kv_append: bool,
    /// On KV-shared layers, apply q_norm + RoPE with a norm_rope dispatch before attention
    /// instead of inside the decode attention kernel (the fold's before, for a before/after
    /// in one device call).
    #[arg(long, hide = true)]
    pub(super) no_fold_q_norm_rope: bool,
    /// Run decode attention on the classic kernels (tiles of 128-256 keys, 6 barriers a
    /// tile) instead of the latency-shaped ones (every load of a tile first, 2 barriers a
    /// tile, one tile per split): the before of that change, in one device call.
    #[arg(long, hide = true)]
    pub(super) no_latency_attention: bool,
    /// Also measure, in this run, decode with the K/V append kernel (`unfused_*`), with the
    /// append folded (`fold_only_*`), and with the append and the KV-shared layers' q_norm
    /// and RoPE folded (`fold_q_*`): those fusions' before/after on
    /// one load (each variant run twice, in order and in reverse order; the mean and both
    /// runs are reported).
    #[arg(long, hide = true)]
    pub(super) compare_fusions: bool,
    /// Print every dispatch of every forward and the bindings that cost it a barrier, to
    /// stderr (a diagnostic for barrier counts; long output: use with a short --gen).
    #[arg(long, hide = true)]
    pub(super) trace_barriers: bool,
    /// The fastest GEMM family prefill may use: coop (tensor cores where offered), int8
    /// (integer dot products where the activations are int8: browsers' and
    /// --webgpu-limits' fastest), f16 (f16-tile vector GEMM), f32.
    #[arg(long, value_enum, default_value_t = GemmArg::Coop, hide = true)]
    pub(super) gemm: GemmArg,
    /// The runtime checks wgpu compiles into every kernel: all (wgpu's default, with a
    /// counter in every loop), bounded (no loop counters), bounded-except-cooperative (the
    /// default: counters only in the tensor-core kernels), none.
    #[arg(long, value_enum, default_value_t = ShaderChecksArg::BoundedExceptCooperative, hide = true)]
    pub(super) shader_checks: ShaderChecksArg,
    /// Only what desktop Chrome grants a page: its WebGPU features (no cooperative
    /// matrices, so no tensor-core routes) and its tiered
    /// limits, so this GPU measures the figure a browser user can expect.
    #[arg(long)]
    pub(super) webgpu_limits: bool,
    /// N streams decoding together, each with its own prompt and KV slot: aggregate
    /// tokens/s of N batched plain streams (one forward of N rows per step), then of N
    /// speculative streams (each drafting --draft-tokens per round with the assistant, every
    /// stream's verify rows in one forward per step) at each --acceptance rate, their
    /// tokens checked against the plain streams' (JSON: `batched_tokens_per_s`,
    /// `speculative[]` with `acceptance_rate` and `matches_plain`). Needs an assistant:
    /// --synthetic tiny, e2b or e4b (random weights), or a --model artifact holding one.
    #[arg(
        long,
        value_name = "N",
        conflicts_with_all = [
            "adaptive_draft", "profile", "compare_norm_kernels", "compare_fusions", "depth",
        ]
    )]
    pub(super) parallel: Option<usize>,
    /// One JSON object: every test's runs (`tests`: `avg_ts`, `stddev_ts`, `samples_ts`, as
    /// llama-bench writes them) and the detailed fields (roofline, dispatches, profiles).
    #[arg(long)]
    pub(super) json: bool,
}

/// The sizes a run uses: the flags, or the defaults of its model.
pub(super) struct Sizes {
    pub(super) prompt_len: usize,
    pub(super) gen: usize,
    pub(super) repetitions: usize,
}

impl BenchArgs {
    /// The plan options the flags ask for (the library's defaults where none is given).
    pub(super) fn plan_options(&self) -> PlanOptions {
        PlanOptions {
            norm_prologue_rows: self.norm_prologue_rows,
            fold_kv_append: !self.no_fold_kv_append,
            fold_q_norm_rope: !self.no_fold_q_norm_rope,
            latency_attention: !self.no_latency_attention,
        }
    }

    /// The weight format as the bench reports it: `--dtype` as given, else `q4` (a GGUF
    /// file: `stored`, its own types).
    pub(super) fn dtype_label(&self) -> String {
        match (&self.dtype, &self.model) {
            (Some(d), _) => d.clone(),
            (None, Some(m)) if crate::files::is_gguf(m) => "stored".to_string(),
            (None, _) => "q4".to_string(),
        }
    }

    /// What the library's suite runs: the sizes, the speculative rows' flags and the
    /// synthetic shape (its drafter rows).
    pub(super) fn suite_plan(&self, sizes: &Sizes) -> Result<SuitePlan> {
        Ok(SuitePlan {
            prompt_len: sizes.prompt_len,
            gen: sizes.gen,
            depth: self.depth,
            repetitions: sizes.repetitions,
            seed: self.seed,
            k: self.draft_tokens,
            acceptance: self.acceptance.clone(),
            adaptive: self.adaptive_draft,
            shape: self
                .synthetic
                .as_deref()
                .map(SyntheticShape::parse)
                .transpose()?,
        })
    }

    pub(super) fn sizes(&self) -> Result<Sizes> {
        let tiny = self.synthetic.as_deref() == Some("tiny");
        let sizes = Sizes {
            prompt_len: self.prompt_len.unwrap_or(if tiny { 64 } else { 512 }),
            gen: self.gen.unwrap_or(if tiny { 32 } else { 128 }),
            repetitions: self.repetitions.unwrap_or(if tiny { 3 } else { 5 }),
        };
        if sizes.prompt_len == 0 {
            bail!("--n-prompt: expected at least 1 token, found 0");
        }
        if sizes.gen < 2 {
            bail!("--n-gen: expected at least 2 tokens, found {}", sizes.gen);
        }
        if sizes.repetitions == 0 {
            bail!("--repetitions: expected at least 1 timed run, found 0");
        }
        Ok(sizes)
    }
}

#[derive(Clone, Copy, clap::ValueEnum)]
pub(super) enum GemmArg {
    Coop,
    Int8,
    F16,
    F32,
}

#[derive(Clone, Copy, clap::ValueEnum)]
pub(super) enum ShaderChecksArg {
    All,
    Bounded,
    BoundedExceptCooperative,
    None,
}

impl ShaderChecksArg {
    pub(super) fn checks(self) -> ShaderChecks {
        match self {
            ShaderChecksArg::All => ShaderChecks::All,
            ShaderChecksArg::Bounded => ShaderChecks::Bounded,
            ShaderChecksArg::BoundedExceptCooperative => ShaderChecks::BoundedExceptCooperative,
            ShaderChecksArg::None => ShaderChecks::None,
        }
    }
}

impl GemmArg {
    pub(super) fn ceiling(self) -> GemmCeiling {
        match self {
            GemmArg::Coop => GemmCeiling::CooperativeMatrix,
            GemmArg::Int8 => GemmCeiling::Int8,
            GemmArg::F16 => GemmCeiling::F16,
            GemmArg::F32 => GemmCeiling::F32,
        }
    }
}
