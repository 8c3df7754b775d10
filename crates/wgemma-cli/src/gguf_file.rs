//! A llama.cpp GGUF file on disk: recognised by its magic, memory-mapped for the library
//! to parse from the map's bytes.

use anyhow::{Context, Result};
use std::path::Path;

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
    map: memmap2::Mmap,
}

impl GgufMap {
    pub fn open(path: &Path) -> Result<GgufMap> {
        crate::model_dir::check_regular_file(path, "--model")?;
        let file =
            std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
        // SAFETY: read-only map held for the load; a file changed underneath a running
        // process is outside what we can defend against.
        let map = unsafe { memmap2::Mmap::map(&file) }
            .with_context(|| format!("mapping {}", path.display()))?;
        Ok(GgufMap { map })
    }

    pub fn parse(&self, path: &Path) -> Result<wgemma::formats::gguf::GgufFile<'_>> {
        wgemma::formats::gguf::GgufFile::parse(&self.map)
            .with_context(|| format!("{}", path.display()))
    }

    pub fn release(&self, range: std::ops::Range<usize>) {
        crate::artifact_file::release_pages(&self.map, range);
    }

    /// The mapped bytes.
    pub fn mmap(&self) -> &memmap2::Mmap {
        &self.map
    }
}
