//! Reading an artifact from bytes (the CLI's memory map, the browser's fetched buffer):
//! framing, the manifest, and the contract every tensor must meet before a byte reaches
//! the GPU. Errors name the tensor or field and say what was expected and what was found.

mod framing;
mod weights;

pub use weights::ArtifactWeights;

use super::manifest::{Manifest, ASSISTANT_PREFIX, MANIFEST_KEY, TARGET_PREFIX, TOKENIZER_TENSOR};
use super::plan::{assistant_plan, ggml_suffix, target_plan_with, StoredTensor};
use super::writer::checksum;
use crate::error::{Error, Result};
use crate::model::assistant::{parse_assistant_config, AssistantSpec};
use crate::model::config::ModelSpec;
use crate::model::parse_config;
use crate::model::weights::WeightFormat;
use crate::ops::ggml_linear::NATIVE_TYPES;
use crate::weights::ggml::GgmlType;
use framing::{check_framing, check_header_checksum};
use safetensors::tensor::Metadata;
use safetensors::{Dtype, SafeTensors};
use std::cell::RefCell;
use std::collections::{BTreeSet, HashSet};
use std::ops::Range;

const OP: &str = "artifact";

/// Which model of an artifact.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Which {
    Target,
    Assistant,
}

impl Which {
    pub fn prefix(self) -> &'static str {
        match self {
            Which::Target => TARGET_PREFIX,
            Which::Assistant => ASSISTANT_PREFIX,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Which::Target => "target",
            Which::Assistant => "assistant",
        }
    }
}

/// One row of the tensor table, for `wgemma inspect`.
#[derive(Debug, Clone, serde::Serialize)]
pub struct TensorRow {
    pub name: String,
    pub dtype: String,
    pub shape: Vec<usize>,
    /// Byte offset of its data from the start of the file.
    pub offset: usize,
    pub bytes: usize,
    pub checksum: String,
}

/// A parsed artifact whose contract holds: every tensor of its models' plans present with
/// the dtype and shape the configs and the quantisation need, aligned for a zero-copy
/// view, listed with a checksum, and nothing else.
pub struct Artifact<'a> {
    bytes: &'a [u8],
    /// The safetensors header: the tensor table.
    tensors: Metadata,
    /// Offset of tensor data from the start of the file.
    data_start: usize,
    manifest: Manifest,
    target: ModelSpec,
    assistant: Option<AssistantSpec>,
}

impl<'a> Artifact<'a> {
    /// Parses and checks an artifact: framing, format version, configs, and the tensor
    /// contract. Checksums are verified as tensors are read ([`ArtifactWeights`]) or all
    /// at once by [`Artifact::verify_all`].
    pub fn parse(bytes: &'a [u8]) -> Result<Artifact<'a>> {
        let header_len = check_framing(bytes)?;
        // The safetensors crate's own validation (contiguous offsets, sizes, buffer length).
        let (_, metadata) = SafeTensors::read_metadata(bytes).map_err(|e| {
            Error::invalid(
                OP,
                "safetensors layout",
                "a valid safetensors file",
                e.to_string(),
            )
        })?;
        let json = metadata
            .metadata()
            .as_ref()
            .and_then(|m| m.get(MANIFEST_KEY))
            .ok_or_else(|| {
                Error::invalid(
                    OP,
                    format!("`__metadata__` key `{MANIFEST_KEY}`"),
                    "a wgemma manifest (is this a plain safetensors checkpoint? give its \
                     directory instead)",
                    "none",
                )
            })?;
        let manifest = Manifest::parse(json)?;
        check_header_checksum(&bytes[8..8 + header_len])?;
        let config = |entry: &super::manifest::ModelEntry| entry.config.to_string();
        let target = parse_config(&config(&manifest.target))?;
        let assistant = manifest
            .assistant
            .as_ref()
            .map(|a| parse_assistant_config(&config(a)))
            .transpose()?;
        let artifact = Artifact {
            bytes,
            tensors: metadata,
            data_start: 8 + header_len,
            manifest,
            target,
            assistant,
        };
        artifact.check_contract()?;
        Ok(artifact)
    }

    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// The weight format every matrix is stored in.
    pub fn format(&self) -> WeightFormat {
        self.manifest.quant.format()
    }

    pub fn target_spec(&self) -> &ModelSpec {
        &self.target
    }

    pub fn assistant_spec(&self) -> Option<&AssistantSpec> {
        self.assistant.as_ref()
    }

    /// The bytes of the whole file.
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// The tensors the plans of the artifact's models expect, in plan order.
    fn expected(&self) -> Vec<StoredTensor> {
        let has = |prefix: &'static str| {
            move |name: &str| self.tensors.info(&format!("{prefix}{name}")).is_some()
        };
        let format = self.format();
        let native = |name: &str, _: &[String]| self.ggml_type(&format!("{TARGET_PREFIX}{name}"));
        let mut out: Vec<StoredTensor> =
            target_plan_with(&self.target, format, &has(TARGET_PREFIX), &native)
                .iter()
                .flat_map(|w| w.stored(TARGET_PREFIX))
                .collect();
        if let Some(a) = &self.assistant {
            out.extend(
                assistant_plan(a, format, &has(ASSISTANT_PREFIX))
                    .iter()
                    .flat_map(|w| w.stored(ASSISTANT_PREFIX)),
            );
        }
        out
    }

