// q4_mlp_persistent: a decode step's whole MLP block (M = 1) in ONE dispatch, native only:
//   phase A: x = norm prologue (q4_matvec_norm_prologue.wgsli), act = gelu(gate) * up with
//            [gate; up] = x W_gu^T (q4_matvec_norm_sg.wgsl with EPILOGUE 1, same geometry)
//   phase B: out = act W_down^T (the down projection; the residual add stays pending and
//            runs in the next matvec's prologue, as on the plain path)
// Phase B needs every act element, so it waits until every phase-A unit is done.
//
// Work is claimed, not assigned: a workgroup takes the next unit of a phase with an atomicAdd
// on a ticket counter, so only workgroups that are running hold work and a workgroup
// waiting at the phase boundary waits only on running ones: no deadlock whatever the grid
// (an oversized grid's extra workgroups find no tickets and leave). Phase A's finishers add
// their unit counts to `done_a` after storageBarrier() (naga: device-scope acquire-release);
// phase B's lid 0 spins on it, then storageBarrier() and the reads of act, which is
// @coherent (without it NVIDIA's L1 serves stale lines, DESIGN.md section 6). Before waiting,
// each workgroup claims its first phase-B unit and loads that unit's first weight words, so
// the fetch overlaps the wait (Hazy Research, "No Bubbles"). The last workgroup to leave
// resets the four counters for the next dispatch (every other one has left by then).
//
// Bindings: 0-9 as q4_matvec_norm_sg.wgsl (params of W_gu, resid, packed, scales, y = act
// [I] @coherent, other (unread), branch, w_branch, w_in, resid_out); 10 down packed [H,
// I/8], 11 down scales, 12 out [H], 13 sync [4] atomics (zero before the first dispatch),
// 14 down params. Geometry: 256 invocations = 8 slots of 32 lanes (one subgroup each; the
// host checks 32-lane subgroups). Phase A unit = one workgroup of the plain kernel (16 gate
// rows + their up rows); phase B unit = 32 / KSPLIT_B rows, KSPLIT_B slots per quad of 4 rows,
// each lane owning at most 2 vec4 words of act (its slice, loaded once into registers).

@group(0) @binding(4) @coherent var<storage, read_write> y: array<f32>;

#include "../linear/q4_matvec_common.wgsli"
#include "../linear/q4_matvec_norm_prologue.wgsli"
#include "../linear/q4_matvec_finish_sg.wgsli"

