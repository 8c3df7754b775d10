//! What one `wgemma bench` run measured, reported: the `--profile` measurements (the
//! library's [`wgemma::session::bench::profile`]) and the outcome printed as the table or
//! the JSON report.

use super::args::{BenchArgs, Sizes};
use super::plain::PlainRun;
use super::spec_rows::{oracle_json, SpecOutcome};
use super::table::{print_table, TestRow};
use anyhow::Result;
use pollster::block_on;
use wgemma::gpu::GpuContext;
use wgemma::model::assistant::Assistant;
use wgemma::model::state::KvState;
use wgemma::model::target::Want;
use wgemma::session::bench::profile::{profile_forwards, profile_rounds, summarize_profile};
use wgemma::session::bench::{self, gemm_family};

/// `--profile`: GPU timestamps per dispatch of the prompt's forwards, decode and verify
/// forwards, oracle rounds and the pipelined rounds with the drafter.
pub(super) struct Profile {
    pub(super) prefill: Option<serde_json::Value>,
    pub(super) decode: serde_json::Value,
    pub(super) verify: Option<serde_json::Value>,
    pub(super) oracle_rounds: Option<serde_json::Value>,
    pub(super) rounds: Option<serde_json::Value>,
}

impl Profile {
    pub(super) fn measure(
        args: &BenchArgs,
        ctx: &GpuContext,
        state: &mut KvState,
        plain: &PlainRun,
        assistant: Option<&mut Assistant>,
    ) -> Result<Profile> {
        let k = args.draft_tokens;
        let prompt = plain.prompt();
        let context = plain.decode_context(args.depth);
        state.reset();
        let first = block_on(state.forward(ctx, prompt, Want::NextToken))?.next[0];
        // The prompt's forwards, where their dispatches fit the profiler's timestamps.
        let prefill = block_on(ctx.read_profile())
            .ok()
            .map(|t| summarize_profile(&t, prompt.len(), 1));
        let decode = block_on(profile_forwards(ctx, state, first, 1, 16))?;
        let verify = if k > 0 {
            Some(block_on(profile_forwards(ctx, state, first, k + 1, 8))?)
        } else {
            None
        };
        // The pipelined rounds with the drafter, by phase and shader.
        let decode_us = decode["gpu_us_per_forward"].as_f64().unwrap_or(0.0);
        let tokens = (context, &plain.greedy[..]);
        let rounds = assistant.map(|assistant| {
            block_on(profile_rounds(ctx, state, assistant, tokens, k, decode_us))
                .unwrap_or_else(|e| serde_json::json!({ "error": e.to_string() }))
        });
        let oracle_rounds = if k > 0 {
            let o = block_on(bench::oracle_rounds(ctx, state, tokens, (k, 1.0), true))?;
            Some(oracle_json(&o, plain.tg.mean(), k, true))
        } else {
            None
        };
        Ok(Profile {
            prefill,
            decode,
            verify,
            oracle_rounds,
            rounds,
        })
    }
}

/// Everything one `wgemma bench` run measured, for the table or the JSON report.
pub(super) struct Outcome {
    pub(super) model_name: String,
    pub(super) load_ms: f64,
    pub(super) prefill_chunk: usize,
    /// Every test's row: the plain tests', then the speculative ones'.
    pub(super) rows: Vec<TestRow>,
    pub(super) plain: PlainRun,
    pub(super) unpipelined_step_ms: f64,
    pub(super) verify_forward_ms: Option<f64>,
    pub(super) spec: SpecOutcome,
    pub(super) profile: Option<Profile>,
    /// `--compare-fusions` and `--compare-norm-kernels` objects, merged into the report.
    pub(super) diagnostics: Vec<serde_json::Value>,
    pub(super) device_read_gb_per_s: f64,
    pub(super) weight_bytes: u64,
    pub(super) bytes_per_token: u64,
}

impl Outcome {
    fn per_token(&self, n: u64, sizes: &Sizes) -> f64 {
        n as f64 / sizes.gen as f64
    }

    fn roofline_tps(&self) -> f64 {
        self.device_read_gb_per_s * 1e9 / self.bytes_per_token as f64
    }

