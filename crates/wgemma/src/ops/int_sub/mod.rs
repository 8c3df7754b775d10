//! Subtraction `c = a - b`, all-int or all-float: i32 (and u32) with wrapping arithmetic
//! (`i32::MIN - 1 == i32::MAX`, like `i32::wrapping_sub`), or f32. Mixed dtypes are
//! refused with [`Error::Invalid`]: silently converting an integer tensor would hide a bug
//! upstream (token ids or positions are never meant to meet floats here).

mod reference;

pub use reference::{sub_f32_ref, sub_i32_ref, sub_u32_ref};

use crate::error::{Error, Result};
use crate::gpu::{workgroups_for, DType, GpuContext, Kernel, KernelBuilder, Tensor};
use crate::harness::{Check, Expected, OpCase, Prepared, Rng, Values};
use rand::Rng as _;

const OP: &str = "int_sub";
const WORKGROUP: u32 = 256;

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    n: u32,
    _pad: [u32; 3],
}

/// `c = a - b` elementwise over tensors of one element count. All three tensors must be
/// i32, all u32, or all f32 (integers wrap).
pub fn sub(ctx: &GpuContext, a: &Tensor, b: &Tensor, c: &Tensor) -> Result<Kernel> {
    let dtypes = [a.dtype(), b.dtype(), c.dtype()];
    let (shader, entry) = match dtypes {
        [DType::I32, DType::I32, DType::I32] | [DType::U32, DType::U32, DType::U32] => {
            ("int_sub", "sub_i32")
        }
        [DType::F32, DType::F32, DType::F32] => ("float_sub", "main"),
        _ => {
            return Err(Error::invalid(
                OP,
                "dtypes of a, b, c (mixed int/float is refused; cast explicitly)",
                "all i32, all u32 or all f32",
                format!("a={:?} b={:?} c={:?}", dtypes[0], dtypes[1], dtypes[2]),
            ))
        }
    };
    let n = a.numel();
    for (t, what) in [(b, "element count of b"), (c, "element count of c")] {
        if t.numel() != n {
            return Err(Error::invalid(OP, what, n, t.numel()));
        }
    }
    let n32 = u32::try_from(n).map_err(|_| Error::invalid(OP, "element count", "< 2^32", n))?;
    KernelBuilder::new(ctx, shader)
        .entry(entry)
        .uniform(&Params {
            n: n32,
            _pad: [0; 3],
        })
        .tensor(a)
        .tensor(b)
        .tensor(c)
        .build_1d(workgroups_for(n as u64, WORKGROUP))
}

/// Harness case: `n` random elements of `dtype` (integers over their whole range, so many
/// subtractions overflow and must wrap).
pub struct SubCase {
    pub dtype: DType,
    pub n: usize,
}

impl OpCase for SubCase {
    fn name(&self) -> String {
        format!("int_sub {:?} n={}", self.dtype, self.n)
    }

    fn prepare(&self, ctx: &GpuContext, rng: &mut Rng) -> Result<Prepared> {
        let shape = [self.n];
        let c = Tensor::zeros(ctx, "c", &shape, self.dtype)?;
        let (ta, tb, reference) = match self.dtype {
            DType::I32 => {
                let a: Vec<i32> = (0..self.n).map(|_| rng.random()).collect();
                let b: Vec<i32> = (0..self.n).map(|_| rng.random()).collect();
                (
                    Tensor::from_i32(ctx, "a", &shape, &a)?,
                    Tensor::from_i32(ctx, "b", &shape, &b)?,
                    Values::I32(sub_i32_ref(&a, &b)),
                )
            }
            DType::U32 => {
                let a: Vec<u32> = (0..self.n).map(|_| rng.random()).collect();
                let b: Vec<u32> = (0..self.n).map(|_| rng.random()).collect();
                (
                    Tensor::from_u32(ctx, "a", &shape, &a)?,
                    Tensor::from_u32(ctx, "b", &shape, &b)?,
                    Values::U32(sub_u32_ref(&a, &b)),
                )
            }
            DType::F32 => {
                let a: Vec<f32> = (0..self.n).map(|_| rng.random_range(-4.0..4.0)).collect();
                let b: Vec<f32> = (0..self.n).map(|_| rng.random_range(-4.0..4.0)).collect();
                (
                    Tensor::from_f32(ctx, "a", &shape, &a)?,
                    Tensor::from_f32(ctx, "b", &shape, &b)?,
                    Values::F32(sub_f32_ref(&a, &b)),
                )
            }
            DType::F16 => return Err(Error::invalid(OP, "case dtype", "i32, u32 or f32", "F16")),
        };
        Ok(Prepared {
            kernels: vec![sub(ctx, &ta, &tb, &c)?],
            outputs: vec![Expected {
                name: "c",
                tensor: c,
                reference,
                check: Check::Exact,
            }],
            bytes_moved: 3 * 4 * self.n as u64,
        })
    }
}