struct DownParams {
    n: u32,
    k: u32,
    groups: u32,
    units_a: u32,
    units_b: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(10) var<storage, read> down_packed: array<vec4<u32>>;
@group(0) @binding(11) var<storage, read> down_scales: array<u32>;
@group(0) @binding(12) var<storage, read_write> out: array<f32>;
@group(0) @binding(13) var<storage, read_write> sync: array<atomic<u32>>;
@group(0) @binding(14) var<uniform> down: DownParams;

// Slots sharing one phase-B quad, each over a strided part of K (1, 2, 4 or 8).
override KSPLIT_B: u32 = 8u;

const CLAIM_A: u32 = 0u;
const DONE_A: u32 = 1u;
const CLAIM_B: u32 = 2u;
const LEFT: u32 = 3u;

var<workgroup> wg_ticket: u32;

// lid 0's value of `v`, seen by every invocation (a workgroup barrier on each side).
fn broadcast(v: u32, lid: u32) -> u32 {
    if (lid == 0u) {
        wg_ticket = v;
    }
    return workgroupUniformLoad(&wg_ticket);
}

fn claim(counter: u32, lid: u32) -> u32 {
    var t = 0u;
    if (lid == 0u) {
        t = atomicAdd(&sync[counter], 1u);
    }
    return broadcast(t, lid);
}

fn down_scale_at(e: u32) -> f32 {
    let pair = unpack2x16float(down_scales[e >> 1u]);
    return select(pair.x, pair.y, (e & 1u) == 1u);
}

fn down_word_scales(e0: u32, k0: u32) -> vec4<f32> {
    if (GROUP % 32u == 0u) {
        return vec4<f32>(down_scale_at(e0 + k0 / GROUP));
    }
    return vec4<f32>(
        down_scale_at(e0 + k0 / GROUP),
        down_scale_at(e0 + (k0 + 8u) / GROUP),
        down_scale_at(e0 + (k0 + 16u) / GROUP),
        down_scale_at(e0 + (k0 + 24u) / GROUP),
    );
}

// The 4 rows from row0 (clamped to the last row) at vec4 word v of W_down.
fn down_words(row0: u32, v: u32) -> Words {
    let v_row = down.k / 32u;
    let last = down.n - 1u;
    let k0 = v * 32u;
    let r1 = min(row0 + 1u, last);
    let r2 = min(row0 + 2u, last);
    let r3 = min(row0 + 3u, last);
    return Words(
        down_packed[row0 * v_row + v],
        down_packed[r1 * v_row + v],
        down_packed[r2 * v_row + v],
        down_packed[r3 * v_row + v],
        down_word_scales(row0 * down.groups, k0),
        down_word_scales(r1 * down.groups, k0),
        down_word_scales(r2 * down.groups, k0),
        down_word_scales(r3 * down.groups, k0),
    );
}

// 32 activations of act (one vec4 word of a W_down row), held in registers.
struct ActWord {
    a0: vec4<f32>,
    a1: vec4<f32>,
    a2: vec4<f32>,
    a3: vec4<f32>,
    a4: vec4<f32>,
    a5: vec4<f32>,
    a6: vec4<f32>,
    a7: vec4<f32>,
}

fn act4(i: u32) -> vec4<f32> {
    return vec4<f32>(y[i], y[i + 1u], y[i + 2u], y[i + 3u]);
}

fn act_word(v: u32) -> ActWord {
    let i = v * 32u;
    return ActWord(
        act4(i),
        act4(i + 4u),
        act4(i + 8u),
        act4(i + 12u),
        act4(i + 16u),
        act4(i + 20u),
        act4(i + 24u),
        act4(i + 28u),
    );
}

// dot32 of q4_matvec_common.wgsli with x from registers.
fn dot32_act(w: vec4<u32>, s: vec4<f32>, a: ActWord) -> f32 {
    return s.x * (dot(lo4(w.x), a.a0) + dot(hi4(w.x), a.a1))
        + s.y * (dot(lo4(w.y), a.a2) + dot(hi4(w.y), a.a3))
        + s.z * (dot(lo4(w.z), a.a4) + dot(hi4(w.z), a.a5))
        + s.w * (dot(lo4(w.w), a.a6) + dot(hi4(w.w), a.a7));
}

fn add_words(p: vec4<f32>, w: Words, a: ActWord) -> vec4<f32> {
    return p + vec4<f32>(
        dot32_act(w.w0, w.s0, a),
        dot32_act(w.w1, w.s1, a),
        dot32_act(w.w2, w.s2, a),
        dot32_act(w.w3, w.s3, a),
    );
}

// First row of the lane's quad in phase-B unit u.
fn down_row0(u: u32, lid: u32) -> u32 {
    return u * (32u / KSPLIT_B) + (lid / 32u / KSPLIT_B) * 4u;
}

// One phase-B unit: the lane's part of its quad's 4 rows (words v0 and v0 + 32 KSPLIT_B,
// the first given), reduced over the slot, the parts summed in order by the quad's first
// slot (as q4_matvec_finish_sg.wgsl does), written to out.
fn down_unit(u: u32, lid: u32, first: Words, act0: ActWord, act1: ActWord) {
    let lane = lid % 32u;
    let slot = lid / 32u;
    let v0 = (slot % KSPLIT_B) * 32u + lane;
    let v1 = v0 + 32u * KSPLIT_B;
    let row0 = down_row0(u, lid);
    let v_row = down.k / 32u;
    var p = vec4<f32>(0.0);
    if (row0 < down.n && v0 < v_row) {
        p = add_words(p, first, act0);
        if (v1 < v_row) {
            p = add_words(p, down_words(row0, v1), act1);
        }
    }
    let total = subgroupAdd(p);
    var mine = total.x;
    if (lane == 1u) {
        mine = total.y;
    } else if (lane == 2u) {
        mine = total.z;
    } else if (lane == 3u) {
        mine = total.w;
    }
    let n = row0 + lane;
    let keep = lane < 4u && n < down.n;
    if (keep) {
        pair_totals[slot * 4u + lane] = vec4<f32>(mine);
    }
    workgroupBarrier();
    if (keep && slot % KSPLIT_B == 0u) {
        var sum = pair_totals[slot * 4u + lane].x;
        for (var j = 1u; j < KSPLIT_B; j++) {
            sum += pair_totals[(slot + j) * 4u + lane].x;
        }
        out[n] = sum;
    }
}

fn first_down_words(u: u32, lid: u32) -> Words {
    let v0 = ((lid / 32u) % KSPLIT_B) * 32u + lid % 32u;
    let row0 = down_row0(u, lid);
    if (u < down.units_b && row0 < down.n && v0 < down.k / 32u) {
        return down_words(row0, v0);
    }
    let z = vec4<u32>(0u);
    let f = vec4<f32>(0.0);
    return Words(z, z, z, z, f, f, f, f);
}

@compute @workgroup_size(WG)
fn main(
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let lane = lid % LPR;
    // Phase A: gate_up + GeGLU over claimed units; the prologue once per workgroup.
    var unit = claim(CLAIM_A, lid);
    if (unit < down.units_a) {
        let quad = lid / LPR / KSPLIT;
        let part = (lid / LPR) % KSPLIT;
        var rows = unit_rows(unit, quad);
        var words = first_words(rows, part, lane);
        // Ticket 0's workgroup writes the updated residual (exactly one does).
        norm_prologue(unit, lid);
        var units_done = 0u;
        loop {
            // The next ticket is requested now and read after this unit's work.
            var next = 0u;
            if (lid == 0u) {
                next = atomicAdd(&sync[CLAIM_A], 1u);
            }
            finish(unit, lid, rows, accumulate(rows, part, lane, words));
            units_done += 1u;
            unit = broadcast(next, lid);
            if (unit >= down.units_a) {
                break;
            }
            rows = unit_rows(unit, quad);
            words = first_words(rows, part, lane);
        }
        // This workgroup's act writes are visible device-wide before it counts them.
        storageBarrier();
        if (lid == 0u) {
            atomicAdd(&sync[DONE_A], units_done);
        }
    }
    // Phase B: claim a unit and fetch its first weights, then wait for all of act.
    var b = claim(CLAIM_B, lid);
    if (b < down.units_b) {
        var words = first_down_words(b, lid);
        if (lid == 0u) {
            while (atomicLoad(&sync[DONE_A]) < down.units_a) {
            }
        }
        workgroupBarrier();
        storageBarrier();
        let v0 = ((lid / 32u) % KSPLIT_B) * 32u + lane;
        let v1 = v0 + 32u * KSPLIT_B;
        let v_row = down.k / 32u;
        let zero = vec4<f32>(0.0);
        var act0 = ActWord(zero, zero, zero, zero, zero, zero, zero, zero);
        var act1 = act0;
        if (v0 < v_row) {
            act0 = act_word(v0);
        }
        if (v1 < v_row) {
            act1 = act_word(v1);
        }
        loop {
            var next = 0u;
            if (lid == 0u) {
                next = atomicAdd(&sync[CLAIM_B], 1u);
            }
            down_unit(b, lid, words, act0, act1);
            b = broadcast(next, lid);
            if (b >= down.units_b) {
                break;
            }
            words = first_down_words(b, lid);
        }
    }
    // The last workgroup out resets the counters (all others are done with them).
    if (lid == 0u) {
        let total = nwg.x * nwg.y * nwg.z;
        if (atomicAdd(&sync[LEFT], 1u) == total - 1u) {
            atomicStore(&sync[CLAIM_A], 0u);
            atomicStore(&sync[DONE_A], 0u);
            atomicStore(&sync[CLAIM_B], 0u);
            atomicStore(&sync[LEFT], 0u);
        }
    }
}
