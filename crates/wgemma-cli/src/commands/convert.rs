//! `wgemma convert`: a checkpoint directory or a llama.cpp GGUF file (and its assistant, a
//! directory or a gemma4-assistant GGUF) into one artifact file,
//! written under a fresh temporary name beside the output and renamed to it only once
//! complete ([`crate::output`]), never over an existing file without `--force` and never
//! into a checkpoint's own directory.

use crate::files::{is_gguf, GgufMap, ModelDir};
use crate::output::NewFile;
use crate::progress::bytes_bar;
use anyhow::{bail, Context, Result};
use clap::Args;
use std::path::{Path, PathBuf};
use wgemma::formats::artifact::{convert, ConvertInput, ConvertWeights, SourceFile};
use wgemma::formats::gguf::GgufFile;
use wgemma::formats::hf::Checkpoint;
use wgemma::model::weights::WeightFormat;

#[derive(Args)]
pub struct ConvertArgs {
    /// The target: a Hugging Face checkpoint directory or a llama.cpp GGUF file (gemma4).
    #[arg(short = 'm', long, value_name = "DIR|FILE.gguf")]
    model: PathBuf,
    /// Its MTP assistant (a checkpoint directory or a gemma4-assistant GGUF file), stored in
    /// the same artifact.
    #[arg(long, value_name = "DIR|FILE.gguf")]
    assistant: Option<PathBuf>,
    /// The artifact file to write (a new path, outside the checkpoints read).
    #[arg(short = 'o', long, value_name = "FILE")]
    out: PathBuf,
    /// Replace --out if it exists.
    #[arg(long)]
    force: bool,
    /// Weight format: q4, f16 or f32. Default: q4 for a checkpoint; a GGUF file keeps its
    /// own ggml types (Q8_0, Q4_K, Q5_K, Q6_K, ...) as stored, float matrices in q4.
    #[arg(long, value_parser = ["q4", "f16", "f32"])]
    quant: Option<String>,
    /// Q4 group size (default 32; only with --quant q4).
    #[arg(long, value_parser = parse_group)]
    group_size: Option<usize>,
}

fn parse_group(s: &str) -> Result<usize, String> {
    match s {
        "32" | "64" | "128" => Ok(s.parse().expect("listed values parse")),
        other => Err(format!("expected 32, 64 or 128, found {other}")),
    }
}

/// Bytes of output between drops of the source pages while converting.
const RELEASE_EVERY: u64 = 128 << 20;

/// Bytes hashed between page releases.
const HASH_PIECE: usize = 64 << 20;

/// SHA-256 of one mapped file, a piece at a time, each piece's pages dropped after it.
fn hash_file(
    model: &str,
    name: &str,
    map: &[u8],
    release: impl Fn(std::ops::Range<usize>),
) -> SourceFile {
    let pieces = (0..map.len()).step_by(HASH_PIECE).map(|start| {
        let range = start..(start + HASH_PIECE).min(map.len());
        // The previous piece is hashed by now.
        release(start.saturating_sub(HASH_PIECE)..start);
        &map[range]
    });
    let file = SourceFile::hash_pieces(model, name, pieces);
    release(0..map.len());
    file
}

/// SHA-256 of every file of a checkpoint directory (shards hashed on parallel threads).
fn hash_sources(model: &str, dir: &ModelDir, extra: &[(&str, &[u8])]) -> Vec<SourceFile> {
    let mut out: Vec<SourceFile> = extra
        .iter()
        .map(|(name, bytes)| SourceFile::hash(model, name, bytes))
        .collect();
    std::thread::scope(|s| {
        let handles: Vec<_> = dir
            .shards
            .iter()
            .map(|(name, map)| {
                s.spawn(move || hash_file(model, name, map.bytes(), |r| map.release(r)))
            })
            .collect();
        out.extend(
            handles
                .into_iter()
                .map(|h| h.join().expect("hashing thread")),
        );
    });
    out
}

/// One input of the conversion, mapped: a checkpoint directory or a llama.cpp GGUF file.
enum Opened {
    Dir(ModelDir),
    Gguf { map: GgufMap, name: String },
}

impl Opened {
    fn open(path: &Path) -> Result<Opened> {
        if is_gguf(path) {
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            return Ok(Opened::Gguf {
                map: GgufMap::open(path)?,
                name,
            });
        }
        Ok(Opened::Dir(ModelDir::open(path)?))
    }

    /// Drops every mapped page of the input from this process.
    /// Fails when an input file was cut while it was read.
    fn check_intact(&self) -> Result<()> {
        match self {
            Opened::Dir(dir) => dir.check_intact(),
            Opened::Gguf { map, .. } => map.check_intact(),
        }
    }

