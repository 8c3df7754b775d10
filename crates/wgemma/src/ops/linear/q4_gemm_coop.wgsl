// q4_gemm_coop: the tensor-core Q4 GEMM (q4_gemm_coop.wgsli), one workgroup per 128 x 128
// tile over all of K, writing y directly (the planner's choice for grids that fill the GPU,
// ops/linear/gemm.rs).

enable f16;
enable wgpu_cooperative_matrix;

// The tile: 128 x 128, 8 subgroups of 32 x 64.
const BM: u32 = 128u;
const BN: u32 = 128u;
const WG: u32 = 256u;

#include "q4_gemm_coop_direct.wgsli"
