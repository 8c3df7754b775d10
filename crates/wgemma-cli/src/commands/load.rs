//! `wgemma load`: loads a model (and an assistant) the way generate does, then reports
//! what the load cost: wall time, and the process's peak resident memory (Linux VmHWM;
//! with a software GPU such as lavapipe the GPU buffers are host memory and count too).

use crate::args::ModelArgs;
use crate::load::{load_assistant, load_model_with};
use crate::progress::peak_rss_mb;
use anyhow::Result;
use clap::Args;
use std::path::PathBuf;
use wgemma::weights::upload::Quantiser;

#[derive(Args)]
pub struct LoadArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// Also load this assistant (a directory, a gemma4-assistant GGUF file, or an artifact
    /// holding one).
    #[arg(long, value_name = "DIR|FILE")]
    assistant: Option<PathBuf>,
    /// Where a checkpoint directory's Q4 quantisation runs: auto (the GPU, or the CPU on
    /// a software adapter such as lavapipe), gpu or cpu (the reference).
    #[arg(long, default_value = "auto", value_parser = ["auto", "gpu", "cpu"])]
    quantise_on: String,
    /// One JSON object.
    #[arg(long)]
    json: bool,
}

pub fn run(args: LoadArgs) -> Result<()> {
    let request = args.model.request()?;
    args.model.warn_unused(args.assistant.as_deref());
    let ctx = crate::gpu_args::open_context(crate::gpu_args::context_options())?;
    let rss_before = peak_rss_mb();
    let start = std::time::Instant::now();
    let quantiser = match args.quantise_on.as_str() {
        "gpu" => Quantiser::Gpu,
        "cpu" => Quantiser::Cpu,
        _ => Quantiser::Auto,
    };
    let loaded = load_model_with(&ctx, &args.model.model, request, quantiser)?;
    let target_ms = start.elapsed().as_secs_f64() * 1e3;
    let assistant = args
        .assistant
        .as_ref()
        .map(|p| load_assistant(&ctx, p, &loaded.target.state, !args.model.no_verify))
        .transpose()?;
    let total_ms = start.elapsed().as_secs_f64() * 1e3;
    let report = serde_json::json!({
        "model": args.model.model.display().to_string(),
        "assistant": args.assistant.as_ref().map(|p| p.display().to_string()),
        "format": format!("{:?}", loaded.target.state.model().options.format),
        "verified": !args.model.no_verify,
        "quantised_on": if args.model.model.is_dir() {
            (if quantiser.on_gpu(&ctx) { "gpu" } else { "cpu" }).to_string()
        } else if crate::files::is_gguf(&args.model.model) {
            // Per tensor in a GGUF: Q4_0 into Q4 group 32 as stored, float rows like a
            // checkpoint's, other block types dequantised and quantised on the CPU.
            format!(
                "gguf: Q4_0 stored, float tensors on the {}, other block types on the cpu",
                if quantiser.on_gpu(&ctx) { "gpu" } else { "cpu" }
            )
        } else {
            "stored".to_string()
        },
        "load_ms": total_ms,
        "target_load_ms": target_ms,
        "weight_bytes": loaded.target.state.model().weight_bytes(),
        "assistant_loaded": assistant.is_some(),
        "peak_rss_mb_before_load": rss_before,
        "peak_rss_mb_after_target": loaded.peak_rss_mb,
        "peak_rss_mb": peak_rss_mb(),
        "adapter": ctx.describe(),
    });
    if args.json {
        println!("{report}");
    } else {
        for (k, v) in report.as_object().expect("object") {
            println!("{k:<24} {v}");
        }
    }
    Ok(())
}