    fn release_all(&self) {
        match self {
            Opened::Dir(dir) => {
                for (_, map) in &dir.shards {
                    map.release(0..map.bytes().len());
                }
            }
            Opened::Gguf { map, .. } => map.release(0..map.bytes().len()),
        }
    }
}

/// What the converter reads of an opened input. A GGUF file's config, tokenizer and EOS
/// ids come from its metadata (its chat template is not kept: artifacts store none).
struct Parsed<'a> {
    checkpoint: Option<Checkpoint<'a>>,
    gguf: Option<GgufFile<'a>>,
    config_json: String,
    tokenizer_json: Option<std::borrow::Cow<'a, [u8]>>,
    generation_config: Option<serde_json::Value>,
    sources: Vec<SourceFile>,
}

impl<'a> Parsed<'a> {
    fn new(o: &'a Opened, path: &Path, model: &str) -> Result<Parsed<'a>> {
        let described = || format!("{}", path.display());
        match o {
            Opened::Dir(dir) => {
                let mut extra: Vec<(&str, &[u8])> =
                    vec![("config.json", dir.config_json.as_bytes())];
                if let Some(t) = &dir.tokenizer_json {
                    extra.push(("tokenizer.json", t));
                }
                Ok(Parsed {
                    checkpoint: Some(
                        Checkpoint::from_shards(dir.shard_bytes())
                            .with_context(|| format!("reading {}", path.display()))?,
                    ),
                    gguf: None,
                    config_json: dir.config_json.clone(),
                    tokenizer_json: dir.tokenizer_json.as_deref().map(Into::into),
                    generation_config: dir.generation_config.clone(),
                    sources: hash_sources(model, dir, &extra),
                })
            }
            Opened::Gguf { map, name } => {
                let file = map.parse(path)?;
                let (config_json, tokenizer_json, generation_config) = if model == "assistant" {
                    let config = wgemma::formats::gguf::assistant_config_json(&file)
                        .with_context(described)?;
                    (config, None, None)
                } else {
                    let config =
                        wgemma::formats::gguf::config_json(&file).with_context(described)?;
                    let tokenizer = wgemma::formats::gguf::tokenizer::tokenizer_json(&file)
                        .with_context(|| format!("the tokenizer metadata of {}", described()))?;
                    let eos = wgemma::formats::gguf::eos_ids(&file);
                    let generation =
                        (!eos.is_empty()).then(|| serde_json::json!({ "eos_token_id": eos }));
                    (config, tokenizer.map(|t| t.into_bytes().into()), generation)
                };
                Ok(Parsed {
                    checkpoint: None,
                    sources: vec![hash_file(model, name, map.bytes(), |r| map.release(r))],
                    gguf: Some(file),
                    config_json,
                    tokenizer_json,
                    generation_config,
                })
            }
        }
    }

    /// The input; `native`: a GGUF file's ggml types are stored as they are.
    fn input(&'a self, native: bool) -> ConvertInput<'a> {
        let weights = match (&self.checkpoint, &self.gguf) {
            (Some(ck), _) => ConvertWeights::Checkpoint(ck),
            (None, Some(file)) if native => ConvertWeights::GgufNative(file),
            (None, Some(file)) => ConvertWeights::Gguf(file),
            (None, None) => unreachable!("Parsed::new sets one of the two"),
        };
        ConvertInput {
            config_json: &self.config_json,
            weights,
            generation_config: self.generation_config.clone(),
            tokenizer_json: self.tokenizer_json.as_deref(),
            sources: self.sources.clone(),
        }
    }
}

/// (device, inode) of a file, to recognise one file under two names.
#[cfg(unix)]
fn file_id(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

#[cfg(not(unix))]
fn file_id(path: &Path) -> Option<std::path::PathBuf> {
    std::fs::canonicalize(path).ok()
}

/// Refuses an `--out` that would destroy an input or something that is not a file: an
/// existing path must be a regular file that is none of the checkpoints' files (renaming
/// over `d/model.safetensors` destroyed the input; over `/dev/full`, the device node),
/// and a new `*.safetensors` inside a checkpoint directory would become one of its shards.
fn check_out(out: &Path, inputs: &[&Path]) -> Result<()> {
    if out.symlink_metadata().is_ok() {
        let kind = crate::files::describe_path(out);
        if kind != "a regular file" {
            bail!(
                "--out {}: expected a new or regular file to write the artifact to, found {kind}",
                out.display()
            );
        }
    }
    let out_id = file_id(out);
    let out_dir = out
        .parent()
        .map(|p| {
            if p.as_os_str().is_empty() {
                Path::new(".")
            } else {
                p
            }
        })
        .and_then(|p| std::fs::canonicalize(p).ok());
    for dir in inputs {
        if dir.is_file() {
            // A GGUF file: only the file itself can be destroyed.
            if out_id.is_some() && file_id(dir) == out_id {
                bail!(
                    "--out {}: expected a path that is not an input, found the input file {} \
                     (converting would destroy it)",
                    out.display(),
                    dir.display()
                );
            }
            continue;
        }
        let canonical_dir = std::fs::canonicalize(dir).ok();
        if out_id.is_some() {
            for entry in std::fs::read_dir(dir)?.filter_map(|e| e.ok()) {
                if file_id(&entry.path()) == out_id {
                    bail!(
                        "--out {}: expected a path that is not an input, found the checkpoint's \
                         own file {} (converting would destroy it)",
                        out.display(),
                        entry.path().display()
                    );
                }
            }
        }
        if out_dir.is_some() && out_dir == canonical_dir {
            bail!(
                "--out {}: expected a path outside the checkpoint directory {}, found one inside \
                 it (a file written there is read as the checkpoint's own: a *.safetensors as \
                 one of its shards, model.safetensors.index.json, tokenizer.json or \
                 generation_config.json in place of its own)",
                out.display(),
                dir.display()
            );
        }
    }
    Ok(())
}

pub fn run(args: ConvertArgs) -> Result<()> {
    let quant = args.quant.as_deref().unwrap_or("q4");
    let format = match (quant, args.group_size) {
        ("q4", group) => WeightFormat::Q4 {
            group: group.unwrap_or(32),
        },
        (other, Some(group)) => bail!(
            "--group-size {group}: expected only with --quant q4 (Q4's group), found --quant {other}"
        ),
        ("f16", None) => WeightFormat::F16,
        ("f32", None) => WeightFormat::F32,
        (other, None) => bail!("--quant: expected q4, f16 or f32, found {other}"),
    };
    let start = std::time::Instant::now();
    let target = Opened::open(&args.model)?;
    let assistant = args.assistant.as_deref().map(Opened::open).transpose()?;
    let mut inputs = vec![args.model.as_path()];
    inputs.extend(args.assistant.as_deref());
    check_out(&args.out, &inputs)?;
    let tparsed = Parsed::new(&target, &args.model, "target")?;
    let aparsed = assistant
        .as_ref()
        .zip(args.assistant.as_deref())
        .map(|(a, path)| Parsed::new(a, path, "assistant"))
        .transpose()?;
    // No --quant: a GGUF file keeps its own types.
    let native = args.quant.is_none();
    let tin = tparsed.input(native);
    let ain = aparsed.as_ref().map(|a| a.input(native));

    // Written under a fresh exclusive name beside the output (same filesystem, so the
    // rename is atomic), removed on any failure: an interrupted convert leaves no file
    // that looks like an artifact, and nothing planted at a guessable name is followed.
    let output = NewFile::create(&args.out, args.force, "--out")?;
    // Ctrl-C (or SIGTERM) while writing removes the temporary file before exiting.
    let interrupt_guard = crate::signals::RemoveOnInterrupt::new(output.temp_path());
    let result = (|| -> Result<u64> {
        let file = output.writer()?;
        let bar = bytes_bar(0, "converting");
        let mut released_at = 0u64;
        let sink = convert(
            std::io::BufWriter::with_capacity(8 << 20, file),
            &tin,
            ain.as_ref(),
            format,
            &mut |done, total| {
                bar.set_length(total);
                bar.set_position(done);
                // The converter is done with the source rows it has written: every
                // RELEASE_EVERY bytes of output, drop the pages of every shard (rows read
                // again fault back in from the page cache).
                if done >= released_at + RELEASE_EVERY || done == total {
                    released_at = done;
                    for o in [Some(&target), assistant.as_ref()].into_iter().flatten() {
                        o.release_all();
                    }
                }
            },
        )?;
        bar.finish_and_clear();
        sink.into_inner().map_err(|e| e.into_error())?;
        for o in [Some(&target), assistant.as_ref()].into_iter().flatten() {
            o.check_intact()?;
        }
        output.commit()
    })();
    drop(interrupt_guard);
    match result {
        Ok(bytes) => {
            eprintln!(
                "wrote {} ({:.1} MiB, {}{}) in {:.1} s",
                args.out.display(),
                bytes as f64 / (1 << 20) as f64,
                match (&tparsed.gguf, native) {
                    (Some(_), true) => "the file's ggml types as stored, float matrices q4",
                    _ => quant,
                },
                match format {
                    WeightFormat::Q4 { group } => format!(" group {group}"),
                    _ => String::new(),
                },
                start.elapsed().as_secs_f64()
            );
            Ok(())
        }
        // The temporary file went with `output`.
        Err(e) => Err(e),
    }
}
