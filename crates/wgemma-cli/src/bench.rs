//! `wgemma bench`: prefill and decode speed of a model of real shapes (synthetic weights,
//! the same code path as a loaded model) or of a checkpoint, against the device's read
//! bandwidth measured in the same run.

use crate::generate::ModelArgs;
use crate::load::{load_dir, load_synthetic, Loaded};
use anyhow::{bail, Result};
use clap::Args;
use std::path::PathBuf;
use std::time::Instant;
use wgemma::gpu::{ContextOptions, GpuContext};
use wgemma::harness;
use wgemma::model::synthetic::SyntheticShape;
use wgemma::model::target::{ModelOptions, Want};
use wgemma::model::weights::WeightFormat;
use wgemma::ops::read_bandwidth::ReadBandwidthCase;

#[derive(Args)]
pub struct BenchArgs {
    /// A synthetic model of real shapes: e2b, e4b, 31b (or tiny).
    #[arg(long, conflicts_with = "model")]
    synthetic: Option<String>,
    /// A Hugging Face checkpoint directory instead.
    #[arg(long)]
    model: Option<PathBuf>,
    /// Weight format: q4, q4g64, q4g128, f16, f32.
    #[arg(long, default_value = "q4")]
    quant: String,
    #[arg(long, default_value_t = 512)]
    prompt_len: usize,
    #[arg(long, default_value_t = 256)]
    gen: usize,
    #[arg(long, default_value_t = 256)]
    prefill_chunk: usize,
    #[arg(long, default_value_t = 0)]
    seed: u64,
    #[arg(long)]
    json: bool,
}

pub fn run(args: BenchArgs) -> Result<()> {
    if args.prompt_len == 0 || args.gen < 2 {
        bail!("--prompt-len must be >= 1 and --gen >= 2");
    }
    let ctx = GpuContext::new_blocking(ContextOptions::default())?;
    let options = ModelOptions {
        format: WeightFormat::parse(&args.quant)?,
        max_context: args.prompt_len + args.gen + 8,
        prefill_chunk: args.prefill_chunk.min(args.prompt_len),
        ..ModelOptions::default()
    };
    let Loaded {
        mut model, load_ms, ..
    } = match (&args.synthetic, &args.model) {
        (Some(shape), None) => {
            load_synthetic(&ctx, SyntheticShape::parse(shape)?, args.seed, options)?
        }
        (None, Some(dir)) => load_dir(
            &ctx,
            dir,
            ModelArgs {
                model: dir.clone(),
                dtype: args.quant.clone(),
                context: options.max_context,
                prefill_chunk: options.prefill_chunk,
            }
            .options()?,
        )?,
        _ => bail!("give --synthetic SHAPE or --model DIR"),
    };
    let vocab = model.spec.config.vocab_size as u64;
    let prompt: Vec<u32> = (0..args.prompt_len as u64)
        .map(|i| ((i.wrapping_mul(2654435761) ^ args.seed) % vocab) as u32)
        .collect();

    // Warm up: builds every plan (pipelines, bind groups) the timed run uses.
    let mut next = pollster::block_on(model.forward(&ctx, &prompt, Want::NextToken))?.next[0];
    for _ in 0..2 {
        next = pollster::block_on(model.forward(&ctx, &[next], Want::NextToken))?.next[0];
    }
    model.reset();
    let memory_bytes = ctx
        .counters()
        .tensor_bytes
        .load(std::sync::atomic::Ordering::Relaxed);

    let t0 = Instant::now();
    let mut next = pollster::block_on(model.forward(&ctx, &prompt, Want::NextToken))?.next[0];
    let prefill_s = t0.elapsed().as_secs_f64();

    let (d0, s0, _) = ctx.counters().snapshot();
    let host0 = model.host_encode_seconds();
    let t1 = Instant::now();
    let steps = args.gen - 1;
    for _ in 0..steps {
        next = pollster::block_on(model.forward(&ctx, &[next], Want::NextToken))?.next[0];
    }
    let decode_s = t1.elapsed().as_secs_f64();
    let (d1, s1, _) = ctx.counters().snapshot();
    let host_s = model.host_encode_seconds() - host0;

    let bandwidth = harness::perf(&ctx, &ReadBandwidthCase { words: 64 << 20 }, 50)?;
    let bytes_per_token = model.decode_weight_bytes();
    let decode_tps = steps as f64 / decode_s;
    let roofline_tps = bandwidth.gb_per_s * 1e9 / bytes_per_token as f64;
    let report = serde_json::json!({
        "adapter": ctx.describe(),
        "model": args.synthetic.clone().unwrap_or_else(|| args.model.as_ref().unwrap().display().to_string()),
        "quant": args.quant,
        "load_ms": load_ms,
        "prompt_len": args.prompt_len,
        "gen": args.gen,
        "prefill_tokens_per_s": args.prompt_len as f64 / prefill_s,
        "decode_tokens_per_s": decode_tps,
        "host_ms_per_decode_step": host_s / steps as f64 * 1e3,
        "dispatches_per_token": (d1 - d0) as f64 / steps as f64,
        "submits_per_token": (s1 - s0) as f64 / steps as f64,
        "weight_bytes": model.weight_bytes(),
        "weight_bytes_read_per_token": bytes_per_token,
        "gpu_tensor_bytes": memory_bytes,
        "device_read_gb_per_s": bandwidth.gb_per_s,
        "roofline_tokens_per_s": roofline_tps,
        "roofline_fraction": decode_tps / roofline_tps,
    });
    if args.json {
        println!("{report}");
    } else {
        for (k, v) in report.as_object().expect("object") {
            println!("{k:<28} {v}");
        }
    }
    Ok(())
}
