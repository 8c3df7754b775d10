//! The GGUF container (ggml's `docs/gguf.md`, versions 2 and 3): a header, typed metadata
//! key/value pairs, a tensor table, then the tensor data, aligned. Parsed from `&[u8]` (the
//! CLI memory-maps the file, the browser hands over a fetched buffer); every count, length,
//! offset and dimension is checked against the bytes present before anything is allocated
//! or sliced, so a truncated or lying file is an error naming the field, never a panic or
//! an allocation the file's size does not justify.

use super::quant::GgmlType;
use crate::error::{Error, Result};
use std::collections::BTreeMap;

const OP: &str = "gguf";
const MAGIC: &[u8; 4] = b"GGUF";
/// `general.alignment` when the file does not set it.
pub const DEFAULT_ALIGNMENT: usize = 32;
/// Dimensions a ggml tensor may have.
const MAX_DIMS: usize = 4;
/// Array nesting GGUF writers produce (llama.cpp writes none deeper than 1).
const MAX_ARRAY_DEPTH: usize = 2;
/// Memory the parsed metadata may take, whatever the file's size: a Gemma 4 vocabulary
/// (262k tokens with scores and types) takes about 40 MiB.
pub const METADATA_MEMORY_CAP: usize = 256 << 20;
/// ...and relative to the file: an array item costs a `Value` (32 bytes) however few bytes
/// it has in the file (a u8 is one), so without a bound a file's metadata could take 32x
/// its size in memory.
const METADATA_MEMORY_PER_FILE_BYTE: usize = 16;

/// A metadata value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    U64(u64),
    I64(i64),
    F32(f32),
    F64(f64),
    Bool(bool),
    String(String),
    Array(Vec<Value>),
}

impl Value {
    /// The value as an unsigned integer, if it is a non-negative integer of any width.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::U8(v) => Some(v.into()),
            Value::U16(v) => Some(v.into()),
            Value::U32(v) => Some(v.into()),
            Value::U64(v) => Some(v),
            Value::I8(v) => u64::try_from(v).ok(),
            Value::I16(v) => u64::try_from(v).ok(),
            Value::I32(v) => u64::try_from(v).ok(),
            Value::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Value::F32(v) => Some(v.into()),
            Value::F64(v) => Some(v),
            _ => self.as_u64().map(|v| v as f64),
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    /// The value's type, in the words of errors.
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::U8(_) => "u8",
            Value::I8(_) => "i8",
            Value::U16(_) => "u16",
            Value::I16(_) => "i16",
            Value::U32(_) => "u32",
            Value::I32(_) => "i32",
            Value::U64(_) => "u64",
            Value::I64(_) => "i64",
            Value::F32(_) => "f32",
            Value::F64(_) => "f64",
            Value::Bool(_) => "bool",
            Value::String(_) => "string",
            Value::Array(_) => "array",
        }
    }
}

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

/// A bounds-checked little-endian cursor.
struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize, what: &dyn Fn() -> String) -> Result<&'a [u8]> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.bytes.len());
        match end {
            Some(end) => {
                let s = &self.bytes[self.pos..end];
                self.pos = end;
                Ok(s)
            }
            None => Err(Error::invalid(
                OP,
                format!("{} at byte {}", what(), self.pos),
                format!("{n} more bytes"),
                format!(
                    "{} (the file is truncated or the field lies)",
                    self.bytes.len() - self.pos
                ),
            )),
        }
    }

    fn array<const N: usize>(&mut self, what: &dyn Fn() -> String) -> Result<[u8; N]> {
        let s = self.take(N, what)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    fn u32(&mut self, what: &dyn Fn() -> String) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    fn u64(&mut self, what: &dyn Fn() -> String) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    /// A count of items each at least `min_item_bytes` long: refused when the rest of the
    /// file cannot hold that many, so a lying count never drives an allocation.
    fn count(&mut self, min_item_bytes: usize, what: &dyn Fn() -> String) -> Result<usize> {
        let at = self.pos;
        let n = self.u64(what)?;
        let left = (self.bytes.len() - self.pos) as u64;
        if n > left / min_item_bytes.max(1) as u64 {
            return Err(Error::invalid(
                OP,
                format!("{} at byte {at}", what()),
                format!(
                    "at most {} (what the remaining {left} bytes can hold)",
                    left / min_item_bytes.max(1) as u64
                ),
                n,
            ));
        }
        Ok(n as usize)
    }

    fn string(&mut self, what: &dyn Fn() -> String) -> Result<String> {
        let len = self.count(1, what)?;
        let at = self.pos;
        let bytes = self.take(len, what)?;
        String::from_utf8(bytes.to_vec()).map_err(|e| {
            Error::invalid(
                OP,
                format!("{} at byte {at}", what()),
                "UTF-8 text",
                e.to_string(),
            )
        })
    }
}

/// Bytes the smallest value of a GGUF type id occupies (array counts are bounded by it).
fn min_value_bytes(type_id: u32) -> usize {
    match type_id {
        0 | 1 | 7 => 1,
        2 | 3 => 2,
        4..=6 => 4,
        8 | 9 => 8,
        _ => 8,
    }
}

