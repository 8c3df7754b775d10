// Attention, generic route: the split-K kernels of attention.wgsl (same bindings, entries,
// overrides, partial layout and combine) for any head_dim D that is a multiple of 4 in 4..=512
// (a multiple of 8 with KEY_FROM_V), where attention.wgsl needs a power of two. Gemma 4
// configs that HF runs may have head dims such as 24 or 48.
// What differs: the P V phase maps thread -> (vec4 column, query group) with
// step3 = WG / (D/4) groups; when D/4 does not divide WG the last WG % (D/4) threads idle
// (in attention.wgsl they would alias another group's queries), and each thread keeps up to
// ACC_N = 16 query accumulators, so a tile of gt <= min(32, 4096 / D) query heads is covered
// for every such D (floor(128 / (D/4)) * 16 >= 4096 / D). Slower than the power-of-two
// kernels: it is the fallback that makes these shapes run at all.
// Causal with an optional sliding window W (the query at position p sees keys p - W < k <= p),
// GQA (query head h reads kv head h / group), scale 1.0, f32 online softmax.
// Inputs: q [rows, heads, D] f32, row r at positions[r]; K, V cache chunk
// [kv_heads, chunk_slots, D] f32 (sliding ring: slot k % slots; full: chunked along slots).
// Entry `partial` (DIRECT: out = acc / l) and entry `combine`: as in attention.wgsl.
// Workgroups of 128 threads.

const ACC_N: u32 = 16u; // query accumulators per thread: gt <= (WG / (D/4)) * ACC_N

#include "attention_split_k.wgsli"
