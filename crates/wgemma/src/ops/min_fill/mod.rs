//! Min-fill: `dst[..] = min(src) - 1`, HF's mask value for the tokens the MTP assistant's
//! centroid head did not select (`Gemma4AssistantMaskedEmbedder`: `output =
//! torch.full(..., selected_logits.min() - 1)`, then the selected logits are scattered
//! over it). One dispatch: every workgroup reduces `src` (the 4096 selected logits at E2B
//! shapes) and fills its block of `dst` (256 x 16 elements).
//!
//! Rules (the CPU reference [`min_fill_ref`] states them too): the min runs over ALL of
//! `src` (HF takes one min over the whole tensor, not per row); a NaN in `src` makes the
//! fill NaN (torch.min propagates NaN); the subtraction is one f32 operation, which equals
//! HF's f64 `min.item() - 1.0` rounded back to f32.

mod reference;

pub use reference::min_fill_ref;

use crate::error::{Error, Result};
use crate::gpu::{workgroups_for, DType, GpuContext, Kernel, KernelBuilder, Tensor};
use crate::harness::{Check, Expected, OpCase, Prepared, Rng, Values};
use rand::Rng as _;

const SHADER: &str = "min_fill";
const WORKGROUP: u32 = 256;
const ITEMS: u32 = 16;

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    n_src: u32,
    n_dst: u32,
    _pad: [u32; 2],
}

/// Plans `dst[i] = min(src) - 1` for every element of `dst` (both f32, any shapes, `src`
/// non-empty, distinct buffers).
pub fn min_fill(ctx: &GpuContext, src: &Tensor, dst: &Tensor) -> Result<Kernel> {
    for (t, what) in [(src, "dtype of src"), (dst, "dtype of dst")] {
        if t.dtype() != DType::F32 {
            return Err(Error::invalid(
                SHADER,
                what,
                "f32",
                format!("{:?}", t.dtype()),
            ));
        }
    }
    if src.numel() == 0 || dst.numel() == 0 {
        return Err(Error::invalid(
            SHADER,
            "element counts of src and dst",
            ">= 1 each",
            format!("{} and {}", src.numel(), dst.numel()),
        ));
    }
    if src.buffer() == dst.buffer() {
        return Err(Error::invalid(
            SHADER,
            "dst",
            "a tensor other than src",
            "src itself",
        ));
    }
    let to_u32 = |what: &str, n: usize| {
        u32::try_from(n).map_err(|_| Error::invalid(SHADER, what.to_string(), "< 2^32", n))
    };
    let params = Params {
        n_src: to_u32("elements of src", src.numel())?,
        n_dst: to_u32("elements of dst", dst.numel())?,
        _pad: [0; 2],
    };
    KernelBuilder::new(ctx, SHADER)
        .uniform(&params)
        .tensor(src)
        .tensor(dst)
        .build_1d(workgroups_for(dst.numel() as u64, WORKGROUP * ITEMS))
}

/// Harness case: `n_src` random values (optionally with a NaN or -inf) filling `n_dst`.
pub struct MinFillCase {
    pub n_src: usize,
    pub n_dst: usize,
    pub special: Option<f32>,
}

impl OpCase for MinFillCase {
    fn name(&self) -> String {
        format!(
            "min_fill n_src={} n_dst={}{}",
            self.n_src,
            self.n_dst,
            self.special.map_or(String::new(), |v| format!(" with {v}"))
        )
    }

    fn prepare(&self, ctx: &GpuContext, rng: &mut Rng) -> Result<Prepared> {
        let mut x: Vec<f32> = (0..self.n_src)
            .map(|_| rng.random_range(-50.0..50.0))
            .collect();
        if let Some(v) = self.special {
            let i = rng.random_range(0..self.n_src);
            x[i] = v;
        }
        let src = Tensor::from_f32(ctx, "selected", &[1, self.n_src], &x)?;
        // Garbage in dst: every element must be overwritten.
        let garbage: Vec<f32> = (0..self.n_dst).map(|i| i as f32).collect();
        let dst = Tensor::from_f32(ctx, "logits", &[1, self.n_dst], &garbage)?;
        Ok(Prepared {
            kernels: vec![min_fill(ctx, &src, &dst)?],
            outputs: vec![Expected {
                name: "dst",
                tensor: dst,
                reference: Values::F32(min_fill_ref(&x, self.n_dst)),
                check: Check::Exact,
            }],
            bytes_moved: 4 * (self.n_dst + self.n_src) as u64,
        })
    }
}

