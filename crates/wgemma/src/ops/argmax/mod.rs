//! Argmax over the last dim of an f32 tensor (a logits row of up to 262144 and beyond),
//! writing one u32 index per row to a GPU buffer, so the sampled token stays on the GPU.
//!
//! Two stages: `argmax_partials` (many workgroups per row, each reducing a block of
//! 256 * ITEMS elements to a (key, index) pair) and `argmax_finish` (one workgroup per row).
//! Rules (the CPU reference [`argmax_ref`] states them too): NaN is the maximum (torch
//! treats NaN as greater than everything), -0 == +0, and among equal values the lowest
//! index wins (torch.argmax returns the first occurrence).

mod reference;

pub use reference::{argmax_ref, order_key};

use crate::error::{Error, Result};
use crate::gpu::{DType, GpuContext, Kernel, KernelBuilder, Tensor};
use crate::harness::{Check, Expected, OpCase, Prepared, Rng, Values};
use rand::Rng as _;

const OP: &str = "argmax";
const WORKGROUP: u32 = 256;
/// Elements per thread in stage 1: a block is 256 * 8 = 2048 elements, so a 262144 row is
/// 128 workgroups in stage 1 and 128 pairs for stage 2.
const ITEMS_PER_THREAD: u32 = 8;

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct PartialParams {
    n: u32,
    rows: u32,
    blocks: u32,
    _pad: u32,
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct FinishParams {
    rows: u32,
    blocks: u32,
    _pad: [u32; 2],
}

/// Plans argmax of `input` (f32 [..., n], rows = product of the leading dims) into `out`
/// (u32, one element per row). Returns the two kernels, to be dispatched in order in one
/// pass; the stage-1 scratch is allocated here, once, and kept alive by their bind groups.
pub fn argmax(ctx: &GpuContext, input: &Tensor, out: &Tensor) -> Result<Vec<Kernel>> {
    argmax_blocked(ctx, input, out, ITEMS_PER_THREAD)
}

fn argmax_blocked(
    ctx: &GpuContext,
    input: &Tensor,
    out: &Tensor,
    items_per_thread: u32,
) -> Result<Vec<Kernel>> {
    if input.dtype() != DType::F32 {
        return Err(Error::invalid(
            OP,
            "dtype of input",
            "f32",
            format!("{:?}", input.dtype()),
        ));
    }
    if out.dtype() != DType::U32 {
        return Err(Error::invalid(
            OP,
            "dtype of out",
            "u32",
            format!("{:?}", out.dtype()),
        ));
    }
    let n = input.shape().last().copied().unwrap_or(0);
    if n == 0 || input.numel() == 0 {
        return Err(Error::invalid(
            OP,
            "input shape",
            "a non-empty tensor with a last dim >= 1",
            format!("{:?}", input.shape()),
        ));
    }
    let rows = input.numel() / n;
    if out.numel() != rows {
        return Err(Error::invalid(
            OP,
            format!("element count of out for input {:?}", input.shape()),
            rows,
            out.numel(),
        ));
    }
    let block = (WORKGROUP * items_per_thread) as usize;
    let blocks = n.div_ceil(block);
    let too_big = |what: &str, v: usize| Error::invalid(OP, what.to_string(), "< 2^32", v);
    if u32::try_from(input.numel()).is_err() {
        return Err(too_big("input elements", input.numel()));
    }
    let pairs = rows
        .checked_mul(blocks)
        .filter(|&p| p < (u32::MAX / 2) as usize)
        .ok_or_else(|| too_big("rows * blocks", rows.saturating_mul(blocks)))?;
    let scratch = Tensor::zeros(ctx, "argmax partials", &[pairs, 2], DType::U32)?;
    let stage1 = KernelBuilder::new(ctx, "argmax_partials")
        .constant("ITEMS", items_per_thread as u64)
        .uniform(&PartialParams {
            n: n as u32,
            rows: rows as u32,
            blocks: blocks as u32,
            _pad: 0,
        })
        .tensor(input)
        .tensor(&scratch)
        .build_1d(pairs as u64)?;
    let stage2 = KernelBuilder::new(ctx, "argmax_finish")
        .uniform(&FinishParams {
            rows: rows as u32,
            blocks: blocks as u32,
            _pad: [0; 2],
        })
        .tensor(&scratch)
        .tensor(out)
        .build_1d(rows as u64)?;
    Ok(vec![stage1, stage2])
}

/// Harness case: `rows` rows of `n` values drawn from a small integer range (so ties are
/// common and the lowest-index rule is exercised), optionally with NaN, +-inf and +-0
/// sprinkled in.
pub struct ArgmaxCase {
    pub rows: usize,
    pub n: usize,
    pub specials: bool,
    /// Stage-1 elements per thread (the default is 8; smaller blocks test stage 2's loop
    /// over more than 256 partials with small rows).
    pub items_per_thread: u32,
}

impl ArgmaxCase {
    pub fn new(rows: usize, n: usize, specials: bool) -> Self {
        ArgmaxCase {
            rows,
            n,
            specials,
            items_per_thread: ITEMS_PER_THREAD,
        }
    }
}

impl OpCase for ArgmaxCase {
    fn name(&self) -> String {
        format!(
            "argmax rows={} n={}{}{}",
            self.rows,
            self.n,
            if self.specials { " nan/inf/zeros" } else { "" },
            if self.items_per_thread != ITEMS_PER_THREAD {
                format!(" items={}", self.items_per_thread)
            } else {
                String::new()
            }
        )
    }

    fn prepare(&self, ctx: &GpuContext, rng: &mut Rng) -> Result<Prepared> {
        let total = self.rows * self.n;
        let mut x: Vec<f32> = (0..total)
            .map(|_| rng.random_range(-64i32..64) as f32 * 0.5)
            .collect();
        if self.specials {
            let specials = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 0.0, -0.0];
            for _ in 0..(total / 64).max(1) {
                let i = rng.random_range(0..total);
                x[i] = specials[rng.random_range(0..specials.len())];
            }
        }
        let input = Tensor::from_f32(ctx, "logits", &[self.rows, self.n], &x)?;
        let out = Tensor::zeros(ctx, "argmax", &[self.rows], DType::U32)?;
        let kernels = argmax_blocked(ctx, &input, &out, self.items_per_thread)?;
        Ok(Prepared {
            kernels,
            outputs: vec![Expected {
                name: "index",
                tensor: out,
                reference: Values::U32(argmax_ref(&x, self.n)),
                check: Check::Exact,
            }],
            bytes_moved: total as u64 * 4 + self.rows as u64 * 4,
        })
    }
}