    /// The ggml type the matrix `full` is stored in, when it is stored in ggml blocks (an
    /// artifact of a GGUF file converted with its own types).
    fn ggml_type(&self, full: &str) -> Option<GgmlType> {
        NATIVE_TYPES.into_iter().find(|&ty| {
            self.tensors
                .info(&format!("{full}{}", ggml_suffix(ty)))
                .is_some()
        })
    }

    fn check_contract(&self) -> Result<()> {
        let mut expected = self.expected();
        let entries = [
            (TARGET_PREFIX, Some(&self.manifest.target)),
            (ASSISTANT_PREFIX, self.manifest.assistant.as_ref()),
        ];
        for (prefix, entry) in entries {
            if entry.is_some_and(|e| e.tokenizer) {
                let name = format!("{prefix}{TOKENIZER_TENSOR}");
                let len = self
                    .tensors
                    .info(&name)
                    .map_or(0, |i| i.shape.iter().product());
                expected.push(StoredTensor {
                    name,
                    dtype: Dtype::U8,
                    shape: vec![len],
                });
            }
        }
        for want in &expected {
            let info = self.tensors.info(&want.name).ok_or_else(|| {
                Error::invalid(
                    OP,
                    format!("tensor `{}`", want.name),
                    format!("present, {:?} {:?}", want.dtype, want.shape),
                    "missing",
                )
            })?;
            if info.dtype != want.dtype || info.shape != want.shape {
                return Err(Error::invalid(
                    OP,
                    format!(
                        "dtype and shape of tensor `{}` (per the configs and the {} \
                         quantisation)",
                        want.name,
                        self.manifest.quant.describe()
                    ),
                    format!("{:?} {:?}", want.dtype, want.shape),
                    format!("{:?} {:?}", info.dtype, info.shape),
                ));
            }
            let align = match want.dtype {
                Dtype::U32 | Dtype::F32 => 4,
                Dtype::F16 => 2,
                _ => 1,
            };
            let offset = self.data_start + info.data_offsets.0;
            if offset % align != 0 {
                return Err(Error::invalid(
                    OP,
                    format!("file offset of tensor `{}`", want.name),
                    format!("a multiple of {align}"),
                    offset,
                ));
            }
        }
        let expected_names: HashSet<&str> = expected.iter().map(|t| t.name.as_str()).collect();
        let stored: BTreeSet<String> = self.tensors.tensors().into_keys().collect();
        if let Some(extra) = stored.iter().find(|n| !expected_names.contains(n.as_str())) {
            return Err(Error::invalid(
                OP,
                format!("tensor `{extra}`"),
                "only the tensors the configs and quantisation need",
                "an unexpected tensor",
            ));
        }
        let sums: BTreeSet<&String> = self.manifest.checksums.keys().collect();
        if let Some(n) = stored.iter().find(|n| !sums.contains(n)) {
            return Err(Error::invalid(
                OP,
                format!("checksum of tensor `{n}`"),
                "listed in the manifest",
                "none",
            ));
        }
        if let Some(n) = sums.iter().find(|n| !stored.contains(n.as_str())) {
            return Err(Error::invalid(
                OP,
                format!("tensor `{n}` (the manifest lists its checksum)"),
                "present",
                "missing",
            ));
        }
        Ok(())
    }

