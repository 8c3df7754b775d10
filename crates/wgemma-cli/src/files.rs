//! The model files the CLI opens and hands the library as bytes (the library never touches
//! the filesystem): a Hugging Face checkpoint directory (config.json, the safetensors
//! shard(s), memory-mapped, with or without model.safetensors.index.json, tokenizer.json
//! and generation_config.json when present), a model artifact and a llama.cpp GGUF file.
//! Pages the loader is done with are dropped from a map as it goes, so a load holds
//! neither a second copy of the weights nor the whole file's pages at once.

use anyhow::{bail, Context, Result};
use std::ops::Range;
use std::path::Path;
use wgemma::formats::artifact::Artifact;
use wgemma::formats::mapped::MappedFile;
use wgemma::formats::printable::printable;

/// The files of one checkpoint directory, mapped.
pub struct ModelDir {
    pub config_json: String,
    pub shards: Vec<(String, MappedFile)>,
    pub tokenizer_json: Option<Vec<u8>>,
    pub generation_config: Option<serde_json::Value>,
    /// chat_template.jinja.
    pub chat_template: Option<String>,
    /// tokenizer_config.json (its chat_template and special tokens).
    pub tokenizer_config: Option<String>,
}

/// What is at `path` (symlinks followed), in words: "a directory", "a FIFO", "nothing",
/// "a symlink loop", ...
pub fn describe_path(path: &Path) -> String {
    match std::fs::metadata(path) {
        Ok(m) => describe_type(m.file_type()).to_string(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if path.symlink_metadata().is_ok() {
                "a dangling symlink".into()
            } else {
                "nothing".into()
            }
        }
        // ELOOP: a symlink that points (eventually) at itself.
        Err(e) if e.raw_os_error() == Some(40) => "a symlink loop".into(),
        Err(e) => format!("an unreadable path ({e})"),
    }
}

fn describe_type(t: std::fs::FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if t.is_fifo() {
            return "a FIFO (named pipe)";
        }
        if t.is_socket() {
            return "a socket";
        }
        if t.is_block_device() || t.is_char_device() {
            return "a device node";
        }
    }
    if t.is_dir() {
        "a directory"
    } else if t.is_file() {
        "a regular file"
    } else {
        "neither a file nor a directory"
    }
}

/// Errors unless `path` is a regular file (symlinks followed): opening a FIFO blocks
/// forever and mapping a directory fails with "No such device", so check first.
pub fn check_regular_file(path: &Path, what: &str) -> Result<()> {
    match std::fs::metadata(path) {
        Ok(m) if m.is_file() => Ok(()),
        _ => bail!(
            "{what} {}: expected a regular file, found {}",
            path.display(),
            describe_path(path)
        ),
    }
}

/// What a directory without config.json is, for `ModelDir::open`'s error: what it holds
/// that a `-m` could name instead (a model file, a checkpoint below it).
fn without_config(dir: &Path) -> String {
    let mut models: Vec<String> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| {
            let ext = p.extension().and_then(|e| e.to_str());
            (p.is_file() && matches!(ext, Some("gguf" | "wgemma")))
                || p.join("config.json").is_file()
        })
        .map(|p| printable(&p.display().to_string()).into_owned())
        .collect();
    models.sort();
    let instead = match models.as_slice() {
        [] => String::new(),
        [one] => format!("; it holds {one}: pass that"),
        many => format!("; it holds {}: pass one of them", many.join(", ")),
    };
    format!(
        "{}: expected a Hugging Face checkpoint directory (config.json + *.safetensors) or a \
         model file, found a directory without config.json{instead}",
        printable(&dir.display().to_string())
    )
}

impl ModelDir {
    pub fn open(path: &Path) -> Result<ModelDir> {
        if !path.is_dir() {
            bail!(
                "--model {}: expected a Hugging Face checkpoint directory (config.json + *.safetensors), found {}",
                path.display(),
                describe_path(path)
            );
        }
        let config_path = path.join("config.json");
        if config_path.symlink_metadata().is_err() {
            bail!("{}", without_config(path));
        }
        check_regular_file(&config_path, "config")?;
        let config_json = std::fs::read_to_string(&config_path)
            .with_context(|| format!("reading {}", config_path.display()))?;
        let shard_names = shard_names(path)?;
        let roots = allowed_roots(path)?;
        let mut shards = Vec::with_capacity(shard_names.len());
        for name in shard_names {
            let file_path = path.join(&name);
            check_regular_file(&file_path, "shard")?;
            check_confined(&file_path, &roots)?;
            // A shard cut while it is read is an error, not SIGBUS (`check_intact`).
            let map = MappedFile::open(&file_path)
                .with_context(|| format!("opening shard {}", file_path.display()))?;
            shards.push((name, map));
        }
        let tokenizer_json = read_optional(&path.join("tokenizer.json"))?;
        let generation_config =
            match read_optional(&path.join("generation_config.json"))? {
                Some(bytes) => Some(serde_json::from_slice(&bytes).with_context(|| {
                    format!("parsing {}/generation_config.json", path.display())
                })?),
                None => None,
            };
        let text = |name: &str| -> Result<Option<String>> {
            read_optional(&path.join(name))?
                .map(|bytes| {
                    String::from_utf8(bytes)
                        .with_context(|| format!("{}/{name}: expected UTF-8 text", path.display()))
                })
                .transpose()
        };
        Ok(ModelDir {
            config_json,
            shards,
            tokenizer_json,
            generation_config,
            chat_template: text("chat_template.jinja")?,
            tokenizer_config: text("tokenizer_config.json")?,
        })
    }