/// Random sizes, with and without a NaN / -inf in `src`.
pub fn random_cases(rng: &mut Rng) -> Vec<Box<dyn OpCase>> {
    [None, Some(f32::NAN), Some(f32::NEG_INFINITY)]
        .into_iter()
        .map(|special| {
            Box::new(MinFillCase {
                n_src: rng.random_range(1..5000),
                n_dst: rng.random_range(1..70_000),
                special,
            }) as Box<dyn OpCase>
        })
        .collect()
}

/// E2B's centroid head: 4096 selected logits into a 262144 row.
pub fn bench_cases() -> Vec<Box<dyn OpCase>> {
    vec![Box::new(MinFillCase {
        n_src: 4096,
        n_dst: 262_144,
        special: None,
    })]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::{read_tensor_f32, run_kernels, ContextOptions};
    use crate::harness::{assert_cases_pass, check, test_context};

    #[test]
    fn matches_reference_over_sizes_and_specials() {
        let cases: Vec<Box<dyn OpCase>> = [(1, 1), (4096, 262_144), (257, 4097), (3, 65_537)]
            .into_iter()
            .flat_map(|(n_src, n_dst)| {
                [None, Some(f32::NAN), Some(f32::NEG_INFINITY)].map(|special| {
                    Box::new(MinFillCase {
                        n_src,
                        n_dst,
                        special,
                    }) as Box<dyn OpCase>
                })
            })
            .collect();
        assert_cases_pass(&cases, 0..2);
    }

    #[test]
    fn known_values() {
        let ctx = test_context();
        let src = Tensor::from_f32(ctx, "s", &[4], &[3.5, -2.25, 7.0, -0.0]).unwrap();
        let dst = Tensor::zeros(ctx, "d", &[5000], DType::F32).unwrap();
        run_kernels(ctx, &[min_fill(ctx, &src, &dst).unwrap()]);
        let got = pollster::block_on(read_tensor_f32(ctx, &dst)).unwrap();
        assert!(got.iter().all(|&v| v == -3.25), "{:?}", &got[..4]);
    }

    #[test]
    fn rejects_bad_inputs() {
        let ctx = test_context();
        let x = Tensor::zeros(ctx, "x", &[8], DType::F32).unwrap();
        let y = Tensor::zeros(ctx, "y", &[8], DType::F32).unwrap();
        let invalid = |r: Result<Kernel>, what: &str| match r {
            Err(Error::Invalid { what: w, .. }) => assert!(w.contains(what), "{w} !~ {what}"),
            other => panic!("expected Invalid({what}), got {other:?}"),
        };
        invalid(min_fill(ctx, &x, &x), "dst");
        let xi = Tensor::zeros(ctx, "xi", &[8], DType::U32).unwrap();
        invalid(min_fill(ctx, &xi, &y), "dtype of src");
        invalid(min_fill(ctx, &x, &xi), "dtype of dst");
        let empty = Tensor::zeros(ctx, "e", &[0], DType::F32).unwrap();
        invalid(min_fill(ctx, &empty, &y), "element counts");
    }

    #[test]
    fn folded_grid_covers_every_element() {
        let ctx = GpuContext::new_blocking(ContextOptions {
            max_workgroups_per_dimension: Some(4),
            ..Default::default()
        })
        .unwrap();
        // 40000 / 4096 -> 10 workgroups -> a 4 x 3 grid.
        let case = MinFillCase {
            n_src: 100,
            n_dst: 40_000,
            special: None,
        };
        let report = pollster::block_on(check(&ctx, &case, 1)).unwrap();
        assert!(report.pass(), "{report}");
    }
}