    /// Data of a stored tensor and its byte range in the file.
    fn data(&self, name: &str) -> Result<(&'a [u8], Range<usize>)> {
        let info = self
            .tensors
            .info(name)
            .ok_or_else(|| Error::invalid(OP, format!("tensor `{name}`"), "present", "missing"))?;
        let (s, e) = info.data_offsets;
        let range = self.data_start + s..self.data_start + e;
        Ok((&self.bytes[range.clone()], range))
    }

    /// Checks one tensor's checksum.
    pub fn verify_tensor(&self, name: &str) -> Result<()> {
        let (data, _) = self.data(name)?;
        let want = self.manifest.checksums.get(name).ok_or_else(|| {
            Error::invalid(OP, format!("checksum of tensor `{name}`"), "listed", "none")
        })?;
        let found = checksum(data);
        if &found != want {
            return Err(Error::invalid(
                OP,
                format!(
                    "XXH3-128 of tensor `{name}` (the file is corrupt or was modified after \
                     conversion)"
                ),
                want,
                found,
            ));
        }
        Ok(())
    }

    /// Checks every tensor's checksum; `progress` gets (bytes checked, bytes total).
    pub fn verify_all(&self, progress: &mut dyn FnMut(u64, u64)) -> Result<()> {
        let table = self.tensor_table();
        let total: u64 = table.iter().map(|t| t.bytes as u64).sum();
        let mut done = 0;
        for t in &table {
            self.verify_tensor(&t.name)?;
            done += t.bytes as u64;
            progress(done, total);
        }
        Ok(())
    }

    /// Every tensor in file order.
    pub fn tensor_table(&self) -> Vec<TensorRow> {
        let mut rows: Vec<TensorRow> = self
            .tensors
            .tensors()
            .into_iter()
            .map(|(name, info)| TensorRow {
                checksum: self
                    .manifest
                    .checksums
                    .get(&name)
                    .cloned()
                    .unwrap_or_default(),
                dtype: format!("{:?}", info.dtype),
                shape: info.shape.clone(),
                offset: self.data_start + info.data_offsets.0,
                bytes: info.data_offsets.1 - info.data_offsets.0,
                name,
            })
            .collect();
        rows.sort_by_key(|r| r.offset);
        rows
    }

    /// The stored tokenizer.json of a model (checksum verified), if it has one.
    pub fn tokenizer_json(&self, which: Which) -> Result<Option<&'a [u8]>> {
        let name = format!("{}{TOKENIZER_TENSOR}", which.prefix());
        if self.tensors.info(&name).is_none() {
            return Ok(None);
        }
        self.verify_tensor(&name)?;
        Ok(Some(self.data(&name)?.0))
    }

    /// The weights of one model, for [`Model::load`](crate::model::target::Model::load) or
    /// [`Assistant::load`](crate::model::assistant::Assistant::load); with `verify`,
    /// each tensor's checksum is checked as the loader reads it.
    pub fn weights(&self, which: Which, verify: bool) -> Result<ArtifactWeights<'_, 'a>> {
        if which == Which::Assistant && self.assistant.is_none() {
            return Err(Error::invalid(
                OP,
                "assistant",
                "an artifact converted with --assistant",
                "an artifact holding a target only",
            ));
        }
        Ok(ArtifactWeights {
            artifact: self,
            which,
            verify,
            read: RefCell::new(HashSet::new()),
            done: RefCell::new(Vec::new()),
        })
    }
}
