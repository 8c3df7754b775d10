//! `wgemma synth-checkpoint`: a synthetic checkpoint directory in Hugging Face layout
//! (config.json + bf16 model.safetensors) of a real Gemma 4 shape, written streaming, for
//! measuring load time and memory of a checkpoint against its artifact without a download.

use crate::output::{NewDir, NewFile};
use crate::progress::bytes_bar;
use anyhow::{Context, Result};
use clap::Args;
use std::io::Write;
use std::path::PathBuf;
use wgemma::formats::synthetic::checkpoint::write_synthetic_checkpoint;
use wgemma::formats::synthetic::SyntheticShape;

#[derive(Args)]
pub struct SynthArgs {
    /// tiny, e2b, e4b or 31b.
    #[arg(long, default_value = "e2b")]
    shape: String,
    /// The directory to create (a new path).
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
    /// Replace the config.json and model.safetensors of an existing --out directory.
    #[arg(long)]
    force: bool,
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

/// A new directory appears whole (written under a fresh temporary name, then renamed);
/// with `--force` an existing one gets each file replaced whole. Nothing of an existing
/// checkpoint is overwritten without `--force`.
pub fn run(args: SynthArgs) -> Result<()> {
    let shape = SyntheticShape::parse(&args.shape)?;
    if args.force && args.out.is_dir() {
        for (name, contents) in [
            ("config.json", Some(shape.config_json())),
            ("model.safetensors", None),
        ] {
            let file = NewFile::create(&args.out.join(name), true, "--out")?;
            match contents {
                Some(text) => file.writer()?.write_all(text.as_bytes())?,
                None => write_weights(file.writer()?, shape, args.seed)?,
            }
            file.commit()?;
        }
    } else {
        let dir = NewDir::create(&args.out, "--out")?;
        std::fs::write(dir.path().join("config.json"), shape.config_json())
            .with_context(|| format!("writing {}/config.json", dir.path().display()))?;
        let weights = dir.path().join("model.safetensors");
        let file = std::fs::File::create_new(&weights)
            .with_context(|| format!("creating {}", weights.display()))?;
        write_weights(file, shape, args.seed)?;
        dir.commit()?;
    }
    eprintln!(
        "wrote {} ({} shape, bf16, seed {})",
        args.out.display(),
        args.shape,
        args.seed
    );
    Ok(())
}

/// The bf16 weights of `shape` streamed into `file`, synced.
fn write_weights(file: std::fs::File, shape: SyntheticShape, seed: u64) -> Result<()> {
    let bar = bytes_bar(0, "writing");
    let sink = write_synthetic_checkpoint(
        std::io::BufWriter::with_capacity(8 << 20, file),
        shape,
        seed,
        &mut |done, total| {
            bar.set_length(total);
            bar.set_position(done);
        },
    )?;
    bar.finish_and_clear();
    sink.into_inner().map_err(|e| e.into_error())?.sync_all()?;
    Ok(())
}
