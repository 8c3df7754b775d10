//! Positions in a KV cache: how they map to slots ([`KvLayout`]: full, or a sliding ring),
//! and one sequence's positions ([`KvCursor`]: its length, and how far it may roll back).

use crate::error::{Error, Result};
use crate::ops::rope::MAX_POSITION;
use std::ops::Range;

/// How positions map to slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KvLayout {
    /// Full attention: `max_len` slots, slot = position.
    Full { max_len: usize },
    /// Sliding window: a ring of `window + max_rows - 1` slots, slot = position % slots;
    /// `max_rows` is the largest number of rows one forward appends.
    Sliding { window: usize, max_rows: usize },
}

impl KvLayout {
    pub fn slots(&self) -> usize {
        match *self {
            KvLayout::Full { max_len } => max_len,
            KvLayout::Sliding { window, max_rows } => window + max_rows.max(1) - 1,
        }
    }

    pub fn window(&self) -> Option<usize> {
        match *self {
            KvLayout::Full { .. } => None,
            KvLayout::Sliding { window, .. } => Some(window),
        }
    }
}

/// One sequence's positions in a cache: its length, and the end of the furthest forward
/// written (rejected rows included), which bounds how far a ring may roll back. Host
/// bookkeeping only: the GPU learns positions from the positions buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvCursor {
    len: usize,
    written_end: usize,
    max_positions: usize,
    /// Sliding ring: the most rows one forward appends.
    ring_rows: Option<usize>,
}

impl KvCursor {
    /// A cursor over `max_positions` positions; `ring_rows` is the most rows one forward
    /// appends when any cache it stands for is a sliding ring.
    pub fn new(max_positions: usize, ring_rows: Option<usize>) -> KvCursor {
        KvCursor {
            len: 0,
            written_end: 0,
            max_positions,
            ring_rows,
        }
    }

    pub fn for_layout(layout: KvLayout) -> KvCursor {
        match layout {
            KvLayout::Full { max_len } => KvCursor::new(max_len, None),
            KvLayout::Sliding { max_rows, .. } => {
                KvCursor::new(MAX_POSITION as usize, Some(max_rows))
            }
        }
    }

    /// Positions held (the next forward starts at this position).
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The end (exclusive) of the positions the caches can hold.
    pub fn max_positions(&self) -> usize {
        self.max_positions
    }

    /// The checks of [`KvCursor::advance`] without the change.
    pub fn check_advance(&self, m: usize) -> Result<()> {
        if let Some(max_rows) = self.ring_rows {
            if m > max_rows {
                return Err(Error::invalid(
                    "kv_cache",
                    "rows of one forward on a sliding ring",
                    format!("1..={max_rows} (max_rows the ring was sized for)"),
                    m,
                ));
            }
        }
        if m == 0 || self.len + m > self.max_positions {
            return Err(Error::invalid(
                "kv_cache",
                "rows to append",
                format!("1..={}", self.max_positions - self.len),
                m,
            ));
        }
        Ok(())
    }

    /// Claims the positions len..len+m for the next forward and advances the length.
    pub fn advance(&mut self, m: usize) -> Result<Range<usize>> {
        self.check_advance(m)?;
        let start = self.len;
        self.set_len(start + m);
        Ok(start..self.len)
    }

    pub(super) fn set_len(&mut self, len: usize) {
        self.len = len;
        self.written_end = self.written_end.max(len);
    }

    /// Forgets positions >= `len` (rejected draft rows): the next forward overwrites their
    /// slots. Fails when `len` > the current length, and on a ring when keys `len` still
    /// needs were overwritten (more than max_rows below the furthest position written).
    pub fn rollback(&mut self, len: usize) -> Result<()> {
        self.check_rollback(len)?;
        self.len = len;
        Ok(())
    }

    /// The checks of [`KvCursor::rollback`] without the change.
    pub fn check_rollback(&self, len: usize) -> Result<()> {
        if len > self.len {
            return Err(Error::invalid(
                "kv_cache",
                "rollback length",
                format!("<= {} (the current length)", self.len),
                len,
            ));
        }
        if let Some(max_rows) = self.ring_rows {
            if len + max_rows < self.written_end {
                return Err(Error::invalid(
                    "kv_cache",
                    "rollback length on a sliding ring (older keys were overwritten)",
                    format!(
                        ">= {} (furthest position written {} - max_rows {max_rows})",
                        self.written_end - max_rows,
                        self.written_end
                    ),
                    len,
                ));
            }
        }
        Ok(())
    }

    /// Empties the sequence.
    pub fn reset(&mut self) {
        self.len = 0;
        self.written_end = 0;
    }
}
