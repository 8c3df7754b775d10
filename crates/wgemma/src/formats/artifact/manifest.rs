//! The manifest: a JSON document in the safetensors header's `__metadata__` under
//! [`MANIFEST_KEY`]. The tensor table itself (name, dtype, shape, byte offsets) is the
//! safetensors header's own: one source of truth, checked against the plan at load.

use super::census::CensusRoute;
use crate::error::{Error, Result};
use crate::model::weights::WeightFormat;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// `__metadata__` key holding the manifest JSON.
pub const MANIFEST_KEY: &str = "wgemma.manifest";
/// `format` of every wgemma artifact.
pub const FORMAT_NAME: &str = "wgemma-artifact";
/// The manifest/layout version this build writes and reads. Bump it whenever the meaning
/// of a stored tensor or manifest field changes: a reader refuses every other version.
/// Version 2: the header carries its own checksum ([`super::writer::HEADER_CHECKSUM_KEY`]).
pub const FORMAT_VERSION: u32 = 2;
/// Name of the U8 tensor holding a model's tokenizer.json (`target.` / `assistant.`).
pub const TOKENIZER_TENSOR: &str = "tokenizer.json";
pub const TARGET_PREFIX: &str = "target.";
pub const ASSISTANT_PREFIX: &str = "assistant.";

/// The quantisation scheme of every weight matrix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "scheme", rename_all = "lowercase", deny_unknown_fields)]
pub enum Quant {
    F32,
    F16,
    /// The project's group-wise symmetric Q4 ([`crate::ops::linear::quant`]).
    Q4 {
        group_size: usize,
    },
}

impl Quant {
    pub fn of(format: WeightFormat) -> Quant {
        match format {
            WeightFormat::F32 => Quant::F32,
            WeightFormat::F16 => Quant::F16,
            WeightFormat::Q4 { group } => Quant::Q4 { group_size: group },
        }
    }

    pub fn format(self) -> WeightFormat {
        match self {
            Quant::F32 => WeightFormat::F32,
            Quant::F16 => WeightFormat::F16,
            Quant::Q4 { group_size } => WeightFormat::Q4 { group: group_size },
        }
    }

    /// `q4 (group 32)`, `f16`, `f32`.
    pub fn describe(self) -> String {
        match self {
            Quant::Q4 { group_size } => format!("q4 (group {group_size})"),
            Quant::F16 => "f16".into(),
            Quant::F32 => "f32".into(),
        }
    }
}

/// One model (target or assistant) of an artifact.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelEntry {
    /// The checkpoint's `config.json`, as it was.
    pub config: serde_json::Value,
    /// `generation_config.json`, when the checkpoint had one.
    pub generation_config: Option<serde_json::Value>,
    /// Whether the tokenizer.json is stored (tensor `<prefix>tokenizer.json`, U8).
    pub tokenizer: bool,
}

/// A file the artifact was converted from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceFile {
    /// `target` or `assistant`.
    pub model: String,
    /// File name inside the checkpoint directory.
    pub file: String,
    pub bytes: u64,
    /// Hex SHA-256: what the Hugging Face Hub lists as an LFS file's oid, so the source of
    /// an artifact can be checked against the Hub.
    pub sha256: String,
}

impl SourceFile {
    pub fn hash(model: &str, file: &str, bytes: &[u8]) -> SourceFile {
        SourceFile::hash_pieces(model, file, [bytes])
    }

    /// The hash of a file given as consecutive pieces (the CLI hashes a memory map a
    /// piece at a time and drops each piece's pages after it).
    pub fn hash_pieces<'b>(
        model: &str,
        file: &str,
        pieces: impl IntoIterator<Item = &'b [u8]>,
    ) -> SourceFile {
        use sha2::Digest;
        let mut hasher = sha2::Sha256::new();
        let mut bytes = 0u64;
        for piece in pieces {
            hasher.update(piece);
            bytes += piece.len() as u64;
        }
        SourceFile {
            model: model.into(),
            file: file.into(),
            bytes,
            sha256: hex(&hasher.finalize()),
        }
    }
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The manifest of an artifact.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// Always [`FORMAT_NAME`].
    pub format: String,
    /// [`FORMAT_VERSION`] of the build that wrote it.
    pub version: u32,
    /// `wgemma <version>` that wrote it.
    pub producer: String,
    pub quant: Quant,
    pub target: ModelEntry,
    pub assistant: Option<ModelEntry>,
    /// Tensor name -> hex XXH3-128 of its bytes.
    pub checksums: BTreeMap<String, String>,
    pub sources: Vec<SourceFile>,
    /// The operator routes the models need at their shapes.
    pub census: Vec<CensusRoute>,
}

const OP: &str = "artifact";

impl Manifest {
    /// Parses the manifest JSON, checking format name and version FIRST, so that an
    /// artifact of another version is refused by its version, not by a field it lacks.
    pub fn parse(json: &str) -> Result<Manifest> {
        let value: serde_json::Value = serde_json::from_str(json)
            .map_err(|e| Error::invalid(OP, "manifest", "a JSON object", format!("{e}")))?;
        let format = value.get("format").and_then(|f| f.as_str());
        if format != Some(FORMAT_NAME) {
            return Err(Error::invalid(
                OP,
                "manifest `format`",
                format!("\"{FORMAT_NAME}\""),
                format.map_or("none".to_string(), |f| format!("\"{f}\"")),
            ));
        }
        let version = value.get("version").and_then(|v| v.as_u64());
        if version != Some(FORMAT_VERSION as u64) {
            return Err(Error::invalid(
                OP,
                "artifact format version (convert the checkpoint again with this wgemma, or \
                 load it with the wgemma that wrote it)",
                FORMAT_VERSION,
                version.map_or("none".to_string(), |v| v.to_string()),
            ));
        }
        serde_json::from_value(value).map_err(|e| {
            Error::invalid(
                OP,
                format!("manifest of version {FORMAT_VERSION}"),
                "its fields",
                e.to_string(),
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quant_round_trips_and_unknown_versions_are_refused() {
        for f in [
            WeightFormat::F32,
            WeightFormat::F16,
            WeightFormat::Q4 { group: 64 },
        ] {
            let q = Quant::of(f);
            let json = serde_json::to_string(&q).unwrap();
            assert_eq!(serde_json::from_str::<Quant>(&json).unwrap().format(), f);
        }
        assert_eq!(
            serde_json::to_string(&Quant::Q4 { group_size: 32 }).unwrap(),
            r#"{"scheme":"q4","group_size":32}"#
        );
        let err = Manifest::parse(r#"{"format":"wgemma-artifact","version":99}"#)
            .unwrap_err()
            .to_string();
        assert!(err.contains("version") && err.contains("99"), "{err}");
        let err = Manifest::parse(r#"{"format":"other","version":1}"#)
            .unwrap_err()
            .to_string();
        assert!(err.contains("\"other\""), "{err}");
        assert!(Manifest::parse("[").is_err());
    }
}
