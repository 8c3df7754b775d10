//! The shader registry, generated at build time by `build.rs` from `src/ops/**/*.wgsl`.

/// One `@compute` entry point of a registered shader.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntryPoint {
    pub name: &'static str,
    pub workgroup_size: [u32; 3],
}

/// One WGSL shader file compiled into the library.
#[derive(Debug, Clone, Copy)]
pub struct ShaderEntry {
    /// File stem, unique across operator folders (e.g. `q4_linear_m1`).
    pub name: &'static str,
    /// Path relative to the library crate (e.g. `src/ops/q4_linear/q4_linear_m1.wgsl`).
    pub path: &'static str,
    /// The WGSL text, `#include` lines expanded.
    pub source: &'static str,
    /// Hex SHA-256 of `source`.
    pub hash: &'static str,
    pub entry_points: &'static [EntryPoint],
}

include!(concat!(env!("OUT_DIR"), "/shader_registry.rs"));

/// Looks a shader up by name.
pub fn shader(name: &str) -> Option<&'static ShaderEntry> {
    SHADERS.iter().find(|s| s.name == name)
}

impl ShaderEntry {
    /// The single entry point's workgroup size, or the named one's.
    pub fn workgroup_size(&self, entry: &str) -> Option<[u32; 3]> {
        self.entry_points
            .iter()
            .find(|e| e.name == entry)
            .map(|e| e.workgroup_size)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::shader_meta;
    use std::path::{Path, PathBuf};

    fn wgsl_files(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                wgsl_files(&path, out);
            } else if path.extension().is_some_and(|e| e == "wgsl") {
                out.push(path);
            }
        }
    }

    /// Fails when a shader on disk was added, removed or edited and the compiled-in
    /// registry was not regenerated (e.g. a missing rerun-if-changed). The entries build.rs
    /// generates from a Rust table (their path is not a `.wgsl` file) are checked by the
    /// table's op (`ops/linear/tests/registry.rs`): the registry sits below the ops and
    /// does not read their tables.
    #[test]
    fn registry_is_not_stale() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut files = Vec::new();
        wgsl_files(&root.join("src/ops"), &mut files);
        let generated = SHADERS
            .iter()
            .filter(|s| !s.path.ends_with(".wgsl"))
            .count();
        assert_eq!(
            files.len() + generated,
            SHADERS.len(),
            "shader files on disk (+ the generated entries) and registry entries differ"
        );
        for path in files {
            let name = path.file_stem().unwrap().to_str().unwrap();
            let entry = shader(name).unwrap_or_else(|| panic!("{name} missing from registry"));
            let source = shader_meta::read_expanded(&path).unwrap();
            assert_eq!(
                entry.hash,
                shader_meta::content_hash(&source),
                "{name}: registry hash is stale"
            );
            assert_eq!(entry.source, source, "{name}: registry source is stale");
            let entries = shader_meta::compute_entries(&source).unwrap();
            assert_eq!(entries.len(), entry.entry_points.len());
        }
    }

    /// Every registered shader passes naga's WGSL front end and validator.
    #[test]
    fn every_shader_validates_with_naga() {
        for entry in SHADERS {
            let module = naga::front::wgsl::parse_str(entry.source)
                .unwrap_or_else(|e| panic!("{}: {}", entry.path, e.emit_to_string(entry.source)));
            naga::valid::Validator::new(
                naga::valid::ValidationFlags::all(),
                naga::valid::Capabilities::all(),
            )
            .validate(&module)
            .unwrap_or_else(|e| panic!("{}: {e:?}", entry.path));
            for ep in entry.entry_points {
                let naga_ep = module
                    .entry_points
                    .iter()
                    .find(|e| e.name == ep.name)
                    .unwrap_or_else(|| panic!("{}: no entry point {}", entry.path, ep.name));
                // Overrides resolve to 0 in naga's unprocessed module; only check literals.
                if naga_ep.workgroup_size_overrides.is_none() {
                    assert_eq!(naga_ep.workgroup_size, ep.workgroup_size, "{}", entry.path);
                }
            }
        }
    }
}
