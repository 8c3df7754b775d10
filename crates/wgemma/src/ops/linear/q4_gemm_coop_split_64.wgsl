// q4_gemm_coop_split_64: q4_gemm_coop_split.wgsl on 64 x 128 tiles (4 subgroups of 32 x 64),
// for grids whose 128 x 128 tiles would leave SMs idle (ops/linear/gemm.rs); its partial
// blocks are 64 x 128, summed by q4_gemm_split_combine.wgsl with TILE_M = 64.

enable f16;
enable wgpu_cooperative_matrix;

// The tile: 64 x 128, 4 subgroups of 32 x 64.
const BM: u32 = 64u;
const BN: u32 = 128u;
const WG: u32 = 128u;

#include "q4_gemm_coop_split.wgsli"