/// Random shapes: one to three rows (decode and the M = 3 verify batch), lengths across
/// one to several stage-1 blocks, with and without NaN/inf/zeros.
pub fn random_cases(rng: &mut Rng) -> Vec<Box<dyn OpCase>> {
    vec![
        Box::new(ArgmaxCase::new(
            rng.random_range(1..=3),
            rng.random_range(1..3000),
            false,
        )),
        Box::new(ArgmaxCase::new(
            rng.random_range(1..=3),
            rng.random_range(2000..20_000),
            true,
        )),
    ]
}

/// E2B: the full-vocab logits row for decode (M = 1) and the verify batch (M = 3). The
/// logits were just written by the lm_head, so reading them from L2 is the real case too.
pub fn bench_cases() -> Vec<Box<dyn OpCase>> {
    vec![
        Box::new(ArgmaxCase::new(1, 262_144, false)),
        Box::new(ArgmaxCase::new(3, 262_144, false)),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::{read_tensor_u32, run_kernels};
    use crate::harness::{assert_cases_pass, test_context};

    fn run(rows: usize, x: &[f32], items: u32) -> Vec<u32> {
        let ctx = test_context();
        let n = x.len() / rows;
        let input = Tensor::from_f32(ctx, "x", &[rows, n], x).unwrap();
        let out = Tensor::zeros(ctx, "out", &[rows], DType::U32).unwrap();
        run_kernels(ctx, &argmax_blocked(ctx, &input, &out, items).unwrap());
        pollster::block_on(read_tensor_u32(ctx, &out)).unwrap()
    }

    #[test]
    fn ties_pick_the_first_occurrence_across_blocks() {
        // Equal maxima in several stage-1 blocks (block = 256 * 1 here) and threads.
        let mut x = vec![0.0f32; 5000];
        for i in [300, 301, 2047, 4999] {
            x[i] = 7.0;
        }
        assert_eq!(run(1, &x, 1), vec![300]);
        assert_eq!(run(1, &x, 8), vec![300]);
        // Two equal maxima in the same thread's slots of one block (5 and 5 + 256).
        x[5] = 9.0;
        x[5 + 256] = 9.0;
        x[5 + 512] = 9.0;
        assert_eq!(run(1, &x, 8), vec![5]);
        // A tie between +0 and -0: they are equal, the first wins.
        let mut z = vec![-1.0f32; 600];
        z[400] = -0.0;
        z[500] = 0.0;
        assert_eq!(run(1, &z, 1), vec![400]);
    }

    #[test]
    fn nan_is_the_maximum_and_the_first_nan_wins() {
        let mut x = vec![1.0f32; 3000];
        x[10] = f32::INFINITY;
        x[2500] = f32::NAN;
        x[2900] = -f32::NAN;
        assert_eq!(run(1, &x, 1), vec![2500]);
        x[20] = f32::from_bits(0x7f80_0001); // a signalling-NaN payload
        assert_eq!(run(1, &x, 8), vec![20]);
        assert_eq!(argmax_ref(&x, 3000), vec![20]);
    }

    #[test]
    fn infinities_and_all_negative_rows() {
        let x = [
            f32::NEG_INFINITY,
            f32::NEG_INFINITY,
            -5.0,
            f32::NEG_INFINITY,
            -3.0,
            -2.0,
            f32::NEG_INFINITY,
            f32::NEG_INFINITY,
        ];
        assert_eq!(run(4, &x, 8), vec![0, 0, 1, 0]);
    }

    #[test]
    fn stage_two_loops_over_more_than_256_partials() {
        // Block = 256 elements, 100_000 / 256 = 391 partials per row.
        assert_cases_pass(
            &[
                Box::new(ArgmaxCase {
                    items_per_thread: 1,
                    ..ArgmaxCase::new(2, 100_000, true)
                }),
                Box::new(ArgmaxCase::new(1, 262_144, false)),
            ],
            0..2,
        );
    }

    #[test]
    fn folded_grids_are_bound_checked() {
        // Stage 1: 9 rows x 7 blocks = 63 workgroups; stage 2: 9 rows; both fold above 8.
        crate::harness::assert_folded_case_passes(
            &ArgmaxCase {
                items_per_thread: 1,
                ..ArgmaxCase::new(9, 1700, true)
            },
            0..2,
        );
    }

    #[test]
    fn random_cases_pass() {
        let mut rng = crate::harness::rng(11);
        for seed in 0..3 {
            assert_cases_pass(&random_cases(&mut rng), seed..seed + 1);
        }
    }

    #[test]
    fn bad_inputs_are_refused() {
        let ctx = test_context();
        let x = Tensor::zeros(ctx, "x", &[2, 8], DType::F32).unwrap();
        let xi = Tensor::zeros(ctx, "x", &[2, 8], DType::I32).unwrap();
        let empty = Tensor::zeros(ctx, "e", &[2, 0], DType::F32).unwrap();
        let out = Tensor::zeros(ctx, "out", &[2], DType::U32).unwrap();
        let out_f = Tensor::zeros(ctx, "out", &[2], DType::F32).unwrap();
        let out3 = Tensor::zeros(ctx, "out", &[3], DType::U32).unwrap();
        for r in [
            argmax(ctx, &xi, &out),
            argmax(ctx, &x, &out_f),
            argmax(ctx, &x, &out3),
            argmax(ctx, &empty, &out),
        ] {
            assert!(matches!(r, Err(Error::Invalid { op: OP, .. })), "{r:?}");
        }
        assert!(argmax(ctx, &x, &out).is_ok());
    }
}
