//! What one `wgemma bench` run measured, reported: the `--profile` measurements (the
//! library's [`wgemma::session::bench::profile`]) and the outcome printed as the table or
//! the JSON report.

use super::args::BenchArgs;
use super::table::print_table;
use anyhow::Result;
use pollster::block_on;
use wgemma::gpu::GpuContext;
use wgemma::model::assistant::Assistant;
use wgemma::model::state::KvState;
use wgemma::model::target::{Model, Want};
use wgemma::session::bench::profile::{profile_forwards, profile_rounds, summarize_profile};
use wgemma::session::bench::suite::{PlainTests, Suite};
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
        plain: &PlainTests,
        assistant: Option<&mut Assistant>,
    ) -> Result<Profile> {
        let k = args.draft_tokens;
        let prompt = plain.prompt();
        let context = plain.context();
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
        let tokens = (context, &plain.run.greedy[..]);
        let rounds = assistant.map(|assistant| {
            block_on(profile_rounds(ctx, state, assistant, tokens, k, decode_us))
                .unwrap_or_else(|e| serde_json::json!({ "error": e.to_string() }))
        });
        let oracle_rounds = if k > 0 {
            let o = block_on(bench::oracle_rounds(ctx, state, tokens, (k, 1.0), true))?;
            let mut json = o.json(plain.tg.mean());
            json["profile"] = summarize_profile(&o.profile, k + 1, o.rounds);
            Some(json)
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
    /// The tests' rows and figures.
    pub(super) suite: Suite,
    pub(super) profile: Option<Profile>,
    /// `--compare-fusions` and `--compare-norm-kernels` objects, merged into the report.
    pub(super) diagnostics: Vec<serde_json::Value>,
    pub(super) device_read_gb_per_s: f64,
}

impl Outcome {
    /// Decode tokens/s if every weight byte a token reads came at the device's measured
    /// read bandwidth.
    fn roofline_tps(&self, model: &Model) -> f64 {
        self.device_read_gb_per_s * 1e9 / model.decode_weight_bytes() as f64
    }

    /// The suite's report (the fields the browser's bench writes too) with what this run
    /// adds: how it names the model and weights, memory, the roofline, the diagnostics
    /// and profiles.
    pub(super) fn json(
        &self,
        args: &BenchArgs,
        ctx: &GpuContext,
        model: &Model,
    ) -> serde_json::Value {
        let mut report = self.suite.report(ctx, model, self.load_ms);
        report["model"] = args
            .synthetic
            .clone()
            .unwrap_or_else(|| args.model.as_ref().expect("a model").display().to_string())
            .into();
        report["dtype"] = args.dtype_label().into();
        report["webgpu_limits"] = args.webgpu_limits.into();
        report["shader_checks"] = format!("{:?}", ctx.shader_checks()).into();
        report["peak_rss_mb"] = crate::progress::peak_rss_mb().into();
        report["device_read_gb_per_s"] = self.device_read_gb_per_s.into();
        report["roofline_tokens_per_s"] = self.roofline_tps(model).into();
        report["roofline_fraction"] =
            (self.suite.plain.tg.mean() / self.roofline_tps(model)).into();
        for c in &self.diagnostics {
            for (key, v) in c.as_object().expect("object") {
                report[key] = v.clone();
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

    pub(super) fn print(&self, args: &BenchArgs, ctx: &GpuContext, model: &Model) {
        let (plan, plain) = (&self.suite.plan, &self.suite.plain);
        let per_token = |n: u64| n as f64 / plan.gen as f64;
        println!(
            "wgemma bench on {}{}, {} activations: {} timed runs per test after a warm-up",
            ctx.describe(),
            if args.webgpu_limits {
                ", limited to what desktop Chrome grants a page"
            } else {
                ""
            },
            ctx.activations().name(),
            plan.repetitions,
        );
        println!();
        print_table(
            &self.model_name,
            &args.dtype_label(),
            self.suite.rows(),
            &plain.tg_name,
        );
        println!();
        println!(
            "load {:.0} ms | prefill chunk {}, {} | {:.1} dispatches, {:.1} barriers \
             per decode token",
            self.load_ms,
            model.options.prefill_chunk,
            gemm_family(ctx),
            per_token(plain.run.dispatches),
            per_token(plain.run.barriers),
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
            self.roofline_tps(model),
            100.0 * plain.tg.mean() / self.roofline_tps(model)
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
