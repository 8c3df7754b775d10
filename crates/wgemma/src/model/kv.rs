//! A [`KvState`](super::state::KvState)'s conversations: the [`Sequence`] handle (a slot of
//! every KV cache and the positions it holds) and the slots no sequence holds.

use crate::error::Result;
use crate::ops::attention::{KvCache, KvCursor, KvLayout};
use std::sync::{Arc, Mutex};

/// The most rows one forward may append to the sliding rings among `caches` (None
/// without rings).
pub(super) fn ring_rows(caches: &[Option<KvCache>]) -> Option<usize> {
    caches
        .iter()
        .flatten()
        .find_map(|c| match c.config().layout {
            KvLayout::Sliding { max_rows, .. } => Some(max_rows),
            KvLayout::Full { .. } => None,
        })
}

/// The KV slots of one state that no sequence holds.
#[derive(Debug)]
pub(super) struct FreeSlots(pub(super) Mutex<Vec<usize>>);

impl FreeSlots {
    pub(super) fn take(&self) -> Option<usize> {
        // A poisoned lock only means another thread panicked mid-push/pop of a plain Vec.
        let mut free = self.0.lock().unwrap_or_else(|e| e.into_inner());
        free.pop()
    }

    pub(super) fn give_back(&self, slot: usize) {
        let mut free = self.0.lock().unwrap_or_else(|e| e.into_inner());
        free.push(slot);
    }
}

/// One conversation in a [`KvState`](super::state::KvState): a slot of every KV cache (given
/// back when this handle drops) and the positions it holds. Made by
/// [`KvState::new_sequence`](super::state::KvState::new_sequence); used through
/// [`KvState::swap_sequence`](super::state::KvState::swap_sequence) and
/// [`KvState::forward_batch`](super::state::KvState::forward_batch).
#[derive(Debug)]
pub struct Sequence {
    pub(super) slot: usize,
    pub(super) cursor: KvCursor,
    pub(super) free: Arc<FreeSlots>,
}

impl Sequence {
    /// Positions in the KV caches.
    pub fn len(&self) -> usize {
        self.cursor.len()
    }

    pub fn is_empty(&self) -> bool {
        self.cursor.is_empty()
    }

    /// The KV slot this sequence holds.
    pub fn slot(&self) -> usize {
        self.slot
    }

    /// Forgets positions `>= len` (see [`KvState::rollback`](super::state::KvState::rollback)).
    pub fn rollback(&mut self, len: usize) -> Result<()> {
        self.cursor.rollback(len)
    }

    /// Empties the sequence (its slot stays held).
    pub fn reset(&mut self) {
        self.cursor.reset();
    }
}

impl Drop for Sequence {
    fn drop(&mut self) {
        self.free.give_back(self.slot);
    }
}
