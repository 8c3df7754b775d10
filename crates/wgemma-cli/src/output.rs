//! What the CLI writes (`convert`'s artifact, `synth-checkpoint`'s directory) goes through a
//! fresh temporary name beside the output, created exclusively (`O_EXCL`: a file or symlink
//! planted at the name is never opened or followed; the name is random, not guessable from
//! the process id), and reaches the output's name only once complete, by a rename that
//! never replaces an existing output unless `--force` says so. An interrupted or failed
//! write leaves nothing that looks like an output.

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};

/// The directory an output goes into (`.` for a bare file name).
fn parent_of(out: &Path) -> &Path {
    match out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// The output's file name, for the temporary name's prefix.
fn name_of(out: &Path, flag: &str) -> Result<String> {
    Ok(out
        .file_name()
        .with_context(|| format!("{flag} {}: expected a file name", out.display()))?
        .to_string_lossy()
        .into_owned())
}

/// Refuses an existing `out` unless `force` (and a symlink even then: the rename would
/// replace the link, not what it points at, which is never what was meant).
pub fn check_new(out: &Path, force: bool, flag: &str) -> Result<()> {
    let Ok(meta) = out.symlink_metadata() else {
        return Ok(());
    };
    if meta.file_type().is_symlink() {
        bail!(
            "{flag} {}: expected a new path to write to, found a symbolic link (name its target \
             instead)",
            out.display()
        );
    }
    if !force {
        bail!(
            "{flag} {}: expected a path that does not exist yet, found {} (pass --force to \
             replace it)",
            out.display(),
            crate::files::describe_path(out)
        );
    }
    Ok(())
}

/// A file being written under a fresh temporary name beside its output.
pub struct NewFile {
    temp: tempfile::NamedTempFile,
    out: PathBuf,
    force: bool,
    flag: &'static str,
}

impl NewFile {
    /// Creates the temporary file (mode 0600, `O_EXCL`) beside `out`, after
    /// [`check_new`].
    pub fn create(out: &Path, force: bool, flag: &'static str) -> Result<NewFile> {
        check_new(out, force, flag)?;
        let dir = parent_of(out);
        let temp = tempfile::Builder::new()
            .prefix(&format!(".{}.partial-", name_of(out, flag)?))
            .tempfile_in(dir)
            .with_context(|| {
                format!(
                    "{flag} {}: creating a temporary file in {}",
                    out.display(),
                    dir.display()
                )
            })?;
        Ok(NewFile {
            temp,
            out: out.to_path_buf(),
            force,
            flag,
        })
    }

    /// The temporary file's path (removed if the write is abandoned).
    pub fn temp_path(&self) -> &Path {
        self.temp.path()
    }

    /// A handle to write through.
    pub fn writer(&self) -> Result<std::fs::File> {
        self.temp
            .as_file()
            .try_clone()
            .with_context(|| format!("opening {} for writing", self.temp.path().display()))
    }

    /// Syncs the data and moves it to the output's name: never over an existing output
    /// unless `--force` (an output that appeared since [`NewFile::create`] is refused too).
    pub fn commit(self) -> Result<u64> {
        let file = self.temp.as_file();
        file.sync_all()
            .with_context(|| format!("syncing {}", self.temp.path().display()))?;
        let bytes = file.metadata()?.len();
        let (out, flag) = (self.out, self.flag);
        let persisted = if self.force {
            self.temp.persist(&out)
        } else {
            self.temp.persist_noclobber(&out)
        };
        persisted.map_err(|e| {
            let why = if e.error.kind() == std::io::ErrorKind::AlreadyExists {
                "another program created it meanwhile (pass --force to replace it)".to_string()
            } else {
                e.error.to_string()
            };
            anyhow::anyhow!("{flag} {}: writing the output failed: {why}", out.display())
        })?;
        Ok(bytes)
    }
}

/// A directory being filled under a fresh temporary name beside its output (its files
/// written straight into it: nobody else can have a name there).
pub struct NewDir {
    temp: tempfile::TempDir,
    out: PathBuf,
}

impl NewDir {
    /// Creates the temporary directory (mode 0700) beside `out`; `out` must not exist
    /// ([`check_new`] without force).
    pub fn create(out: &Path, flag: &'static str) -> Result<NewDir> {
        check_new(out, false, flag)?;
        let dir = parent_of(out);
        std::fs::create_dir_all(dir)
            .with_context(|| format!("{flag} {}: creating {}", out.display(), dir.display()))?;
        let temp = tempfile::Builder::new()
            .prefix(&format!(".{}.partial-", name_of(out, flag)?))
            .tempdir_in(dir)
            .with_context(|| format!("{flag} {}: creating a temporary directory", out.display()))?;
        Ok(NewDir {
            temp,
            out: out.to_path_buf(),
        })
    }

    pub fn path(&self) -> &Path {
        self.temp.path()
    }

    /// Renames the finished directory to the output's name (a rename over an existing
    /// non-empty directory fails: nothing of another's is replaced).
    pub fn commit(self) -> Result<()> {
        let temp = self.temp.keep();
        std::fs::rename(&temp, &self.out).map_err(|e| {
            let _ = std::fs::remove_dir_all(&temp);
            anyhow::anyhow!("writing {} failed: {e}", self.out.display())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("wgemma-output-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn outputs_are_new_files_under_unguessable_names() {
        let d = scratch("file");
        let out = d.join("m.wgemma");
        let a = NewFile::create(&out, false, "--out").unwrap();
        let b = NewFile::create(&out, false, "--out").unwrap();
        assert_ne!(a.temp_path(), b.temp_path());
        let name = a
            .temp_path()
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        assert!(!name.contains(&std::process::id().to_string()), "{name}");
        assert!(name.starts_with(".m.wgemma.partial-"), "{name}");
        use std::io::Write;
        a.writer().unwrap().write_all(b"artifact").unwrap();
        assert_eq!(a.commit().unwrap(), 8);
        assert_eq!(std::fs::read(&out).unwrap(), b"artifact");
        // A second write to the same output is refused, and so is the one already under way.
        let err = NewFile::create(&out, false, "--out")
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("--force") && err.contains("m.wgemma"), "{err}");
        let err = b.commit().unwrap_err().to_string();
        assert!(err.contains("--force"), "{err}");
        assert_eq!(std::fs::read(&out).unwrap(), b"artifact");
        // --force replaces it.
        let c = NewFile::create(&out, true, "--out").unwrap();
        c.writer().unwrap().write_all(b"new").unwrap();
        c.commit().unwrap();
        assert_eq!(std::fs::read(&out).unwrap(), b"new");
        // Nothing temporary is left behind.
        assert_eq!(std::fs::read_dir(&d).unwrap().count(), 1);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    #[cfg(unix)]
    fn a_symlink_as_the_output_is_refused_even_with_force() {
        let d = scratch("link");
        let victim = d.join("victim");
        std::fs::write(&victim, b"keep").unwrap();
        let out = d.join("out.wgemma");
        std::os::unix::fs::symlink(&victim, &out).unwrap();
        for force in [false, true] {
            let err = NewFile::create(&out, force, "--out")
                .err()
                .unwrap()
                .to_string();
            assert!(err.contains("symbolic link"), "{err}");
        }
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn directories_appear_whole_and_never_over_another() {
        let d = scratch("dir");
        let out = d.join("ckpt");
        let new = NewDir::create(&out, "--out").unwrap();
        std::fs::write(new.path().join("config.json"), b"{}").unwrap();
        new.commit().unwrap();
        assert_eq!(std::fs::read(out.join("config.json")).unwrap(), b"{}");
        let err = NewDir::create(&out, "--out").err().unwrap().to_string();
        assert!(
            err.contains("--force") || err.contains("does not exist"),
            "{err}"
        );
        assert_eq!(std::fs::read_dir(&d).unwrap().count(), 1);
        std::fs::remove_dir_all(&d).unwrap();
    }
}
