// spec_replace_drafts: benchmarks' fixed-acceptance drafts, chosen on the GPU because the
// host does not know the round's position when it records it. Draft i of the round whose
// seed sits at position p = state[POSITION] stands for the reference token at index
// c + i, c = p + 1 - prompt_len (the tokens committed before the round); it becomes that
// token when keep[i] != 0, else (token + 1) % vocab (a token the target rejects). Written
// into ids[1 + i] (the verify's token ids), i < drafts; drafts past the reference keep the
// assistant's. One workgroup of 64 threads, one draft each (drafts <= 8).

struct Params {
    drafts: u32,
    prompt_len: u32,
    vocab: u32,
    reference_len: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> state: array<u32>;
@group(0) @binding(2) var<storage, read> reference: array<u32>;
@group(0) @binding(3) var<storage, read> keep: array<u32>;
@group(0) @binding(4) var<storage, read_write> ids: array<u32>;

// Mirror of ops::spec_commit's state layout.
const POSITION: u32 = 1u;

@compute @workgroup_size(64)
fn main(@builtin(local_invocation_id) lid: vec3<u32>) {
    let i = lid.x;
    if (i >= params.drafts) {
        return;
    }
    let index = state[POSITION] + 1u + i - params.prompt_len;
    if (index >= params.reference_len) {
        return;
    }
    let token = reference[index];
    if (keep[i] != 0u) {
        ids[i + 1u] = token;
    } else {
        ids[i + 1u] = (token + 1u) % params.vocab;
    }
}
