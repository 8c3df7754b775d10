// spec_commit: the end of a greedy speculative round, on the GPU, so that the next round can
// be recorded and submitted before the host knows how many drafts were accepted.
// After the verify forward of [seed, d1..dk] (k = params.drafts, rows 0..=k):
//   n     = the longest prefix with d_{i+1} == next[i] (next: the verify's argmax per row),
//   bonus = next[n]; the round commits next[0..=n] (the accepted drafts, then the bonus).
// Writes:
//   state[SEED] = bonus, state[POSITION] = p + n + 1 (p: this round's seed position, read
//   from state[POSITION]), state[POSITIONS + i] = p + n + 1 + i (the next verify's rows,
//   copied into its positions buffer), and the record the host reads one round late:
//   state[RECORD..] = [n, k, p, next[0..=k], d1..dk] (unused entries keep old values);
//   seed_hidden[hidden_offset + j] = hidden[n * H + j] (row n of the verify's final-normed
//   hidden states: the next round's first draft step starts from it);
//   the assistant's view of the next round (DraftView::hf with R = p + k, M = k + 1):
//   rope_position = P' = p + n + 1, full_end = min(R, P'), sliding_end = min(R, t0 + P'),
//   t0 = max(0, R + 1 - window_rows) (window_rows = W_target - 1 + M, saturated), each
//   followed by the target sequence's KV slot.
// Geometry: 1-D grid (maybe folded to 2-D) of 256-thread workgroups, one hidden element per
// thread; every thread computes n itself (k <= 8 compares); thread 0 writes the scalars.
// Nothing it reads is written by it except state[POSITION], which only thread 0 touches.

struct Params {
    drafts: u32,
    hidden: u32,
    hidden_offset: u32,
    window_rows: u32,
    slot: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> next: array<u32>;
@group(0) @binding(2) var<storage, read> ids: array<u32>;
@group(0) @binding(3) var<storage, read> hidden: array<f32>;
@group(0) @binding(4) var<storage, read_write> state: array<u32>;
@group(0) @binding(5) var<storage, read_write> seed_hidden: array<f32>;
@group(0) @binding(6) var<storage, read_write> rope_position: array<u32>;
@group(0) @binding(7) var<storage, read_write> full_end: array<u32>;
@group(0) @binding(8) var<storage, read_write> sliding_end: array<u32>;

const WG: u32 = 256u;
// Mirrors of ops::spec_commit's MAX_ROUND_ROWS and state layout.
const MAX_ROWS: u32 = 9u;
const SEED: u32 = 0u;
const POSITION: u32 = 1u;
const POSITIONS: u32 = 2u;
const RECORD: u32 = 11u;
const RECORD_TOKENS: u32 = 14u;
const RECORD_DRAFTS: u32 = 23u;

fn accepted() -> u32 {
    var n = 0u;
    loop {
        if (n >= params.drafts) {
            break;
        }
        if (ids[n + 1u] != next[n]) {
            break;
        }
        n = n + 1u;
    }
    return n;
}

@compute @workgroup_size(256)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_id) lid: vec3<u32>,
) {
    let n = accepted();
    let i = (wid.x + wid.y * nwg.x) * WG + lid.x;
    if (i < params.hidden) {
        seed_hidden[params.hidden_offset + i] = hidden[n * params.hidden + i];
    }
    if (i != 0u) {
        return;
    }
    let p = state[POSITION];
    let next_p = p + n + 1u;
    state[SEED] = next[n];
    state[POSITION] = next_p;
    for (var r = 0u; r < MAX_ROWS; r = r + 1u) {
        state[POSITIONS + r] = next_p + r;
    }
    state[RECORD] = n;
    state[RECORD + 1u] = params.drafts;
    state[RECORD + 2u] = p;
    for (var r = 0u; r <= params.drafts; r = r + 1u) {
        state[RECORD_TOKENS + r] = next[r];
    }
    for (var r = 0u; r < params.drafts; r = r + 1u) {
        state[RECORD_DRAFTS + r] = ids[r + 1u];
    }
    let last = p + params.drafts;
    var t0 = 0u;
    if (last + 1u > params.window_rows) {
        t0 = last + 1u - params.window_rows;
    }
    rope_position[0] = next_p;
    rope_position[1] = params.slot;
    full_end[0] = min(last, next_p);
    full_end[1] = params.slot;
    sliding_end[0] = min(last, t0 + next_p);
    sliding_end[1] = params.slot;
}
