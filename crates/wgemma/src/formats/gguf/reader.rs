//! The GGUF container (ggml's `docs/gguf.md`, versions 2 and 3): a header, typed metadata
//! key/value pairs, a tensor table, then the tensor data, aligned. Parsed from `&[u8]` (the
//! CLI memory-maps the file, the browser hands over a fetched buffer); every count, length,
//! offset and dimension is checked against the bytes present before anything is allocated
//! or sliced, so a truncated or lying file is an error naming the field, never a panic or
//! an allocation the file's size does not justify.

use super::cursor::{Cursor, OP};
use super::metadata::{alignment_of, read_metadata};
pub use super::metadata::{Value, DEFAULT_ALIGNMENT, METADATA_MEMORY_CAP};
use super::quant::GgmlType;
use crate::error::{Error, Result};
use std::collections::BTreeMap;

const MAGIC: &[u8; 4] = b"GGUF";
/// Dimensions a ggml tensor may have.
const MAX_DIMS: usize = 4;

/// One entry of the tensor table.
#[derive(Debug, Clone)]
pub struct TensorInfo<'a> {
    pub name: String,
    /// ggml order: `dims[0]` is the fastest-varying (a row's length); an HF `[N, K]` weight
    /// is `[K, N]` here.
    pub dims: Vec<usize>,
    pub ty: GgmlType,
    /// The tensor's bytes (whole blocks of `ty`).
    pub data: &'a [u8],
    /// Byte offset of `data` in the file.
    pub file_offset: usize,
}

impl TensorInfo<'_> {
    /// Elements in total.
    pub fn elements(&self) -> usize {
        self.dims.iter().product()
    }

    /// The shape in HF (row-major, slowest first) order.
    pub fn hf_shape(&self) -> Vec<usize> {
        self.dims.iter().rev().copied().collect()
    }
}

/// A parsed GGUF file, borrowing its bytes.
#[derive(Debug)]
pub struct GgufFile<'a> {
    pub version: u32,
    pub metadata: BTreeMap<String, Value>,
    pub tensors: Vec<TensorInfo<'a>>,
    index: BTreeMap<String, usize>,
    pub alignment: usize,
    /// Where the data section starts.
    pub data_offset: usize,
}

/// The file's first 8 bytes: the magic and a version this reader reads.
fn read_magic_and_version(c: &mut Cursor<'_>) -> Result<u32> {
    let magic = c.array::<4>(&|| "magic".to_string())?;
    if &magic != MAGIC {
        return Err(Error::invalid(
            OP,
            "magic (the first 4 bytes)",
            "\"GGUF\"",
            format!("{:?}", String::from_utf8_lossy(&magic)),
        ));
    }
    let version = c.u32(&|| "version".to_string())?;
    if !(2..=3).contains(&version) {
        return Err(Error::invalid(
            OP,
            "version",
            "2 or 3 (version 1 used 32-bit counts and is not read)",
            version,
        ));
    }
    Ok(version)
}

/// One entry of the tensor table as stored, before its data is located.
struct TensorEntry {
    name: String,
    dims: Vec<usize>,
    ty: GgmlType,
    /// Bytes from the start of the data section.
    offset: u64,
}

/// Reads tensor `i`'s table entry: name, dimensions, type and data offset.
fn read_tensor_entry(c: &mut Cursor<'_>, i: usize) -> Result<TensorEntry> {
    let name = c.string(&|| format!("name of tensor {i}"))?;
    let at = c.pos;
    let n_dims = c.u32(&|| format!("dimension count of `{name}`"))? as usize;
    if n_dims == 0 || n_dims > MAX_DIMS {
        return Err(Error::invalid(
            OP,
            format!("dimension count of `{name}` at byte {at}"),
            format!("1..={MAX_DIMS}"),
            n_dims,
        ));
    }
    let mut dims = Vec::with_capacity(n_dims);
    for d in 0..n_dims {
        let v = c.u64(&|| format!("dimension {d} of `{name}`"))?;
        dims.push(
            usize::try_from(v).map_err(|_| {
                Error::invalid(OP, format!("dimension {d} of `{name}`"), "< 2^63", v)
            })?,
        );
    }
    let type_at = c.pos;
    let type_id = c.u32(&|| format!("type of `{name}`"))?;
    let ty = GgmlType::from_id(type_id).map_err(|e| match e {
        Error::Invalid {
            expected, found, ..
        } => Error::Invalid {
            op: OP,
            what: format!("type of tensor `{name}` at byte {type_at}"),
            expected,
            found,
        },
        other => other,
    })?;
    let offset = c.u64(&|| format!("data offset of `{name}`"))?;
    Ok(TensorEntry {
        name,
        dims,
        ty,
        offset,
    })
}

