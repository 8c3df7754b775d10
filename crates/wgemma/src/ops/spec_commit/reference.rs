//! The CPU reference of spec_commit.

use super::{
    CommitParams, MAX_ROUND_ROWS, STATE_POSITION, STATE_POSITIONS, STATE_RECORD, STATE_SEED,
};

/// What spec_commit writes.
#[derive(Debug, Clone, PartialEq)]
pub struct CommitOutputs {
    pub state: Vec<u32>,
    pub seed_hidden: Vec<f32>,
    pub rope_position: [u32; 2],
    pub full_end: [u32; 2],
    pub sliding_end: [u32; 2],
}

/// The longest prefix of the drafts `ids[1..=drafts]` equal to the verify's argmax rows
/// `next[0..drafts]`.
pub fn accepted_ref(next: &[u32], ids: &[u32], drafts: usize) -> usize {
    (0..drafts).take_while(|&i| ids[i + 1] == next[i]).count()
}

/// spec_commit on the host: `state` and `seed_hidden` are the buffers before the kernel
/// (entries it does not write keep their values).
pub fn spec_commit_ref(
    params: CommitParams,
    next: &[u32],
    ids: &[u32],
    hidden: &[f32],
    state: &[u32],
    seed_hidden: &[f32],
) -> CommitOutputs {
    let k = params.drafts as usize;
    let h = params.hidden as usize;
    let n = accepted_ref(next, ids, k);
    let mut state = state.to_vec();
    let mut seed = seed_hidden.to_vec();
    let off = params.hidden_offset as usize;
    seed[off..off + h].copy_from_slice(&hidden[n * h..(n + 1) * h]);
    let p = state[STATE_POSITION];
    let next_p = p + n as u32 + 1;
    state[STATE_SEED] = next[n];
    state[STATE_POSITION] = next_p;
    for r in 0..MAX_ROUND_ROWS {
        state[STATE_POSITIONS + r] = next_p + r as u32;
    }
    let record = STATE_RECORD;
    state[record] = n as u32;
    state[record + 1] = k as u32;
    state[record + 2] = p;
    state[record + 3..record + 4 + k].copy_from_slice(&next[..=k]);
    let drafts_at = record + 3 + MAX_ROUND_ROWS;
    state[drafts_at..drafts_at + k].copy_from_slice(&ids[1..=k]);
    let last = p + k as u32;
    let t0 = (last + 1).saturating_sub(params.window_rows);
    let slot = params.slot;
    CommitOutputs {
        state,
        seed_hidden: seed,
        rope_position: [next_p, slot],
        full_end: [last.min(next_p), slot],
        sliding_end: [last.min(t0 + next_p), slot],
    }
}
