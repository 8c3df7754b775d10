//! Reading an artifact from bytes (the CLI's memory map, the browser's fetched buffer):
//! framing, the manifest, and the contract every tensor must meet before a byte reaches
//! the GPU. Errors name the tensor or field and say what was expected and what was found.

use super::manifest::{Manifest, ASSISTANT_PREFIX, MANIFEST_KEY, TARGET_PREFIX, TOKENIZER_TENSOR};
use super::plan::{
    assistant_plan, ggml_suffix, target_plan_with, StoredTensor, Q4_PACKED, Q4_SCALES,
};
use super::writer::{checksum, header_checksum_prefix, CHECKSUM_PLACEHOLDER};
use crate::error::{Error, Result};
use crate::model::assistant::{parse_assistant_config, AssistantSpec};
use crate::model::config::ModelSpec;
use crate::model::parse_config;
use crate::model::weights::WeightFormat;
use crate::ops::ggml_linear::NATIVE_TYPES;
use crate::weights::ggml::GgmlType;
use crate::weights::layout::MatrixLayout;
use crate::weights::raw::{RawData, RawDtype, RawTensor};
use crate::weights::source::WeightSource;
use crate::weights::upload::StreamOptions;
use safetensors::tensor::Metadata;
use safetensors::{Dtype, SafeTensors};
use std::cell::RefCell;
use std::collections::{BTreeSet, HashSet};
use std::ops::Range;

const OP: &str = "artifact";
/// The safetensors crate's limit on header size.
const MAX_HEADER_BYTES: u64 = 100_000_000;

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

fn dtype_bytes(dtype: &str) -> Option<usize> {
    Some(match dtype {
        "BOOL" | "U8" | "I8" | "F8_E5M2" | "F8_E4M3" => 1,
        "F16" | "BF16" | "I16" | "U16" => 2,
        "F32" | "I32" | "U32" => 4,
        "F64" | "I64" | "U64" => 8,
        _ => return None,
    })
}

/// Checks the framing and every tensor's byte range against its dtype and shape, naming
/// the tensor (the safetensors crate's own errors do not), and returns the header length.
fn check_framing(bytes: &[u8]) -> Result<usize> {
    let len = bytes.len();
    let Some(head) = bytes.get(..8) else {
        return Err(Error::invalid(
            OP,
            "file size (the file is truncated, or not an artifact)",
            "at least 8 bytes (the header length)",
            format!("{len} bytes"),
        ));
    };
    let n = u64::from_le_bytes(head.try_into().expect("8 bytes"));
    if n > MAX_HEADER_BYTES {
        return Err(Error::invalid(
            OP,
            "header length (not a safetensors artifact?)",
            format!("<= {MAX_HEADER_BYTES} bytes"),
            n,
        ));
    }
    let n = n as usize;
    let Some(header) = bytes.get(8..8 + n) else {
        return Err(Error::invalid(
            OP,
            "file size (the file is truncated inside its header)",
            format!("at least {} bytes (8 + a {n}-byte header)", 8 + n),
            format!("{len} bytes"),
        ));
    };
    let header: serde_json::Map<String, serde_json::Value> = std::str::from_utf8(header)
        .ok()
        .and_then(|h| serde_json::from_str(h).ok())
        .ok_or_else(|| {
            Error::invalid(
                OP,
                "header",
                "a safetensors JSON header",
                "unparseable bytes",
            )
        })?;
    let mut data_end = 0usize;
    for (name, t) in header.iter().filter(|(k, _)| *k != "__metadata__") {
        let shape: Option<Vec<usize>> = t["shape"]
            .as_array()
            .and_then(|a| a.iter().map(|d| d.as_u64().map(|d| d as usize)).collect());
        let offsets = t["data_offsets"]
            .as_array()
            .and_then(|o| Some((o.first()?.as_u64()? as usize, o.get(1)?.as_u64()? as usize)));
        let (Some(shape), Some((start, end)), Some(dtype)) = (shape, offsets, t["dtype"].as_str())
        else {
            return Err(Error::invalid(
                OP,
                format!("header entry of `{name}`"),
                "dtype, shape and data_offsets",
                t.to_string(),
            ));
        };
        if let Some(size) = dtype_bytes(dtype) {
            let elems = shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
            let want = elems.and_then(|e| e.checked_mul(size));
            if end < start || want != Some(end - start) {
                return Err(Error::invalid(
                    OP,
                    format!("bytes of tensor `{name}` ({dtype} {shape:?} per the header)"),
                    want.map_or("a size that fits memory".to_string(), |w| w.to_string()),
                    format!(
                        "{} (data_offsets {start}..{end})",
                        end.saturating_sub(start)
                    ),
                ));
            }
        }
        data_end = data_end.max(end);
    }
    // A header's offsets are untrusted: no overflow on absurd ones.
    let want = (8 + n).saturating_add(data_end);
    if len != want {
        let what = if len < want {
            format!(
                "file size (the file is truncated: its last {} bytes are missing)",
                want.saturating_sub(len)
            )
        } else {
            format!("file size ({} bytes after the last tensor)", len - want)
        };
        return Err(Error::invalid(
            OP,
            what,
            format!("{want} bytes (header + tensor data)"),
            format!("{len} bytes"),
        ));
    }
    Ok(n)
}

