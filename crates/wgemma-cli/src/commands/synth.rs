//! `wgemma synth-checkpoint`: a synthetic checkpoint directory in Hugging Face layout
//! (config.json + bf16 model.safetensors) of a real Gemma 4 shape, written streaming, for
//! measuring load time and memory of a checkpoint against its artifact without a download.

use crate::progress::bytes_bar;
use anyhow::{Context, Result};
use clap::Args;
use std::path::PathBuf;
use wgemma::formats::synthetic::checkpoint::write_synthetic_checkpoint;
use wgemma::formats::synthetic::SyntheticShape;

#[derive(Args)]
pub struct SynthArgs {
    /// tiny, e2b, e4b or 31b.
    #[arg(long, default_value = "e2b")]
    shape: String,
    /// The directory to create (or fill).
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

pub fn run(args: SynthArgs) -> Result<()> {
    let shape = SyntheticShape::parse(&args.shape)?;
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    std::fs::write(args.out.join("config.json"), shape.config_json())?;
    let path = args.out.join("model.safetensors");
    let tmp = args.out.join(".model.safetensors.partial");
    let file =
        std::fs::File::create(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
    let bar = bytes_bar(0, "writing");
    let sink = write_synthetic_checkpoint(
        std::io::BufWriter::with_capacity(8 << 20, file),
        shape,
        args.seed,
        &mut |done, total| {
            bar.set_length(total);
            bar.set_position(done);
        },
    )?;
    bar.finish_and_clear();
    sink.into_inner().map_err(|e| e.into_error())?.sync_all()?;
    std::fs::rename(&tmp, &path)?;
    eprintln!(
        "wrote {} ({} shape, bf16, seed {})",
        args.out.display(),
        args.shape,
        args.seed
    );
    Ok(())
}
