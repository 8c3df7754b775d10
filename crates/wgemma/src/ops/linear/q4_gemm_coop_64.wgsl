// q4_gemm_coop_64: the tensor-core Q4 GEMM (q4_gemm_coop.wgsli) on 64 x 128 tiles, one
// workgroup of 128 per tile over all of K, writing y directly: the planner's tile for grids
// whose 128 x 128 tiles would leave SMs idle (ops/linear/gemm.rs). Half the tile and half
// the invocations: twice the workgroups for the same GEMM, and smaller workgroups that more
// SMs (and more per SM) can hold at once.

enable f16;
enable wgpu_cooperative_matrix;

// The tile: 64 x 128, 4 subgroups of 32 x 64.
const BM: u32 = 64u;
const BN: u32 = 128u;
const WG: u32 = 128u;

#include "q4_gemm_coop_direct.wgsli"