/// Checks the header's own checksum: the manifest (configs included) and the tensor table
/// are covered, so an edited config is refused rather than silently used. Found only after
/// the format version is known to be one that writes it.
fn check_header_checksum(header: &[u8]) -> Result<()> {
    let json = header.trim_ascii_end();
    let prefix = header_checksum_prefix();
    let what = "XXH3-128 of the header (manifest, configs and tensor table; the file is \
                corrupt or its header was edited after conversion)";
    let at = std::str::from_utf8(json)
        .ok()
        .and_then(|j| j.find(&prefix))
        .map(|i| i + prefix.len());
    let stored = at.and_then(|i| json.get(i..i + CHECKSUM_PLACEHOLDER.len()));
    let (Some(at), Some(stored)) = (at, stored) else {
        return Err(Error::invalid(OP, what, "stored in the header", "none"));
    };
    let stored = String::from_utf8_lossy(stored).into_owned();
    let mut unsealed = json.to_vec();
    unsealed[at..at + CHECKSUM_PLACEHOLDER.len()].copy_from_slice(CHECKSUM_PLACEHOLDER.as_bytes());
    let found = checksum(&unsealed);
    if found != stored {
        return Err(Error::invalid(OP, what, stored, found));
    }
    Ok(())
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

/// The weights of one model of an artifact, handed to the loaders as stored (no
/// conversion): matrices borrow the artifact's bytes when they are aligned for it.
pub struct ArtifactWeights<'s, 'a> {
    artifact: &'s Artifact<'a>,
    which: Which,
    verify: bool,
    read: RefCell<HashSet<String>>,
    /// Byte ranges read since the last [`ArtifactWeights::take_read_ranges`].
    done: RefCell<Vec<Range<usize>>>,
}

impl<'a> ArtifactWeights<'_, 'a> {
    fn full(&self, name: &str) -> String {
        format!("{}{name}", self.which.prefix())
    }

    /// A stored tensor, checked for dtype and shape, verified when asked.
    fn tensor(&self, full: &str, dtype: Dtype, shape: &[usize]) -> Result<&'a [u8]> {
        let info = self.artifact.tensors.info(full).ok_or_else(|| {
            Error::invalid(
                OP,
                format!("tensor `{full}`"),
                format!("{dtype:?} {shape:?}"),
                "missing",
            )
        })?;
        if info.dtype != dtype || info.shape != shape {
            return Err(Error::invalid(
                OP,
                format!("tensor `{full}` as the loader asks for it"),
                format!("{dtype:?} {shape:?}"),
                format!("{:?} {:?}", info.dtype, info.shape),
            ));
        }
        if self.verify {
            self.artifact.verify_tensor(full)?;
        }
        let (data, range) = self.artifact.data(full)?;
        self.read.borrow_mut().insert(full.to_string());
        self.done.borrow_mut().push(range);
        Ok(data)
    }

    /// The byte ranges of the file read since the last call: the loader is done with them
    /// once it reports progress, so the CLI can drop their pages from its memory map.
    pub fn take_read_ranges(&self) -> Vec<Range<usize>> {
        std::mem::take(&mut *self.done.borrow_mut())
    }

    /// Errors unless the loader read every weight tensor of this model (so every one was
    /// verified): a tensor the plan lists but the loader skips is a bug in this build.
    pub fn check_all_read(&self) -> Result<()> {
        let read = self.read.borrow();
        let prefix = self.which.prefix();
        let tokenizer = self.full(TOKENIZER_TENSOR);
        let mut names: Vec<String> = self.artifact.tensors.tensors().into_keys().collect();
        names.sort();
        let unread = names
            .into_iter()
            .filter(|n| n.starts_with(prefix) && *n != tokenizer)
            .find(|n| !read.contains(n.as_str()));
        match unread {
            Some(n) => Err(Error::invalid(
                OP,
                format!("tensor `{n}`"),
                format!("read by the {} loader", self.which.name()),
                "never asked for",
            )),
            None => Ok(()),
        }
    }

    fn has_weight(&self, name: &str) -> bool {
        let full = self.full(name);
        let t = &self.artifact.tensors;
        t.info(&full).is_some()
            || t.info(&format!("{full}{Q4_PACKED}")).is_some()
            || self.artifact.ggml_type(&full).is_some()
    }

    /// A stored weight of `expected_shape` as the artifact holds it: in its GPU layout
    /// (matrices as two Q4 word tensors, or f16 / f32 rows; vectors f32), or u32
    /// (`token_ordering`). A matrix may be stored flat (`[E * N, K]` for `[E, N, K]`
    /// experts).
    fn stored(&self, name: &str, expected_shape: &[usize]) -> Result<RawTensor<'a>> {
        let full = self.full(name);
        let k = expected_shape.last().copied().unwrap_or(1);
        let n = expected_shape.iter().product::<usize>() / k.max(1);
        let tensors = &self.artifact.tensors;
        if let Some(ty) = self.artifact.ggml_type(&full) {
            let stored = format!("{full}{}", ggml_suffix(ty));
            let data = self.tensor(&stored, Dtype::U8, &[n, ty.bytes_of(k)])?;
            return Ok(RawTensor::bytes(
                RawDtype::Ggml(ty),
                &[n, k],
                data,
                format!("`{stored}`"),
            ));
        }
        if tensors.info(&format!("{full}{Q4_PACKED}")).is_some() {
            let WeightFormat::Q4 { group } = self.artifact.format() else {
                return Err(Error::invalid(
                    OP,
                    format!("tensor `{full}{Q4_PACKED}`"),
                    format!(
                        "none in a {} artifact",
                        self.artifact.manifest.quant.describe()
                    ),
                    "present",
                ));
            };
            let (p, s) = MatrixLayout::q4_words(n, k, group);
            let packed = self.tensor(
                &format!("{full}{Q4_PACKED}"),
                Dtype::U32,
                &[n, p / n.max(1)],
            )?;
            let scales = self.tensor(&format!("{full}{Q4_SCALES}"), Dtype::U32, &[s])?;
            return Ok(RawTensor {
                dtype: RawDtype::Prepared(MatrixLayout::Q4 { group }),
                shape: vec![n, k],
                data: RawData::Q4Words { packed, scales },
                what: format!("`{full}`"),
                release: None,
            });
        }
        let info = tensors.info(&full).ok_or_else(|| {
            Error::invalid(
                OP,
                format!("tensor `{full}`"),
                format!("a stored weight of shape {expected_shape:?}"),
                "missing",
            )
        })?;
        let dtype = match info.dtype {
            Dtype::F32 => RawDtype::Prepared(MatrixLayout::F32),
            Dtype::F16 => RawDtype::Prepared(MatrixLayout::F16),
            Dtype::U32 => RawDtype::U32,
            other => {
                return Err(Error::invalid(
                    OP,
                    format!("dtype of tensor `{full}`"),
                    "F32, F16 or U32",
                    format!("{other:?}"),
                ))
            }
        };
        let flat = [n, k];
        let shape: &[usize] = if info.shape == flat {
            &flat
        } else {
            expected_shape
        };
        let data = self.tensor(&full, info.dtype, shape)?;
        Ok(RawTensor::bytes(
            dtype,
            expected_shape,
            data,
            format!("`{full}`"),
        ))
    }
}

/// The stored weights of one model, its matrices in their GPU layout under the names the
/// loader uploads them as: the uploader places them as stored (borrowed from the
/// artifact's bytes where aligned), with no conversion.
impl WeightSource for ArtifactWeights<'_, '_> {
    fn tensor(&self, name: &str, expected_shape: &[usize]) -> Result<RawTensor<'_>> {
        self.stored(name, expected_shape)
    }

    fn has(&self, name: &str) -> bool {
        self.has_weight(name)
    }

    fn stores_stacked(&self) -> bool {
        true
    }

    /// Matrices stored in ggml blocks run as stored, as their GGUF file's load does.
    fn stream_options(&self) -> StreamOptions {
        StreamOptions {
            native_ggml: true,
            ..StreamOptions::default()
        }
    }
}
