//! The activations of the int8 prefill GEMM ([`super::LinearRoute::Q4GemmInt8`]): x
//! quantised per block of 32 once per linear (`q8_quantize_rows.wgsl`, the int8 matvecs'
//! own quantiser) into a scratch every int8 GEMM shares, read by each row chunk's
//! `q4_gemm_int8.wgsl`.

use crate::error::Result;
use crate::gpu::{DType, GpuContext, Kernel, KernelBuilder, Tensor};

/// Blocks of 32 one quantiser workgroup stages (one per invocation; even, so that a
/// workgroup writes whole pairs of (d, 8 sum q)).
const CHUNK_BLOCKS: usize = 64;

/// Where the quantised rows of `m` x `k` lie in the scratch, in vec4<u32>: the packed bytes
/// (2 per block) first, then the (d, 8 sum q) pairs (one vec4 per two blocks of a row).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Int8Rows {
    /// vec4 index of the first (d, 8 sum q) pair.
    pub d_base: usize,
    /// vec4s in all.
    pub vec4s: usize,
}

impl Int8Rows {
    pub fn of(m: usize, k: usize) -> Int8Rows {
        let blocks = k / 32;
        let d_base = 2 * m * blocks;
        Int8Rows {
            d_base,
            vec4s: d_base + m * blocks.div_ceil(2),
        }
    }
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct QuantizeParams {
    m: u32,
    k: u32,
    chunks: u32,
    d_base: u32,
}

/// The quantiser's kernel for x `[m, k]` (K % 32 == 0, checked by the route's guard) and
/// the scratch it writes (shared by every int8 GEMM: each linear quantises, then its GEMMs
/// read, before the next linear's quantiser writes; wgpu orders the dispatches).
pub(super) fn quantize_rows(
    ctx: &GpuContext,
    x: &Tensor,
    m: usize,
    k: usize,
) -> Result<(Kernel, Tensor, Int8Rows)> {
    let rows = Int8Rows::of(m, k);
    let scratch = ctx.shared_scratch("gemm_int8_activations", 4 * rows.vec4s, DType::U32)?;
    let chunks = (k / 32).div_ceil(CHUNK_BLOCKS);
    let params = QuantizeParams {
        m: m as u32,
        k: k as u32,
        chunks: chunks as u32,
        d_base: rows.d_base as u32,
    };
    let kernel = KernelBuilder::new(ctx, "q8_quantize_rows")
        .constant("CHUNK_WORDS", CHUNK_BLOCKS as u64)
        .constant("XQ_BLOCKS", CHUNK_BLOCKS as u64)
        .constant("XQ_VEC4", 2 * CHUNK_BLOCKS as u64)
        .uniform(&params)
        .tensor(x)
        .tensor(&scratch)
        .build_1d((m * chunks) as u64)?;
    Ok((kernel, scratch, rows))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_follow_the_packed_bytes_and_odd_rows_round_up() {
        // K = 1536: 48 blocks a row, 24 pairs.
        assert_eq!(
            Int8Rows::of(3, 1536),
            Int8Rows {
                d_base: 288,
                vec4s: 288 + 72
            }
        );
        // K = 96: 3 blocks, the last pair half empty.
        assert_eq!(
            Int8Rows::of(5, 96),
            Int8Rows {
                d_base: 30,
                vec4s: 30 + 10
            }
        );
    }
}
