//! Harness cases of the persistent MLP (`wgemma ops check --filter persistent_mlp`): E2B's
//! two MLP widths at the default grid, and small shapes at grids of 1 (one workgroup
//! claims every unit) and far above the units (most workgroups find no ticket), against
//! the CPU reference. Offered only where the device passes the kernel's device guards.

use super::reference::{persistent_mlp_ref, MlpInputs};
use super::{device_guards, q4_mlp_persistent, DEFAULT_PERSISTENT_MLP_WORKGROUPS};
use crate::error::Result;
use crate::gpu::{DType, GpuContext, Tensor};
use crate::harness::{Check, Expected, OpCase, Prepared, Rng, Values};
use crate::ops::linear::{quantize_q4, NormPrologue, NormPrologueMode, Q4Host, Q4Weight};
use rand::Rng as _;

/// One persistent MLP step: hidden H, intermediate I, Q4 group, prologue mode, grid.
#[derive(Debug, Clone)]
pub struct PersistentMlpCase {
    pub hidden: usize,
    pub inter: usize,
    pub group: usize,
    pub mode: NormPrologueMode,
    pub workgroups: u32,
}

/// The cases `wgemma ops check` runs where the device passes the guards (none elsewhere).
pub fn check_cases(ctx: &GpuContext) -> Vec<Box<dyn OpCase>> {
    if !device_guards(ctx).is_empty() {
        return Vec::new();
    }
    let case = |hidden, inter, mode, workgroups| -> Box<dyn OpCase> {
        Box::new(PersistentMlpCase {
            hidden,
            inter,
            group: 32,
            mode,
            workgroups,
        })
    };
    let grid = DEFAULT_PERSISTENT_MLP_WORKGROUPS;
    vec![
        case(1536, 6144, NormPrologueMode::AddNorm, grid),
        case(1536, 12288, NormPrologueMode::AddNorm, grid),
        case(1536, 6144, NormPrologueMode::AddNorm, 132),
        case(256, 512, NormPrologueMode::Norm, 1),
        case(256, 1024, NormPrologueMode::Add, 2048),
        case(512, 2048, NormPrologueMode::AddNorm, 7),
    ]
}

fn random_weight(rng: &mut Rng, n: usize, k: usize, group: usize) -> Result<Q4Host> {
    let scale = 1.0 / (k as f32).sqrt();
    let w: Vec<f32> = (0..n * k)
        .map(|_| rng.random_range(-2.0f32..2.0) * scale)
        .collect();
    quantize_q4(&w, n, k, group)
}

impl OpCase for PersistentMlpCase {
    fn name(&self) -> String {
        format!(
            "persistent_mlp h={} i={} g={} {:?} grid={}",
            self.hidden, self.inter, self.group, self.mode, self.workgroups
        )
    }

    fn prepare(&self, ctx: &GpuContext, rng: &mut Rng) -> Result<Prepared> {
        let (h, i) = (self.hidden, self.inter);
        let mut vector = |len: usize, lo: f32, hi: f32| -> Vec<f32> {
            (0..len).map(|_| rng.random_range(lo..hi)).collect()
        };
        let resid = vector(h, -3.0, 3.0);
        let branch = vector(h, -2.0, 2.0);
        let w_branch = vector(h, 0.5, 1.5);
        let w_in = vector(h, 0.5, 1.5);
        let gate_up_host = random_weight(rng, 2 * i, h, self.group)?;
        let down_host = random_weight(rng, h, i, self.group)?;
        let (eps, out_scale) = (1e-6f32, 0.875f32);
        let t = |label: &str, data: &[f32]| Tensor::from_f32(ctx, label, &[1, data.len()], data);
        let (t_resid, t_branch) = (t("resid", &resid)?, t("branch", &branch)?);
        let (t_w_branch, t_w_in) = (t("w_branch", &w_branch)?, t("w_in", &w_in)?);
        let zeros = |label: &str, len: usize| Tensor::zeros(ctx, label, &[1, len], DType::F32);
        let (act, out, resid_out) = (zeros("act", i)?, zeros("out", h)?, zeros("resid_out", h)?);
        let adds = self.mode != NormPrologueMode::Norm;
        let prologue = NormPrologue {
            mode: self.mode,
            resid: &t_resid,
            branch: adds.then_some((&t_branch, &t_w_branch)),
            w_in: (self.mode != NormPrologueMode::Add).then_some(&t_w_in),
            eps,
            out_scale: if adds { out_scale } else { 1.0 },
            resid_out: adds.then_some(&resid_out),
        };
        let gate_up = Q4Weight::upload(ctx, &gate_up_host)?;
        let down = Q4Weight::upload(ctx, &down_host)?;
        let kernel =
            q4_mlp_persistent(ctx, &prologue, &gate_up, &down, &act, &out, self.workgroups)?;
        let reference = persistent_mlp_ref(
            &MlpInputs {
                mode: self.mode,
                resid: &resid,
                branch: &branch,
                w_branch: &w_branch,
                w_in: &w_in,
                eps,
                out_scale: prologue.out_scale,
            },
            &gate_up_host,
            &down_host,
        );
        let mut outputs = vec![
            Expected {
                name: "act",
                tensor: act,
                reference: Values::F32(reference.act),
                check: reference.act_check,
            },
            Expected {
                name: "out",
                tensor: out,
                reference: Values::F32(reference.out),
                check: reference.out_check,
            },
        ];
        if adds {
            outputs.push(Expected {
                name: "resid_out",
                tensor: resid_out,
                reference: Values::F32(reference.resid_out),
                // rmsnorm_add's own bound: a few ulps of values up to ~6.
                check: Check::Close {
                    max_abs: 1e-5,
                    nmse: 1e-11,
                },
            });
        }
        Ok(Prepared {
            kernels: vec![kernel],
            outputs,
            bytes_moved: gate_up.bytes() + down.bytes() + 4 * (4 * h + i) as u64,
        })
    }
}
