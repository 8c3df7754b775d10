// Attention over a KV cache: split-K ("flash decoding") with an f32 online softmax, scale 1.0
// (q and k are RMS-normed upstream), GQA (query head h reads kv head h / group), causal with an
// optional sliding window W: the query at position p sees keys k with p - W < k <= p (W = 0:
// full attention, 0 <= k <= p).
// Inputs: q [rows, heads, D] f32, row r at position positions[r] (rows = grid y, exact);
// K, V cache chunk [sequences, kv_heads, chunk_slots, D] f32; with sequences > 1, row r reads
// sequence positions[rows + r]'s slots (continuous batching: rows of different sequences). Key k lives in slot k % slots (sliding ring,
// one chunk) or slot k (full cache, split along slots into chunks that each fit one storage
// binding; chunk c holds slots [chunk_start, chunk_start + chunk_slots)). D is a power of two
// in 8..=512, read as vec4s.
//
// Entry `partial`: workgroup (s, r, z) with z = kv_head * head_tiles + tile; a tile is gt query
//   heads (<= 32, <= 4096 / D) of one kv head's group, for one row. The row's visible keys in
//   this chunk are cut into nwg.x contiguous splits (per = ceil(span / nwg.x) rounded up to 32);
//   the workgroup scans split s in blocks of 32 keys: scores (thread = key x query group), an
//   online-softmax update per query, then acc += p * V (thread = vec4 column x query group).
//   Override DIRECT (one split, one chunk): out = acc / l. Otherwise it writes, for split index
//   chunk_index * nwg.x + s, the partial (m, l) to part_ml[1 + split * qcount + query] and acc
//   to part_acc[(split * qcount + query) * D/4], qcount = rows * heads, and part_ml[0].x =
//   f32((chunk_index + 1) * nwg.x), the number of splits the combine merges.
//   Override KEY_FROM_V (HF attention_k_eq_v): the cache holds only V = v_norm(k_proj x); the key
//   is rebuilt as rope(k_norm_weight * V, key position) with key_rope = [k_norm_weight [D],
//   inv_freq [D/2]], so K = V layers keep one copy of the cache.
// Entry `combine`: workgroup (h, r) merges the part_ml[0] partials of query (r, h): out =
//   sum_s e^(m_s - M) acc_s / sum_s e^(m_s - M) l_s with M = max_s m_s.
// Workgroups of 128 threads. Empty splits hold m = NEG, l = 0 and weigh nothing.

const ACC_N: u32 = 8u; // vec4 accumulators per thread: QT * D/4 <= WG * ACC_N

#include "attention_split_k.wgsli"
