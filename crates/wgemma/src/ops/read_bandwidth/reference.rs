//! CPU reference of the read-bandwidth probe.

use super::{PER_THREAD, WORKGROUP};

/// CPU reference: per-workgroup wrapping sums of the words each workgroup reads.
pub fn read_bandwidth_ref(words: &[u32]) -> Vec<u32> {
    let per_group = (WORKGROUP * PER_THREAD * 4) as usize;
    words
        .chunks(per_group)
        .map(|c| c.iter().fold(0u32, |a, &w| a.wrapping_add(w)))
        .collect()
}