    pub(super) fn json(
        &self,
        args: &BenchArgs,
        sizes: &Sizes,
        ctx: &GpuContext,
    ) -> serde_json::Value {
        let (plain, k) = (&self.plain, args.draft_tokens);
        let (dispatches, submits, barriers) = plain.counts;
        let decode_tps = plain.tg.mean();
        let mut report = serde_json::json!({
            "adapter": ctx.describe(),
            "model": args.synthetic.clone().unwrap_or_else(|| args.model.as_ref().expect("a model").display().to_string()),
            "dtype": args.dtype_label(),
            "webgpu_limits": args.webgpu_limits,
            "activations": ctx.activations().name(),
            "features": format!("{:?}", ctx.features),
            "repetitions": sizes.repetitions,
            "tests": self.rows.iter().map(TestRow::json).collect::<Vec<_>>(),
            "greedy_tokens": plain.greedy,
            "load_ms": self.load_ms,
            "peak_rss_mb": crate::progress::peak_rss_mb(),
            "prompt_len": sizes.prompt_len,
            "gen": sizes.gen,
            "depth": args.depth,
            "prefill_tokens_per_s": plain.pp.mean(),
            "prefill_ms": sizes.prompt_len as f64 / plain.pp.mean() * 1e3,
            "prefill_chunk": self.prefill_chunk,
            "gemm_ceiling": format!("{:?}", ctx.gemm),
            "gemm": gemm_family(ctx),
            "shader_checks": format!("{:?}", ctx.shader_checks()),
            "coop_16x16_f16": ctx.has_coop_16x16_f16(),
            "decode_tokens_per_s": decode_tps,
            "host_ms_per_decode_step": plain.host_s / sizes.gen as f64 * 1e3,
            "dispatches_per_token": self.per_token(dispatches, sizes),
            "barriers_per_token": self.per_token(barriers, sizes),
            "submits_per_token": self.per_token(submits, sizes),
            "unpipelined_decode_ms_per_step": self.unpipelined_step_ms,
            "verify_forward_ms": self.verify_forward_ms,
            "weight_bytes": self.weight_bytes,
            "weight_bytes_read_per_token": self.bytes_per_token,
            "gpu_tensor_bytes": plain.memory_bytes,
            "device_read_gb_per_s": self.device_read_gb_per_s,
            "roofline_tokens_per_s": self.roofline_tps(),
            "roofline_fraction": decode_tps / self.roofline_tps(),
        });
        let oracle = &self.spec.oracle;
        if let Some(o) = oracle.iter().find(|o| o["target_acceptance"] == 1.0) {
            report["oracle_draft_tokens"] = k.into();
            report["oracle_tokens_per_s"] = o["tokens_per_s"].clone();
            report["oracle_speedup"] = o["speedup"].clone();
            report["oracle_rounds"] = o["rounds"].clone();
            report["oracle_acceptance_rate"] = o["acceptance_rate"].clone();
        }
        for c in &self.diagnostics {
            for (key, v) in c.as_object().expect("object") {
                report[key] = v.clone();
            }
        }
        if !oracle.is_empty() {
            report["speculative"] = oracle.clone().into();
            for (i, runs) in self.spec.drafted.iter().enumerate() {
                let entry = &mut report["speculative"][i];
                for (key, v) in runs.as_object().expect("object") {
                    entry[key] = v.clone();
                }
            }
        }
        if let Some(p) = &self.profile {
            report["profile_prefill"] = p.prefill.clone().unwrap_or_default();
            report["profile_decode"] = p.decode.clone();
            report["profile_verify"] = p.verify.clone().unwrap_or_default();
            report["profile_oracle_rounds"] = p.oracle_rounds.clone().unwrap_or_default();
            report["profile_rounds"] = p.rounds.clone().unwrap_or_default();
        }
        report
    }

    pub(super) fn print(&self, args: &BenchArgs, sizes: &Sizes, ctx: &GpuContext) {
        let (dispatches, _, barriers) = self.plain.counts;
        println!(
            "wgemma bench on {}{}, {} activations: {} timed runs per test after a warm-up",
            ctx.describe(),
            if args.webgpu_limits {
                ", limited to what desktop Chrome grants a page"
            } else {
                ""
            },
            ctx.activations().name(),
            sizes.repetitions,
        );
        println!();
        print_table(
            &self.model_name,
            &args.dtype_label(),
            &self.rows,
            &self.plain.tg_name,
        );
        println!();
        println!(
            "load {:.0} ms | prefill chunk {}, {} | {:.1} dispatches, {:.1} barriers \
             per decode token",
            self.load_ms,
            self.prefill_chunk,
            gemm_family(ctx),
            self.per_token(dispatches, sizes),
            self.per_token(barriers, sizes),
        );
        let tiny = args.synthetic.as_deref() == Some("tiny");
        println!(
            "device read {:.1} GB/s{}: decode roofline {:.0} t/s, {:.0}% reached",
            self.device_read_gb_per_s,
            if tiny {
                " (a small buffer: tiny is a smoke test)"
            } else {
                ""
            },
            self.roofline_tps(),
            100.0 * self.plain.tg.mean() / self.roofline_tps()
        );
        if let Some(p) = &self.profile {
            if let Some(prefill) = &p.prefill {
                print_profile("prefill", prefill);
            }
            print_profile("decode", &p.decode);
            if let Some(v) = &p.verify {
                print_profile("verify", v);
            }
            if let Some(r) = &p.oracle_rounds {
                println!("\nprofiled oracle rounds: {r}");
            }
            if let Some(r) = &p.rounds {
                println!("\nprofiled pipelined rounds: {r}");
            }
        }
    }
}

/// One `--profile` table: a forward's GPU time by shader.
fn print_profile(what: &str, p: &serde_json::Value) {
    println!(
        "\nprofile: {what} forward of {} rows, GPU {:.1} us per forward (mean of {})",
        p["rows"],
        p["gpu_us_per_forward"].as_f64().unwrap_or(0.0),
        p["forwards"]
    );
    println!(
        "{:<28} {:>10} {:>12} {:>12}",
        "shader", "dispatches", "us/forward", "us/dispatch"
    );
    for row in p["by_shader"].as_array().into_iter().flatten() {
        println!(
            "{:<28} {:>10.1} {:>12.1} {:>12.2}",
            row["shader"].as_str().unwrap_or(""),
            row["dispatches_per_forward"].as_f64().unwrap_or(0.0),
            row["us_per_forward"].as_f64().unwrap_or(0.0),
            row["us_per_dispatch"].as_f64().unwrap_or(0.0)
        );
    }
}
