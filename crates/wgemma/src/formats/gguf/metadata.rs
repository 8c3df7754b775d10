//! GGUF metadata: the typed key/value pairs after the header, read within a memory budget
//! that scales with the file, and `general.alignment`.

use super::cursor::{Cursor, OP};
use crate::error::{Error, Result};
use std::collections::BTreeMap;

/// `general.alignment` when the file does not set it.
pub const DEFAULT_ALIGNMENT: usize = 32;
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

/// The `n_kv` metadata key/value pairs, each key present once, read within a budget that
/// scales with the file (a lying count cannot allocate more than the file could hold).
pub(super) fn read_metadata(c: &mut Cursor<'_>, n_kv: usize) -> Result<BTreeMap<String, Value>> {
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
pub(super) fn alignment_of(metadata: &BTreeMap<String, Value>) -> Result<usize> {
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