    /// `(file name, bytes)` of every shard, for `Checkpoint::from_shards`.
    pub fn shard_bytes(&self) -> Vec<(String, &[u8])> {
        self.shards
            .iter()
            .map(|(n, m)| (n.clone(), m.bytes()))
            .collect()
    }

    /// Drops the pages of `range` of shard `shard` from this process (a load is done with
    /// them; they stay in the page cache).
    pub fn release(&self, shard: usize, range: Range<usize>) {
        if let Some((_, map)) = self.shards.get(shard) {
            map.release(range);
        }
    }

    /// Fails when a shard was cut while it was read (what was read may be zeros).
    pub fn check_intact(&self) -> Result<()> {
        for (_, map) in &self.shards {
            map.check_intact()?;
        }
        Ok(())
    }
}

/// A shard name from the index must be a plain relative path inside the directory: an
/// absolute path or `..` would make a downloaded checkpoint open (and `convert` record)
/// any file of the host.
fn check_shard_name(name: &str, index_path: &Path) -> Result<()> {
    use std::path::Component;
    let plain = !name.is_empty()
        && Path::new(name)
            .components()
            .all(|c| matches!(c, Component::Normal(_)));
    if !plain {
        bail!(
            "{}: expected shard file names inside the checkpoint directory, found {name:?}",
            index_path.display()
        );
    }
    Ok(())
}

/// Where a checkpoint's files may resolve to (symlinks followed): the directory itself,
/// and for a Hugging Face hub cache snapshot (`<repo>/snapshots/<rev>/`, whose files are
/// symlinks into `<repo>/blobs/`) that repository's blobs.
fn allowed_roots(dir: &Path) -> Result<Vec<std::path::PathBuf>> {
    let root = dir
        .canonicalize()
        .with_context(|| format!("resolving {}", dir.display()))?;
    let mut roots = vec![root.clone()];
    if let Some(snapshots) = root.parent() {
        if snapshots.file_name().is_some_and(|n| n == "snapshots") {
            if let Some(blobs) = snapshots.parent().map(|r| r.join("blobs")) {
                if let Ok(blobs) = blobs.canonicalize() {
                    roots.push(blobs);
                }
            }
        }
    }
    Ok(roots)
}

/// Refuses a file that resolves (through symlinks) outside `roots`.
fn check_confined(path: &Path, roots: &[std::path::PathBuf]) -> Result<()> {
    let real = path
        .canonicalize()
        .with_context(|| format!("resolving {}", path.display()))?;
    if roots.iter().any(|r| real.starts_with(r)) {
        return Ok(());
    }
    bail!(
        "shard {}: expected a file inside the checkpoint directory {} (symlinks followed), \
         found one resolving to {}",
        path.display(),
        roots[0].display(),
        real.display()
    )
}

fn read_optional(path: &Path) -> Result<Option<Vec<u8>>> {
    if path.symlink_metadata().is_ok() {
        check_regular_file(path, "optional file")?;
    }
    match std::fs::read(path) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

/// Shard file names: from model.safetensors.index.json's weight_map when present, else
/// every *.safetensors file in the directory.
fn shard_names(dir: &Path) -> Result<Vec<String>> {
    let index_path = dir.join("model.safetensors.index.json");
    if index_path.exists() {
        check_regular_file(&index_path, "shard index")?;
        let index: serde_json::Value = serde_json::from_slice(&std::fs::read(&index_path)?)
            .with_context(|| format!("parsing {}", index_path.display()))?;
        let map = index
            .get("weight_map")
            .and_then(|m| m.as_object())
            .with_context(|| {
                format!("{}: expected a \"weight_map\" object", index_path.display())
            })?;
        let mut names: Vec<String> = map
            .values()
            .filter_map(|v| v.as_str().map(String::from))
            .collect();
        names.sort();
        names.dedup();
        for n in &names {
            check_shard_name(n, &index_path)?;
            if !dir.join(n).is_file() {
                bail!(
                    "{} names shard {n}, which is missing from {}",
                    index_path.display(),
                    dir.display()
                );
            }
        }
        return Ok(names);
    }
    let mut names: Vec<String> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".safetensors"))
        .collect();
    names.sort();
    if names.is_empty() {
        bail!(
            "{}: expected at least one *.safetensors file, found none",
            dir.display()
        );
    }
    Ok(names)
}

