// q4_gemm_coop_split: the tensor-core Q4 GEMM (q4_gemm_coop.wgsli) with K split across
// SPLITS workgroups per tile, for grids too small to fill the GPU (ops/linear/
// gemm.rs plans it): the kernel is bound by each SM's throughput (~1.5 us per 32-k step of
// a tile), so a grid of fewer tiles than SMs leaves SMs idle, and SPLITS workgroups over
// K / SPLITS each spread the same steps over more of them.
//
// Each workgroup writes its whole BM x BN partial block (row-major, unchecked: the
// scratch holds every block of the dispatch) to partials[slot], slot = tile * SPLITS +
// split; q4_gemm_split_combine.wgsl, the next dispatch, sums them into y. The partials
// are the output binding (`y` of q4_gemm_io.wgsli, bound to the scratch by gemm.rs): a
// kernel that never wrote y would lose that binding from its layout.

enable f16;
enable wgpu_cooperative_matrix;

// The tile: 128 x 128, 8 subgroups of 32 x 64.
const BM: u32 = 128u;
const BN: u32 = 128u;
const WG: u32 = 256u;

#include "q4_gemm_coop_split.wgsli"
