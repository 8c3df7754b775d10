//! Logit soft-capping, `y = cap * tanh(x / cap)` (Gemma 4's `final_logit_softcapping` = 30),
//! over `[M, vocab]` logits. Routes: `inplace` when `out` is `x` (the usual use: cap the
//! logits buffer before argmax/sampling), `copy` otherwise.

mod reference;

pub use reference::softcap_ref;

use crate::error::{Error, Result};
use crate::gpu::{workgroups_for, DType, GpuContext, Kernel, KernelBuilder, Tensor};
use crate::harness::{Check, Expected, OpCase, Prepared, Rng, Values};
use rand::Rng as _;

const SHADER: &str = "softcap";
const WORKGROUP: u32 = 256;

/// Gemma 4's final logit cap.
pub const FINAL_LOGIT_SOFTCAP: f32 = 30.0;

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    n: u32,
    cap: f32,
    _pad: [u32; 2],
}

/// `out = cap * tanh(x / cap)` elementwise; `out` may be `x` (in place). `cap` must be
/// finite and > 0.
pub fn softcap(ctx: &GpuContext, x: &Tensor, out: &Tensor, cap: f32) -> Result<Kernel> {
    for (t, what) in [(x, "dtype of x"), (out, "dtype of out")] {
        if t.dtype() != DType::F32 {
            return Err(Error::invalid(
                SHADER,
                what,
                "f32",
                format!("{:?}", t.dtype()),
            ));
        }
    }
    let n = x.numel();
    if out.numel() != n {
        return Err(Error::invalid(
            SHADER,
            "element count of out",
            n,
            out.numel(),
        ));
    }
    if !(cap.is_finite() && cap > 0.0) {
        return Err(Error::invalid(SHADER, "cap", "finite and > 0", cap));
    }
    // Tensors fit one storage binding, so n < 2^30 and the flat index cannot wrap.
    let n32 = u32::try_from(n).map_err(|_| Error::invalid(SHADER, "element count", "< 2^32", n))?;
    let params = Params {
        n: n32,
        cap,
        _pad: [0; 2],
    };
    let builder = KernelBuilder::new(ctx, SHADER).uniform(&params).tensor(out);
    let builder = if out.buffer() == x.buffer() {
        builder.entry("inplace")
    } else {
        builder.entry("copy").tensor(x)
    };
    builder.build_1d(workgroups_for(n as u64, WORKGROUP))
}

/// Harness case: `m` rows of `vocab` logits, uniform in `[-range, range]`.
pub struct SoftcapCase {
    pub m: usize,
    pub vocab: usize,
    pub cap: f32,
    pub in_place: bool,
    pub range: f32,
}

impl SoftcapCase {
    pub fn new(m: usize, vocab: usize, in_place: bool) -> Self {
        SoftcapCase {
            m,
            vocab,
            cap: FINAL_LOGIT_SOFTCAP,
            in_place,
            range: 100.0,
        }
    }
}

impl OpCase for SoftcapCase {
    fn name(&self) -> String {
        format!(
            "softcap {} m={} vocab={} cap={} range={}",
            if self.in_place { "inplace" } else { "copy" },
            self.m,
            self.vocab,
            self.cap,
            self.range
        )
    }

    fn prepare(&self, ctx: &GpuContext, rng: &mut Rng) -> Result<Prepared> {
        let n = self.m * self.vocab;
        let r = self.range;
        let x: Vec<f32> = (0..n).map(|_| rng.random_range(-r..r)).collect();
        let tx = Tensor::from_f32(ctx, "logits", &[self.m, self.vocab], &x)?;
        let out = if self.in_place {
            tx.clone()
        } else {
            Tensor::zeros(ctx, "out", &[self.m, self.vocab], DType::F32)?
        };
        let kernel = softcap(ctx, &tx, &out, self.cap)?;
        Ok(Prepared {
            kernels: vec![kernel],
            outputs: vec![Expected {
                name: "out",
                tensor: out,
                reference: Values::F32(softcap_ref(&x, self.cap)),
                // About one f32 ulp of the cap (lavapipe: ~1.7e-7 * cap).
                check: Check::Close {
                    max_abs: 2e-6 * self.cap,
                    nmse: 1e-12,
                },
            }],
            bytes_moved: 2 * 4 * n as u64,
        })
    }
}

