//! The framing of an artifact's bytes: every tensor's byte range against its dtype and
//! shape, and the header's own checksum.

use crate::error::{Error, Result};
use crate::formats::artifact::writer::{checksum, header_checksum_prefix, CHECKSUM_PLACEHOLDER};

const OP: &str = "artifact";
/// The safetensors crate's limit on header size.
const MAX_HEADER_BYTES: u64 = 100_000_000;

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
pub(super) fn check_framing(bytes: &[u8]) -> Result<usize> {
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
pub(super) fn check_header_checksum(header: &[u8]) -> Result<()> {
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