/// Cases over random sizes for each supported dtype.
pub fn random_cases(rng: &mut Rng) -> Vec<Box<dyn OpCase>> {
    [DType::I32, DType::U32, DType::F32]
        .into_iter()
        .map(|dtype| {
            Box::new(SubCase {
                dtype,
                n: rng.random_range(1..5000),
            }) as Box<dyn OpCase>
        })
        .collect()
}

/// E2B-shaped: a per-token i32 vector (positions / ids of a verify batch are tiny; the
/// vocab-sized row is the largest integer vector the runtime handles).
pub fn bench_cases() -> Vec<Box<dyn OpCase>> {
    vec![Box::new(SubCase {
        dtype: DType::I32,
        n: 262_144,
    })]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::{read_tensor_i32, run_kernels};
    use crate::harness::{assert_cases_pass, test_context};

    #[test]
    fn i32_wraps_at_the_edges() {
        let ctx = test_context();
        let a = [i32::MIN, i32::MAX, 0, i32::MIN, -1, 5, i32::MAX, i32::MIN];
        let b = [1, -1, i32::MIN, i32::MIN, i32::MAX, 7, i32::MIN, i32::MAX];
        let ta = Tensor::from_i32(ctx, "a", &[8], &a).unwrap();
        let tb = Tensor::from_i32(ctx, "b", &[8], &b).unwrap();
        let tc = Tensor::zeros(ctx, "c", &[8], DType::I32).unwrap();
        run_kernels(ctx, &[sub(ctx, &ta, &tb, &tc).unwrap()]);
        let got = pollster::block_on(read_tensor_i32(ctx, &tc)).unwrap();
        assert_eq!(
            got,
            vec![i32::MAX, i32::MIN, i32::MIN, 0, i32::MIN, -2, -1, 1]
        );
        assert_eq!(got, sub_i32_ref(&a, &b));
    }

    #[test]
    fn mixed_dtypes_are_refused() {
        let ctx = test_context();
        let i = Tensor::zeros(ctx, "i", &[4], DType::I32).unwrap();
        let u = Tensor::zeros(ctx, "u", &[4], DType::U32).unwrap();
        let f = Tensor::zeros(ctx, "f", &[4], DType::F32).unwrap();
        let h = Tensor::zeros(ctx, "h", &[4], DType::F16).unwrap();
        for (a, b, c) in [
            (&i, &f, &i),
            (&f, &i, &f),
            (&i, &i, &f),
            (&f, &f, &i),
            (&i, &u, &i),
            (&h, &h, &h),
        ] {
            match sub(ctx, a, b, c) {
                Err(Error::Invalid { op, found, .. }) => {
                    assert_eq!(op, OP);
                    assert!(found.contains("a="), "{found}");
                }
                other => panic!("expected Invalid, got {other:?}"),
            }
        }
        assert!(sub(ctx, &i, &i, &i).is_ok());
        assert!(sub(ctx, &f, &f, &f).is_ok());
    }

    #[test]
    fn element_count_mismatch_is_refused() {
        let ctx = test_context();
        let a = Tensor::zeros(ctx, "a", &[4], DType::I32).unwrap();
        let b = Tensor::zeros(ctx, "b", &[5], DType::I32).unwrap();
        assert!(matches!(sub(ctx, &a, &b, &a), Err(Error::Invalid { .. })));
    }

    #[test]
    fn folded_grids_are_bound_checked() {
        for dtype in [DType::I32, DType::F32] {
            crate::harness::assert_folded_case_passes(&SubCase { dtype, n: 5000 }, 0..2);
        }
    }

    #[test]
    fn random_cases_pass_with_partial_workgroups() {
        let mut cases = random_cases(&mut crate::harness::rng(7));
        cases.push(Box::new(SubCase {
            dtype: DType::I32,
            n: 257,
        }));
        cases.extend(bench_cases());
        assert_cases_pass(&cases, 0..2);
    }
}