/// An opened artifact file.
pub struct ArtifactFile {
    map: MappedFile,
}

impl ArtifactFile {
    pub fn open(path: &Path) -> Result<ArtifactFile> {
        check_regular_file(path, "artifact")?;
        check_looks_like_artifact(path)?;
        // The checksums catch a file changed before it was mapped; one cut while it is
        // read is an error, not SIGBUS (`check_intact`).
        let map = MappedFile::open(path)
            .with_context(|| format!("opening artifact {}", path.display()))?;
        Ok(ArtifactFile { map })
    }

    /// The parsed artifact, its contract checked (framing, version, tensors).
    pub fn parse(&self, path: &Path) -> Result<Artifact<'_>> {
        Artifact::parse(self.map.bytes()).with_context(|| format!("artifact {}", path.display()))
    }

    /// The mapped bytes.
    pub fn bytes(&self) -> &[u8] {
        self.map.bytes()
    }

    /// Drops the pages of `range` from this process's memory (they stay in the page cache
    /// and fault back in if read again).
    pub fn release(&self, range: Range<usize>) {
        self.map.release(range);
    }

    /// Fails when the file was cut while it was read.
    pub fn check_intact(&self) -> Result<()> {
        Ok(self.map.check_intact()?)
    }
}

/// Refuses a file that is no model file at all (a README, a tokenizer.json) with what it
/// is, before the artifact parser would report a bad safetensors header. An artifact is a
/// safetensors file: an 8-byte header length, then its JSON header (`{`). A file that
/// starts so but is cut or malformed is the parser's to name.
fn check_looks_like_artifact(path: &Path) -> Result<()> {
    let mut head = [0u8; 16];
    let n = std::fs::File::open(path)
        .and_then(|mut f| std::io::Read::read(&mut f, &mut head))
        .with_context(|| format!("reading {}", path.display()))?;
    if n > 8 && head[8] != b'{' {
        let start = String::from_utf8_lossy(&head[..n]);
        // A file of a checkpoint (its config.json): the directory is what loads.
        let dir = path.parent().map(|d| match d.as_os_str().is_empty() {
            true => Path::new("."),
            false => d,
        });
        let instead = dir
            .filter(|d| d.join("config.json").is_file())
            .map(|d| {
                format!(
                    "; it lies in checkpoint directory {}: pass that",
                    d.display()
                )
            })
            .unwrap_or_default();
        bail!(
            "{}: expected a model artifact (`wgemma convert`'s output) or a llama.cpp GGUF \
             file (or a checkpoint directory), found a file that is neither (it starts \"{}\"){}",
            printable(&path.display().to_string()),
            printable(&start),
            printable(&instead)
        );
    }
    Ok(())
}

/// Whether `path` is an artifact file (else it must be a checkpoint directory; anything
/// else, a FIFO or a symlink loop, is refused by name when the directory is opened).
pub fn is_artifact(path: &Path) -> bool {
    path.is_file()
}

/// Whether `path` is a regular file that starts with GGUF's magic.
pub fn is_gguf(path: &Path) -> bool {
    use std::io::Read;
    let mut magic = [0u8; 4];
    path.is_file()
        && std::fs::File::open(path)
            .and_then(|mut f| f.read_exact(&mut magic))
            .is_ok()
        && wgemma::formats::gguf::is_gguf(&magic)
}

/// A GGUF file, memory-mapped.
pub struct GgufMap {
    map: MappedFile,
}

impl GgufMap {
    pub fn open(path: &Path) -> Result<GgufMap> {
        check_regular_file(path, "--model")?;
        // A file cut while it is read is an error, not SIGBUS (`check_intact`).
        let map = MappedFile::open(path).with_context(|| format!("opening {}", path.display()))?;
        Ok(GgufMap { map })
    }

    pub fn parse(&self, path: &Path) -> Result<wgemma::formats::gguf::GgufFile<'_>> {
        wgemma::formats::gguf::GgufFile::parse(self.map.bytes())
            .with_context(|| format!("{}", path.display()))
    }

    pub fn release(&self, range: Range<usize>) {
        self.map.release(range);
    }

    /// The mapped bytes.
    pub fn bytes(&self) -> &[u8] {
        self.map.bytes()
    }

    /// Fails when the file was cut while it was read.
    pub fn check_intact(&self) -> Result<()> {
        Ok(self.map.check_intact()?)
    }
}
