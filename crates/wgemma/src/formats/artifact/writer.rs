//! A streaming safetensors writer: the header first (tensor table known up front, the
//! metadata in a reserved region), then each tensor's bytes in table order, in as many
//! pieces as the caller likes, hashed as they pass; at the end the header is written
//! again with the final metadata (the checksums). Nothing is held but the piece being
//! written, so a 10 GB file costs no 10 GB of memory.
//!
//! `safetensors::serialize_to_file` is not used: it needs every tensor in memory at once.
//! The layout written is the safetensors one (8-byte LE header length, JSON header padded
//! with spaces to a multiple of 8, tensors contiguous in offset order), so the reader is
//! the `safetensors` crate's own.

use super::manifest::hex;
use super::plan::StoredTensor;
use crate::error::{Error, Result};
use std::collections::BTreeMap;
use std::io::{Seek, SeekFrom, Write};
use xxhash_rust::xxh3::Xxh3;

const OP: &str = "artifact writer";

fn io(what: &str, e: std::io::Error) -> Error {
    Error::invalid(OP, what, "success", e.to_string())
}

/// A hex XXH3-128 of `bytes` (the artifact's tensor checksum).
pub fn checksum(bytes: &[u8]) -> String {
    hex(&xxhash_rust::xxh3::xxh3_128(bytes).to_be_bytes())
}

/// The placeholder a checksum is reserved with (same width as a real one).
pub const CHECKSUM_PLACEHOLDER: &str = "00000000000000000000000000000000";

/// `__metadata__` key of the header's own XXH3-128: over the header JSON exactly as
/// written (manifest, configs, tensor table and offsets), with this value set to
/// [`CHECKSUM_PLACEHOLDER`]. A reader puts the placeholder back and hashes again.
pub const HEADER_CHECKSUM_KEY: &str = "wgemma.header_xxh3";

/// The text `"<HEADER_CHECKSUM_KEY>":"` that precedes the header checksum in the JSON.
pub fn header_checksum_prefix() -> String {
    format!("\"{HEADER_CHECKSUM_KEY}\":\"")
}

/// The header JSON with its checksum filled in: `json` must hold the key with the
/// placeholder value.
fn seal_header(json: &str) -> String {
    let needle = format!("{}{CHECKSUM_PLACEHOLDER}\"", header_checksum_prefix());
    let sum = checksum(json.as_bytes());
    json.replacen(&needle, &format!("{}{sum}\"", header_checksum_prefix()), 1)
}

/// `json` (a header holding [`HEADER_CHECKSUM_KEY`]) with its checksum computed again: for
/// tools and tests that edit a header on purpose. Unchanged when the key is absent.
pub fn reseal_header(json: &str) -> String {
    let prefix = header_checksum_prefix();
    let Some(at) = json.find(&prefix).map(|i| i + prefix.len()) else {
        return json.to_string();
    };
    let Some(end) = at
        .checked_add(CHECKSUM_PLACEHOLDER.len())
        .filter(|&e| json.is_char_boundary(e) && e <= json.len())
    else {
        return json.to_string();
    };
    seal_header(&format!(
        "{}{CHECKSUM_PLACEHOLDER}{}",
        &json[..at],
        &json[end..]
    ))
}

/// `metadata` with the header checksum's placeholder.
fn with_header_placeholder(metadata: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    let mut m = metadata.clone();
    m.insert(
        HEADER_CHECKSUM_KEY.to_string(),
        CHECKSUM_PLACEHOLDER.to_string(),
    );
    m
}

/// Writes a safetensors file whose tensor table is known before any data.
pub struct TensorWriter<W: Write + Seek> {
    sink: W,
    tensors: Vec<StoredTensor>,
    /// Header bytes reserved (a multiple of 8).
    reserved: usize,
    current: usize,
    written: usize,
    hasher: Xxh3,
    checksums: BTreeMap<String, String>,
}