impl TensorEntry {
    /// `(start in the data section, size in bytes)` of the tensor's data, checked: whole
    /// blocks per row, a size that fits in memory, an aligned offset, inside the
    /// `data_len`-byte data section.
    fn extent(&self, alignment: usize, data_len: usize) -> Result<(usize, usize)> {
        let TensorEntry {
            name,
            dims,
            ty,
            offset,
        } = self;
        let (ty, offset) = (*ty, *offset);
        let elements = dims
            .iter()
            .try_fold(1usize, |a, &d| a.checked_mul(d))
            .filter(|&e| e > 0)
            .ok_or_else(|| {
                Error::invalid(
                    OP,
                    format!("dimensions of `{name}`"),
                    "non-zero, with a product that fits in memory",
                    format!("{dims:?}"),
                )
            })?;
        if dims[0] % ty.block_elements() != 0 {
            return Err(Error::invalid(
                OP,
                format!("row length (dimension 0) of `{name}` ({ty:?})"),
                format!("a multiple of the {}-element block", ty.block_elements()),
                dims[0],
            ));
        }
        let size = (elements / ty.block_elements())
            .checked_mul(ty.block_bytes())
            .ok_or_else(|| {
                Error::invalid(
                    OP,
                    format!("dimensions of `{name}`"),
                    "a size that fits in memory",
                    format!("{dims:?} of {ty:?}"),
                )
            })?;
        if offset % alignment as u64 != 0 {
            return Err(Error::invalid(
                OP,
                format!("data offset of `{name}`"),
                format!("a multiple of the alignment {alignment}"),
                offset,
            ));
        }
        let start = usize::try_from(offset)
            .ok()
            .filter(|&o| o.checked_add(size).is_some_and(|end| end <= data_len))
            .ok_or_else(|| {
                Error::invalid(
                    OP,
                    format!("data of `{name}` ({size} bytes at data offset {offset})"),
                    format!("inside the {data_len}-byte data section"),
                    "past its end (the file is truncated or the offset lies)",
                )
            })?;
        Ok((start, size))
    }
}

impl<'a> GgufFile<'a> {
    /// Parses the header, metadata and tensor table of `bytes` and checks that every
    /// tensor's data lies, aligned and whole, inside the file.
    pub fn parse(bytes: &'a [u8]) -> Result<GgufFile<'a>> {
        let mut c = Cursor { bytes, pos: 0 };
        let version = read_magic_and_version(&mut c)?;
        // A tensor-table entry is at least 8 (name length) + 4 (dims) + 4 (type) + 8
        // (offset) bytes; a key/value pair at least 8 + 4 + 1.
        let n_tensors = c.count(24, &|| "tensor count".to_string())?;
        let n_kv = c.count(13, &|| "metadata key/value count".to_string())?;
        let metadata = read_metadata(&mut c, n_kv)?;
        let alignment = alignment_of(&metadata)?;
        let entries = (0..n_tensors)
            .map(|i| read_tensor_entry(&mut c, i))
            .collect::<Result<Vec<_>>>()?;
        let data_offset = c.pos.div_ceil(alignment) * alignment;
        if data_offset > bytes.len() && n_tensors > 0 {
            return Err(Error::invalid(
                OP,
                "data section",
                format!("to start at byte {data_offset}"),
                format!("a file of {} bytes", bytes.len()),
            ));
        }
        let data_len = bytes.len().saturating_sub(data_offset);
        let mut tensors = Vec::with_capacity(entries.len());
        let mut index = BTreeMap::new();
        for entry in entries {
            let (start, size) = entry.extent(alignment, data_len)?;
            let TensorEntry { name, dims, ty, .. } = entry;
            let file_offset = data_offset + start;
            if index.insert(name.clone(), tensors.len()).is_some() {
                return Err(Error::invalid(
                    OP,
                    format!("tensor `{name}`"),
                    "named once",
                    "twice",
                ));
            }
            tensors.push(TensorInfo {
                name,
                dims,
                ty,
                data: &bytes[file_offset..file_offset + size],
                file_offset,
            });
        }
        Ok(GgufFile {
            version,
            metadata,
            tensors,
            index,
            alignment,
            data_offset,
        })
    }

    pub fn tensor(&self, name: &str) -> Option<&TensorInfo<'a>> {
        self.index.get(name).map(|&i| &self.tensors[i])
    }

    pub fn get(&self, key: &str) -> Option<&Value> {
        self.metadata.get(key)
    }

    /// `general.architecture`.
    pub fn architecture(&self) -> Result<&str> {
        self.get("general.architecture")
            .and_then(Value::as_str)
            .ok_or_else(|| {
                Error::invalid(
                    OP,
                    "general.architecture",
                    "a string (e.g. \"gemma4\")",
                    self.describe("general.architecture"),
                )
            })
    }

    /// What is stored under `key`, in the words of errors: "missing" or the value's type.
    pub fn describe(&self, key: &str) -> String {
        match self.get(key) {
            None => "missing".into(),
            Some(v) => format!("a {}", v.type_name()),
        }
    }
}
