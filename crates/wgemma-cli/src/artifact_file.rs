//! A model artifact on disk: memory-mapped, parsed by the library from the map's bytes.
//! Pages the loader is done with are dropped from the map as it goes, so a load holds
//! neither a second copy of the weights nor the whole file's pages at once.

use anyhow::{Context, Result};
use std::ops::Range;
use std::path::Path;
use wgemma::formats::artifact::Artifact;

/// An opened artifact file.
pub struct ArtifactFile {
    map: memmap2::Mmap,
}

impl ArtifactFile {
    pub fn open(path: &Path) -> Result<ArtifactFile> {
        crate::model_dir::check_regular_file(path, "artifact")?;
        let file = std::fs::File::open(path)
            .with_context(|| format!("opening artifact {}", path.display()))?;
        // SAFETY: the map is read-only and lives as long as the ArtifactFile; a file changed
        // underneath a running process is outside what we can defend against (the
        // checksums catch a file changed before it was mapped).
        let map = unsafe { memmap2::Mmap::map(&file) }
            .with_context(|| format!("mapping {}", path.display()))?;
        Ok(ArtifactFile { map })
    }

    /// The parsed artifact, its contract checked (framing, version, tensors).
    pub fn parse(&self, path: &Path) -> Result<Artifact<'_>> {
        Artifact::parse(&self.map).with_context(|| format!("artifact {}", path.display()))
    }

    /// The mapped bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.map
    }

    /// Drops the pages of `range` from this process's memory (they stay in the page cache
    /// and fault back in if read again).
    pub fn release(&self, range: Range<usize>) {
        release_pages(&self.map, range);
    }
}

/// Drops the pages of `range` of a read-only file map from this process's memory (they
/// stay in the page cache and fault back in if read again).
pub fn release_pages(map: &memmap2::Mmap, range: Range<usize>) {
    let range = range.start.min(map.len())..range.end.min(map.len());
    if range.is_empty() {
        return;
    }
    // SAFETY: MADV_DONTNEED on a read-only shared file mapping only discards this
    // process's page-table entries: a later read faults the same file bytes back in.
    let _ = unsafe {
        map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, range.start, range.len())
    };
}

/// Whether `path` is an artifact file (else it must be a checkpoint directory; anything
/// else, a FIFO or a symlink loop, is refused by name when the directory is opened).
pub fn is_artifact(path: &Path) -> bool {
    path.is_file()
}

/// The host's memory in bytes (Linux `MemTotal`; None elsewhere), for the size checks
/// that run before a load allocates.
pub fn host_memory_bytes() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Peak resident set size of this process so far, in MiB (Linux `VmHWM`; None elsewhere).
pub fn peak_rss_mb() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}