fn header_json(tensors: &[StoredTensor], metadata: &BTreeMap<String, String>) -> String {
    let mut header = serde_json::Map::new();
    if !metadata.is_empty() {
        header.insert(
            "__metadata__".into(),
            serde_json::to_value(metadata).expect("strings"),
        );
    }
    let mut offset = 0usize;
    for t in tensors {
        let end = offset + t.byte_len();
        header.insert(
            t.name.clone(),
            serde_json::json!({
                "dtype": format!("{:?}", t.dtype),
                "shape": t.shape,
                "data_offsets": [offset, end],
            }),
        );
        offset = end;
    }
    serde_json::Value::Object(header).to_string()
}

/// `json` padded with spaces to `len` bytes (a format width would be limited to 2^16).
fn padded(json: &str, len: usize) -> String {
    let mut s = String::with_capacity(len);
    s.push_str(json);
    s.extend(std::iter::repeat_n(' ', len.saturating_sub(json.len())));
    s
}

impl<W: Write + Seek> TensorWriter<W> {
    /// Writes the header with `metadata`. The final metadata given to
    /// [`TensorWriter::finish`] must serialise no longer than this one: reserve its
    /// variable parts with same-width placeholders ([`CHECKSUM_PLACEHOLDER`]).
    pub fn begin(
        mut sink: W,
        tensors: Vec<StoredTensor>,
        metadata: &BTreeMap<String, String>,
    ) -> Result<Self> {
        let mut names = std::collections::HashSet::new();
        if let Some(dup) = tensors.iter().find(|t| !names.insert(&t.name)) {
            return Err(Error::invalid(
                OP,
                "tensor names",
                "unique",
                format!("`{}` twice", dup.name),
            ));
        }
        let json = header_json(&tensors, &with_header_placeholder(metadata));
        let reserved = json.len().div_ceil(8) * 8;
        sink.write_all(&(reserved as u64).to_le_bytes())
            .and_then(|_| sink.write_all(padded(&json, reserved).as_bytes()))
            .map_err(|e| io("writing the header", e))?;
        let mut w = TensorWriter {
            sink,
            tensors,
            reserved,
            current: 0,
            written: 0,
            hasher: Xxh3::new(),
            checksums: BTreeMap::new(),
        };
        w.close_empty_tensors();
        Ok(w)
    }

    /// Closes the current tensor when it is complete, and any zero-byte ones after it.
    fn close_empty_tensors(&mut self) {
        while let Some(t) = self.tensors.get(self.current) {
            if self.written < t.byte_len() {
                break;
            }
            let digest = std::mem::replace(&mut self.hasher, Xxh3::new()).digest128();
            self.checksums
                .insert(t.name.clone(), hex(&digest.to_be_bytes()));
            self.current += 1;
            self.written = 0;
        }
    }

    /// The tensor the next bytes belong to (None when all are written).
    pub fn next_tensor(&self) -> Option<&StoredTensor> {
        self.tensors.get(self.current)
    }

    /// Appends `bytes` to tensor `name`, which must be the one being written.
    pub fn write(&mut self, name: &str, bytes: &[u8]) -> Result<()> {
        let Some(t) = self.tensors.get(self.current) else {
            return Err(Error::invalid(
                OP,
                format!("bytes for `{name}`"),
                "none (every tensor is written)",
                bytes.len(),
            ));
        };
        if t.name != name {
            return Err(Error::invalid(
                OP,
                "tensor written next",
                format!("`{}`", t.name),
                format!("`{name}`"),
            ));
        }
        let left = t.byte_len() - self.written;
        if bytes.len() > left {
            return Err(Error::invalid(
                OP,
                format!("bytes written to `{name}` {:?} {:?}", t.dtype, t.shape),
                format!("{left} more"),
                bytes.len(),
            ));
        }
        self.sink
            .write_all(bytes)
            .map_err(|e| io(&format!("writing `{name}`"), e))?;
        self.hasher.update(bytes);
        self.written += bytes.len();
        self.close_empty_tensors();
        Ok(())
    }