/// What the metadata may still take in memory (see [`METADATA_MEMORY_CAP`]).
struct MetadataBudget {
    left: usize,
    total: usize,
}

impl MetadataBudget {
    fn for_file(file_len: usize) -> MetadataBudget {
        let total = METADATA_MEMORY_CAP
            .min(file_len.saturating_mul(METADATA_MEMORY_PER_FILE_BYTE) + (1 << 20));
        MetadataBudget { left: total, total }
    }

    /// Takes `bytes` of the budget before they are allocated.
    fn charge(&mut self, bytes: usize, key: &str, at: usize) -> Result<()> {
        match self.left.checked_sub(bytes) {
            Some(left) => {
                self.left = left;
                Ok(())
            }
            None => Err(Error::invalid(
                OP,
                format!("metadata `{key}` at byte {at}"),
                format!(
                    "metadata taking at most {} bytes in memory (16x the file, at most {} MiB)",
                    self.total,
                    METADATA_MEMORY_CAP >> 20
                ),
                format!("{} bytes more", bytes),
            )),
        }
    }
}

fn read_value(
    c: &mut Cursor<'_>,
    type_id: u32,
    key: &str,
    depth: usize,
    budget: &mut MetadataBudget,
) -> Result<Value> {
    let what = || format!("value of `{key}`");
    Ok(match type_id {
        0 => Value::U8(c.array::<1>(&what)?[0]),
        1 => Value::I8(c.array::<1>(&what)?[0] as i8),
        2 => Value::U16(u16::from_le_bytes(c.array(&what)?)),
        3 => Value::I16(i16::from_le_bytes(c.array(&what)?)),
        4 => Value::U32(c.u32(&what)?),
        5 => Value::I32(i32::from_le_bytes(c.array(&what)?)),
        6 => Value::F32(f32::from_le_bytes(c.array(&what)?)),
        7 => {
            let at = c.pos;
            match c.array::<1>(&what)?[0] {
                0 => Value::Bool(false),
                1 => Value::Bool(true),
                b => {
                    return Err(Error::invalid(
                        OP,
                        format!("bool `{key}` at byte {at}"),
                        "0 or 1",
                        b,
                    ))
                }
            }
        }
        8 => {
            let at = c.pos;
            let text = c.string(&what)?;
            budget.charge(text.len(), key, at)?;
            Value::String(text)
        }
        9 => {
            let at = c.pos;
            if depth >= MAX_ARRAY_DEPTH {
                return Err(Error::invalid(
                    OP,
                    format!("array `{key}` at byte {at}"),
                    format!("at most {MAX_ARRAY_DEPTH} levels of nesting"),
                    "deeper",
                ));
            }
            let item_type = c.u32(&|| format!("item type of array `{key}`"))?;
            if item_type > 12 {
                return Err(Error::invalid(
                    OP,
                    format!("item type of array `{key}` at byte {at}"),
                    "a GGUF value type id 0..=12",
                    item_type,
                ));
            }
            let n = c.count(min_value_bytes(item_type), &|| {
                format!("item count of array `{key}`")
            })?;
            budget.charge(n.saturating_mul(std::mem::size_of::<Value>()), key, at)?;
            let mut items = Vec::with_capacity(n);
            for _ in 0..n {
                items.push(read_value(c, item_type, key, depth + 1, budget)?);
            }
            Value::Array(items)
        }
        10 => Value::U64(c.u64(&what)?),
        11 => Value::I64(i64::from_le_bytes(c.array(&what)?)),
        12 => Value::F64(f64::from_le_bytes(c.array(&what)?)),
        other => {
            return Err(Error::invalid(
                OP,
                format!("type of `{key}` at byte {}", c.pos - 4),
                "a GGUF value type id 0..=12",
                other,
            ))
        }
    })
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

/// The `n_kv` metadata key/value pairs, each key present once, read within a budget that
/// scales with the file (a lying count cannot allocate more than the file could hold).
fn read_metadata(c: &mut Cursor<'_>, n_kv: usize) -> Result<BTreeMap<String, Value>> {
    let mut metadata = BTreeMap::new();
    let mut budget = MetadataBudget::for_file(c.bytes.len());
    for i in 0..n_kv {
        let key = c.string(&|| format!("key of metadata entry {i}"))?;
        let type_id = c.u32(&|| format!("type of `{key}`"))?;
        let value = read_value(c, type_id, &key, 0, &mut budget)?;
        if metadata.insert(key.clone(), value).is_some() {
            return Err(Error::invalid(
                OP,
                format!("metadata key `{key}`"),
                "present once",
                "twice",
            ));
        }
    }
    Ok(metadata)
}

/// `general.alignment`, or the default when absent: a power of two up to 1 MiB.
fn alignment_of(metadata: &BTreeMap<String, Value>) -> Result<usize> {
    match metadata.get("general.alignment") {
        None => Ok(DEFAULT_ALIGNMENT),
        Some(v) => match v.as_u64() {
            Some(a) if a.is_power_of_two() && a <= 1 << 20 => Ok(a as usize),
            _ => Err(Error::invalid(
                OP,
                "general.alignment",
                "a power of two up to 1 MiB",
                format!("{v:?}"),
            )),
        },
    }
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
