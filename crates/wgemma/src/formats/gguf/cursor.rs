//! The bounds-checked reading under the GGUF container's parsers ([`super::reader`],
//! [`super::metadata`]): every read names its field and fails, never panics, when the
//! bytes run out.

use crate::error::{Error, Result};

/// The op name of every GGUF parsing error.
pub(super) const OP: &str = "gguf";

/// A bounds-checked little-endian cursor.
pub(super) struct Cursor<'a> {
    pub(super) bytes: &'a [u8],
    pub(super) pos: usize,
}

impl<'a> Cursor<'a> {
    pub(super) fn take(&mut self, n: usize, what: &dyn Fn() -> String) -> Result<&'a [u8]> {
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

    pub(super) fn array<const N: usize>(&mut self, what: &dyn Fn() -> String) -> Result<[u8; N]> {
        let s = self.take(N, what)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    pub(super) fn u32(&mut self, what: &dyn Fn() -> String) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    pub(super) fn u64(&mut self, what: &dyn Fn() -> String) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    /// A count of items each at least `min_item_bytes` long: refused when the rest of the
    /// file cannot hold that many, so a lying count never drives an allocation.
    pub(super) fn count(
        &mut self,
        min_item_bytes: usize,
        what: &dyn Fn() -> String,
    ) -> Result<usize> {
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

    pub(super) fn string(&mut self, what: &dyn Fn() -> String) -> Result<String> {
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
