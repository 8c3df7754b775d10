//! `wgemma inspect FILE`: an artifact's manifest, sizes, census and tensor table, its
//! contract checked and (unless `--no-verify`) every checksum verified; a GGUF file goes to
//! [`gguf`].

mod gguf;

use crate::files::ArtifactFile;
use crate::progress::bytes_bar;
use anyhow::Result;
use clap::Args;
use std::io::Write;
use std::path::PathBuf;
use wgemma::formats::artifact::Artifact;
use wgemma::formats::printable::printable;

#[derive(Args)]
pub struct InspectArgs {
    /// The artifact file, or a llama.cpp GGUF file.
    file: PathBuf,
    /// One JSON object: manifest, file size, tensor table, verification.
    #[arg(long)]
    json: bool,
    /// Skip the checksums (the structure is still checked).
    #[arg(long)]
    no_verify: bool,
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1 << 20) as f64)
}

fn model_line(config: &serde_json::Value) -> String {
    let c = config.get("text_config").unwrap_or(config);
    let get = |k: &str| c.get(k).map_or("?".to_string(), |v| v.to_string());
    format!(
        "{} layers, hidden {}, vocab {}",
        get("num_hidden_layers"),
        get("hidden_size"),
        get("vocab_size")
    )
}

pub fn run(args: InspectArgs) -> Result<()> {
    crate::args::check_exists_as("inspect", &args.file, "an artifact or a GGUF file")?;
    if crate::files::is_gguf(&args.file) {
        return gguf::run(&args.file, args.json);
    }
    let file = ArtifactFile::open(&args.file)?;
    let artifact = file.parse(&args.file)?;
    let verify_ms = if args.no_verify {
        None
    } else {
        let t = std::time::Instant::now();
        let bar = bytes_bar(0, "verifying");
        artifact.verify_all(&mut |done, total| {
            bar.set_length(total);
            bar.set_position(done);
        })?;
        bar.finish_and_clear();
        Some(t.elapsed().as_secs_f64() * 1e3)
    };
    if args.json {
        let out = serde_json::json!({
            "file": args.file.display().to_string(),
            "file_bytes": artifact.bytes().len(),
            "manifest": artifact.manifest(),
            "tensors": artifact.tensor_table(),
            "verified": verify_ms.is_some(),
            "verify_ms": verify_ms,
        });
        println!("{out}");
        return Ok(());
    }
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    match print_text(&mut out, &args, &artifact, verify_ms).and_then(|_| out.flush()) {
        // `wgemma inspect FILE | head` closes the pipe early: not an error.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => Ok(other?),
    }
}

fn print_text(
    out: &mut impl Write,
    args: &InspectArgs,
    artifact: &Artifact<'_>,
    verify_ms: Option<f64>,
) -> std::io::Result<()> {
    let m = artifact.manifest();
    let table = artifact.tensor_table();
    let weights: u64 = table.iter().map(|t| t.bytes as u64).sum();
    writeln!(out, "{}", printable(&args.file.display().to_string()))?;
    writeln!(
        out,
        "  format       {} version {} (written by {})",
        printable(&m.format),
        m.version,
        printable(&m.producer)
    )?;
    writeln!(out, "  quant        {}", m.quant.describe())?;
    writeln!(
        out,
        "  file         {} ({} tensors, {} of data)",
        mib(artifact.bytes().len() as u64),
        table.len(),
        mib(weights)
    )?;
    writeln!(
        out,
        "  target       {}{}",
        model_line(&m.target.config),
        if m.target.tokenizer {
            ", tokenizer"
        } else {
            ""
        }
    )?;
    match &m.assistant {
        Some(a) => writeln!(out, "  assistant    {}", model_line(&a.config)),
        None => writeln!(out, "  assistant    none"),
    }?;
    match verify_ms {
        Some(ms) => writeln!(
            out,
            "  checksums    ok: XXH3-128 of {} tensors in {ms:.0} ms",
            table.len()
        ),
        None => writeln!(out, "  checksums    not verified (--no-verify)"),
    }?;
    writeln!(out, "  sources")?;
    for s in &m.sources {
        writeln!(
            out,
            "    {:<9} {:<28} {:>12} bytes  sha256 {}",
            printable(&s.model),
            printable(&s.file),
            s.bytes,
            printable(&s.sha256)
        )?;
    }
    writeln!(
        out,
        "  census (routes needed at these shapes; mtp = only with the assistant)"
    )?;
    for r in &m.census {
        let rows = if r.rows > 0 {
            format!("M = {}", r.rows)
        } else {
            String::new()
        };
        let shapes: Vec<String> = r.shapes.iter().map(|[n, k]| format!("{n}x{k}")).collect();
        writeln!(
            out,
            "    {:<9} {:<34} {:<7} {}{}",
            printable(&r.model),
            printable(&r.id()),
            rows,
            shapes.join(" "),
            if r.mtp { "  [mtp]" } else { "" }
        )?;
    }
    writeln!(out, "  tensors")?;
    for t in &table {
        writeln!(
            out,
            "    {:>12}  {:<4} {:<22} {:>11}  {}",
            t.offset,
            t.dtype,
            format!("{:?}", t.shape),
            t.bytes,
            printable(&t.name)
        )?;
    }
    Ok(())
}