/// Both routes over random sizes.
pub fn random_cases(rng: &mut Rng) -> Vec<Box<dyn OpCase>> {
    [false, true]
        .into_iter()
        .map(|in_place| {
            let mut case =
                SoftcapCase::new(rng.random_range(1..4), rng.random_range(1..3000), in_place);
            case.cap = rng.random_range(1.0..50.0);
            Box::new(case) as Box<dyn OpCase>
        })
        .collect()
}

/// E2B logits: vocab 262144 for decode (M = 1) and a 3-row verify (MTP k = 2).
pub fn bench_cases() -> Vec<Box<dyn OpCase>> {
    vec![
        Box::new(SoftcapCase::new(1, 262_144, true)),
        Box::new(SoftcapCase::new(3, 262_144, true)),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::{read_tensor_f32, run_kernels, ContextOptions};
    use crate::harness::{assert_cases_pass, check, test_context};

    #[test]
    fn both_routes_match_reference() {
        let cases: Vec<Box<dyn OpCase>> = [(1, 1), (1, 257), (3, 1000)]
            .into_iter()
            .flat_map(|(m, v)| {
                [false, true].map(|p| Box::new(SoftcapCase::new(m, v, p)) as Box<dyn OpCase>)
            })
            .collect();
        assert_cases_pass(&cases, 0..2);
    }

    #[test]
    fn known_values_and_saturation() {
        let ctx = test_context();
        let x = [0.0f32, 30.0, -15.0, 1e4, -1e30, 3.0];
        let t = Tensor::from_f32(ctx, "x", &[x.len()], &x).unwrap();
        run_kernels(ctx, &[softcap(ctx, &t, &t, 30.0).unwrap()]);
        let got = pollster::block_on(read_tensor_f32(ctx, &t)).unwrap();
        let want = [0.0f32, 22.847_825, -13.863_515, 30.0, -30.0, 2.990_04];
        for (g, w) in got.iter().zip(want) {
            assert!((g - w).abs() < 1e-4, "{got:?} vs {want:?}");
        }
    }

    #[test]
    fn rejects_bad_inputs() {
        let ctx = test_context();
        let x = Tensor::zeros(ctx, "x", &[8], DType::F32).unwrap();
        let invalid = |r: Result<Kernel>, what: &str| match r {
            Err(Error::Invalid { what: w, .. }) => assert!(w.contains(what), "{w} !~ {what}"),
            other => panic!("expected Invalid({what}), got {other:?}"),
        };
        invalid(softcap(ctx, &x, &x, 0.0), "cap");
        invalid(softcap(ctx, &x, &x, f32::NAN), "cap");
        let short = Tensor::zeros(ctx, "s", &[7], DType::F32).unwrap();
        invalid(softcap(ctx, &x, &short, 30.0), "out");
        let xi = Tensor::zeros(ctx, "xi", &[8], DType::I32).unwrap();
        invalid(softcap(ctx, &xi, &x, 30.0), "dtype of x");
    }

    #[test]
    fn folded_grid_covers_every_element() {
        let ctx = GpuContext::new_blocking(ContextOptions {
            max_workgroups_per_dimension: Some(4),
            ..Default::default()
        })
        .unwrap();
        for in_place in [false, true] {
            let case = SoftcapCase::new(1, 2400, in_place); // 10 workgroups -> 4 x 3
            let report = pollster::block_on(check(&ctx, &case, 1)).unwrap();
            assert!(report.pass(), "{report}");
        }
    }
}