    /// Checks that every tensor was written, rewrites the header with `metadata` (given
    /// the checksum of every tensor) and returns the sink, positioned at its end.
    pub fn finish(
        mut self,
        metadata: impl FnOnce(&BTreeMap<String, String>) -> BTreeMap<String, String>,
    ) -> Result<W> {
        if let Some(t) = self.tensors.get(self.current) {
            return Err(Error::invalid(
                OP,
                format!("bytes of `{}`", t.name),
                t.byte_len(),
                self.written,
            ));
        }
        let json = seal_header(&header_json(
            &self.tensors,
            &with_header_placeholder(&metadata(&self.checksums)),
        ));
        if json.len() > self.reserved {
            return Err(Error::invalid(
                OP,
                "final header bytes (the metadata must not outgrow its reservation)",
                format!("<= {}", self.reserved),
                json.len(),
            ));
        }
        let reserved = self.reserved;
        self.sink
            .seek(SeekFrom::Start(8))
            .and_then(|_| self.sink.write_all(padded(&json, reserved).as_bytes()))
            .and_then(|_| self.sink.seek(SeekFrom::End(0)))
            .and_then(|_| self.sink.flush())
            .map_err(|e| io("rewriting the header", e))?;
        Ok(self.sink)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use safetensors::{Dtype, SafeTensors};

    #[test]
    fn streams_pieces_and_reads_back_with_the_safetensors_crate() {
        let tensors = vec![
            StoredTensor {
                name: "a".into(),
                dtype: Dtype::F32,
                shape: vec![2, 3],
            },
            StoredTensor {
                name: "empty".into(),
                dtype: Dtype::U32,
                shape: vec![0],
            },
            StoredTensor {
                name: "b".into(),
                dtype: Dtype::U8,
                shape: vec![5],
            },
        ];
        let reserve = BTreeMap::from([("sum".to_string(), CHECKSUM_PLACEHOLDER.to_string())]);
        let mut w =
            TensorWriter::begin(std::io::Cursor::new(Vec::new()), tensors, &reserve).unwrap();
        let a: Vec<u8> = bytemuck::cast_slice(&[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0]).to_vec();
        w.write("a", &a[..10]).unwrap();
        assert!(w.write("b", &[1]).is_err(), "a is not complete");
        w.write("a", &a[10..]).unwrap();
        assert_eq!(w.next_tensor().unwrap().name, "b");
        assert!(w.write("b", &[0; 6]).is_err(), "too many bytes");
        w.write("b", &[9, 8, 7, 6, 5]).unwrap();
        let bytes = w
            .finish(|sums| BTreeMap::from([("sum".to_string(), sums["a"].clone())]))
            .unwrap()
            .into_inner();
        let st = SafeTensors::deserialize(&bytes).unwrap();
        assert_eq!(st.tensor("a").unwrap().data(), &a[..]);
        assert_eq!(st.tensor("b").unwrap().data(), &[9, 8, 7, 6, 5]);
        let (_, meta) = SafeTensors::read_metadata(&bytes).unwrap();
        assert_eq!(meta.metadata().as_ref().unwrap()["sum"], checksum(&a));
    }

    #[test]
    fn headers_beyond_64_kib_are_written_whole() {
        let tensors: Vec<StoredTensor> = (0..3000)
            .map(|i| StoredTensor {
                name: format!("model.layers.{i}.a_long_enough_tensor_name.weight"),
                dtype: Dtype::F32,
                shape: vec![1],
            })
            .collect();
        let mut w = TensorWriter::begin(
            std::io::Cursor::new(Vec::new()),
            tensors.clone(),
            &BTreeMap::new(),
        )
        .unwrap();
        for t in &tensors {
            w.write(&t.name, &[0; 4]).unwrap();
        }
        let bytes = w.finish(|_| BTreeMap::new()).unwrap().into_inner();
        assert!(u64::from_le_bytes(bytes[..8].try_into().unwrap()) > 1 << 16);
        assert_eq!(SafeTensors::deserialize(&bytes).unwrap().len(), 3000);
    }

    #[test]
    fn an_unfinished_file_is_an_error() {
        let tensors = vec![StoredTensor {
            name: "a".into(),
            dtype: Dtype::F32,
            shape: vec![2],
        }];
        let mut w =
            TensorWriter::begin(std::io::Cursor::new(Vec::new()), tensors, &BTreeMap::new())
                .unwrap();
        w.write("a", &[0; 4]).unwrap();
        let err = w.finish(|_| BTreeMap::new()).err().unwrap().to_string();
        assert!(
            err.contains("`a`") && err.contains('8') && err.contains('4'),
            "{err}"
        );
    }
}
