// TopK fast route, exact shape: x f32 [2048] (one row, read as raw u32 bits) -> the 32
// greatest, sorted descending: values f32 [32] (the input's own bits, so -0 and NaN
// payloads survive) and indices u32 [32].
// Order: a total order on floats through a key (NaN of any payload is the greatest,
// -0 == +0, -inf < ... < +inf < NaN); equal keys: the lower index comes first. With the
// index as tie-break the order is strict, so the result is unique and bit-identical to the
// generic route's.
// One workgroup of 64 threads, everything staged through workgroup memory (keys and
// indices, 2 x 2048 u32 = 16 KiB): a bitonic sort of the 64 blocks of 32 (block b
// descending when b is even, ascending when odd), then 6 rounds that each pair blocks,
// keep the elementwise better of A[i] (descending) and B[i] (ascending), which is the top
// 32 of both as a bitonic sequence, and bitonic-merge it; the last round leaves block 0
// sorted descending. Dispatch exactly one workgroup.

const N: u32 = 2048u;
const K: u32 = 32u;
const WG: u32 = 64u;
const BLOCKS: u32 = 64u; // N / K

@group(0) @binding(0) var<storage, read> x: array<u32>;
@group(0) @binding(1) var<storage, read_write> values: array<u32>;
@group(0) @binding(2) var<storage, read_write> indices: array<u32>;

var<workgroup> keys: array<u32, N>;
var<workgroup> idx: array<u32, N>;

fn order_key(bits: u32) -> u32 {
    if ((bits & 0x7fffffffu) > 0x7f800000u) {
        return 0xffffffffu;
    }
    if (bits == 0x80000000u) {
        return 0x80000000u;
    }
    if ((bits & 0x80000000u) != 0u) {
        return ~bits;
    }
    return bits | 0x80000000u;
}

// True when the element at slot a ranks before (is greater than) the one at slot b.
fn before(a: u32, b: u32) -> bool {
    return keys[a] > keys[b] || (keys[a] == keys[b] && idx[a] < idx[b]);
}

// Orders slots lo < hi: descending puts the better element at lo.
fn compare_exchange(lo: u32, hi: u32, descending: bool) {
    if (before(hi, lo) == descending) {
        let k = keys[lo];
        let i = idx[lo];
        keys[lo] = keys[hi];
        idx[lo] = idx[hi];
        keys[hi] = k;
        idx[hi] = i;
    }
}

@compute @workgroup_size(WG)
fn main(@builtin(local_invocation_index) lid: u32) {
    for (var e = lid; e < N; e += WG) {
        keys[e] = order_key(x[e]);
        idx[e] = e;
    }
    workgroupBarrier();

    // Phase 1: bitonic sort of each block of K; direction of a compare at slot lo for
    // sequence size `size`: descending when (lo & size) == 0, so at size K the blocks
    // alternate descending / ascending.
    for (var size = 2u; size <= K; size <<= 1u) {
        for (var stride = size >> 1u; stride > 0u; stride >>= 1u) {
            for (var c = lid; c < N / 2u; c += WG) {
                let lo = (c / stride) * 2u * stride + c % stride;
                compare_exchange(lo, lo + stride, (lo & size) == 0u);
            }
            workgroupBarrier();
        }
    }

    // Phase 2: rounds r = 1..6; live blocks sit every `span` blocks (span = 2^(r-1)).
    for (var span = 1u; span < BLOCKS; span <<= 1u) {
        let pairs = BLOCKS / (2u * span);
        // Half-cleaner: A = block 2p*span (descending), B = block (2p+1)*span (ascending);
        // A[i] keeps the better of A[i], B[i].
        for (var c = lid; c < pairs * K; c += WG) {
            let p = c / K;
            let i = c % K;
            let a = 2u * p * span * K + i;
            let b = (2u * p + 1u) * span * K + i;
            if (before(b, a)) {
                keys[a] = keys[b];
                idx[a] = idx[b];
            }
        }
        workgroupBarrier();
        // Bitonic merge of each kept block; new block p descending when p is even (the
        // last round has the single block 0).
        for (var stride = K >> 1u; stride > 0u; stride >>= 1u) {
            for (var c = lid; c < pairs * (K / 2u); c += WG) {
                let p = c / (K / 2u);
                let j = c % (K / 2u);
                let lo = 2u * p * span * K + (j / stride) * 2u * stride + j % stride;
                compare_exchange(lo, lo + stride, (p & 1u) == 0u);
            }
            workgroupBarrier();
        }
    }

    if (lid < K) {
        let i = idx[lid];
        indices[lid] = i;
        values[lid] = x[i];
    }
}
