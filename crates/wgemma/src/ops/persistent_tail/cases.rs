//! Harness cases of the persistent decode tail: the tail kernel against the CPU reference
//! of its four steps, at E2B's shapes (`ops bench` / `ops check` on a GPU) and at small
//! random ones with several grid sizes (the test suite).

use super::q4_persistent_tail;
use super::reference::{persistent_tail_ref, TailHost, TailOutputs};
use crate::error::Result;
use crate::gpu::{DType, GpuContext, Kernel, Tensor};
use crate::harness::{Check, Expected, OpCase, Prepared, Rng, Values};
use crate::ops::linear::{
    q4_linear_norm_with, q4_linear_with, quantize_q4, Epilogue, LinearOptions, NormPrologue,
    NormPrologueMode, Q4Host, Q4Weight,
};
use rand::Rng as _;

/// Harness case: one decode row through a layer tail of `hidden` x `inter` with a
/// per-layer input of `ple` in a combined input of `layers * ple`, in `workgroups`.
#[derive(Debug, Clone, Copy)]
pub struct PersistentTailCase {
    pub hidden: usize,
    pub inter: usize,
    pub ple: usize,
    pub group: usize,
    pub workgroups: u32,
    /// The workgroup-memory reduction even where subgroups exist.
    pub portable: bool,
}

/// The host data of one tail: weights and inputs.
pub struct TailData {
    pub h: Vec<f32>,
    pub attn_out: Vec<f32>,
    pub norms: [Vec<f32>; 3],
    pub gate_up: Q4Host,
    pub down: Q4Host,
    pub ple_gate: Q4Host,
    pub ple_projection: Q4Host,
    pub ple_inputs: Vec<f32>,
    pub ple_offset: usize,
    pub mlp_scale: f32,
    pub eps: f32,
}

/// The GPU side of one tail: the buffers as a decode plan uses them (`o` is the attention
/// output, then the MLP's, then the projection's) and the four separate kernels.
pub struct TailGpu {
    pub h: Tensor,
    pub h_spare: Tensor,
    pub o: Tensor,
    pub act: Tensor,
    pub gated: Tensor,
    pub kernels: [Kernel; 4],
    pub weight_bytes: u64,
}

impl TailData {
    pub fn random(case: &PersistentTailCase, rng: &mut Rng) -> Result<TailData> {
        let (d, i, p) = (case.hidden, case.inter, case.ple);
        let mut v =
            |n: usize, r: f32| -> Vec<f32> { (0..n).map(|_| rng.random_range(-r..r)).collect() };
        let h = v(d, 2.0);
        let attn_out = v(d, 3.0);
        let norms = [v(d, 1.5), v(d, 1.5), v(d, 1.5)];
        let ple_inputs = v(3 * p, 1.0);
        let w_gate_up = v(2 * i * d, 0.1);
        let w_down = v(d * i, 0.1);
        let w_ple_gate = v(p * d, 0.1);
        let w_ple_projection = v(d * p, 0.1);
        Ok(TailData {
            h,
            attn_out,
            norms,
            gate_up: quantize_q4(&w_gate_up, 2 * i, d, case.group)?,
            down: quantize_q4(&w_down, d, i, case.group)?,
            ple_gate: quantize_q4(&w_ple_gate, p, d, case.group)?,
            ple_projection: quantize_q4(&w_ple_projection, d, p, case.group)?,
            ple_inputs,
            ple_offset: p,
            mlp_scale: 0.75,
            eps: 1e-6,
        })
    }

    pub fn reference(&self) -> TailOutputs {
        persistent_tail_ref(&TailHost {
            h: &self.h,
            attn_out: &self.attn_out,
            w_post_attention: &self.norms[0],
            w_pre_feedforward: &self.norms[1],
            gate_up: &self.gate_up,
            down: &self.down,
            w_post_feedforward: &self.norms[2],
            mlp_scale: self.mlp_scale,
            ple_gate: &self.ple_gate,
            ple_projection: &self.ple_projection,
            ple_inputs: &self.ple_inputs,
            ple_offset: self.ple_offset,
            eps: self.eps,
        })
    }

    /// Uploads the data and builds the four kernels a decode plan would record.
    pub fn upload(&self, ctx: &GpuContext, portable: bool) -> Result<TailGpu> {
        let (d, i, p) = (self.h.len(), self.down.k, self.ple_gate.n);
        let options = LinearOptions {
            portable,
            ..LinearOptions::default()
        };
        let h = Tensor::from_f32(ctx, "h", &[1, d], &self.h)?;
        let h_spare = Tensor::zeros(ctx, "h_spare", &[1, d], DType::F32)?;
        let o = Tensor::from_f32(ctx, "o", &[1, d], &self.attn_out)?;
        let act = Tensor::zeros(ctx, "act", &[1, i], DType::F32)?;
        let gated = Tensor::zeros(ctx, "gated", &[1, p], DType::F32)?;
        let inputs = Tensor::from_f32(
            ctx,
            "ple_inputs",
            &[1, self.ple_inputs.len()],
            &self.ple_inputs,
        )?;
        let norm = |w: &[f32]| Tensor::from_f32(ctx, "norm", &[d], w);
        let post_attention = &norm(&self.norms[0])?;
        let pre_feedforward = &norm(&self.norms[1])?;
        let post_feedforward = &norm(&self.norms[2])?;
        let gate_up = Q4Weight::upload(ctx, &self.gate_up)?;
        let down = Q4Weight::upload(ctx, &self.down)?;
        let ple_gate = Q4Weight::upload(ctx, &self.ple_gate)?;
        let ple_projection = Q4Weight::upload(ctx, &self.ple_projection)?;
        let first = |l: crate::ops::linear::Linear| l.into_kernels().remove(0);
        let a = q4_linear_norm_with(
            ctx,
            &NormPrologue {
                mode: NormPrologueMode::AddNorm,
                resid: &h,
                branch: Some((&o, post_attention)),
                w_in: Some(pre_feedforward),
                eps: self.eps,
                out_scale: 1.0,
                resid_out: Some(&h_spare),
            },
            &gate_up,
            &act,
            Epilogue::GegluPairs,
            &options,
        )?;
        let b = q4_linear_with(ctx, &act, &down, &o, &options)?;
        let c = q4_linear_norm_with(
            ctx,
            &NormPrologue {
                mode: NormPrologueMode::Add,
                resid: &h_spare,
                branch: Some((&o, post_feedforward)),
                w_in: None,
                eps: self.eps,
                out_scale: self.mlp_scale,
                resid_out: Some(&h),
            },
            &ple_gate,
            &gated,
            Epilogue::GeluMul {
                other: &inputs,
                stride: self.ple_inputs.len(),
                offset: self.ple_offset,
            },
            &options,
        )?;
        let dd = q4_linear_with(ctx, &gated, &ple_projection, &o, &options)?;
        let weight_bytes =
            gate_up.bytes() + down.bytes() + ple_gate.bytes() + ple_projection.bytes();
        Ok(TailGpu {
            h,
            h_spare,
            o,
            act,
            gated,
            kernels: [first(a), first(b), first(c), first(dd)],
            weight_bytes,
        })
    }
}

impl TailGpu {
    /// The outputs in [`TailOutputs`] order: h', act, h'', gated, the projection.
    pub fn outputs(&self) -> [(&'static str, &Tensor); 5] {
        [
            ("h_mid", &self.h_spare),
            ("act", &self.act),
            ("h_out", &self.h),
            ("gated", &self.gated),
            ("out", &self.o),
        ]
    }
}

impl OpCase for PersistentTailCase {
    fn name(&self) -> String {
        format!(
            "persistent_tail hidden={} inter={} ple={} group={} workgroups={}{}",
            self.hidden,
            self.inter,
            self.ple,
            self.group,
            self.workgroups,
            if self.portable { " portable" } else { "" }
        )
    }

    fn prepare(&self, ctx: &GpuContext, rng: &mut Rng) -> Result<Prepared> {
        let data = TailData::random(self, rng)?;
        let gpu = data.upload(ctx, self.portable)?;
        let [a, b, c, d] = &gpu.kernels;
        let tail = q4_persistent_tail(ctx, [a, b, c, d], self.workgroups)?;
        let r = data.reference();
        let references = [r.h_mid, r.act, r.h_out, r.gated, r.out];
        let outputs = gpu
            .outputs()
            .into_iter()
            .zip(references)
            .map(|((name, tensor), reference)| Expected {
                name,
                tensor: tensor.clone(),
                reference: Values::F32(reference),
                // Four matvecs in a row, each rounding its K-long sums in another order than
                // the f64 reference, and norms between them.
                check: Check::Close {
                    max_abs: 2e-3,
                    nmse: 1e-9,
                },
            })
            .collect();
        Ok(Prepared {
            kernels: vec![tail],
            outputs,
            bytes_moved: gpu.weight_bytes,
        })
    }
}

/// Small random shapes at grids from one workgroup to more than the units.
pub fn random_cases(rng: &mut Rng) -> Vec<Box<dyn OpCase>> {
    [1u32, 3, 300]
        .into_iter()
        .map(|workgroups| {
            Box::new(PersistentTailCase {
                hidden: 32 * rng.random_range(2..=6),
                inter: 32 * rng.random_range(2..=8),
                ple: 32 * rng.random_range(1..=3),
                group: 32,
                workgroups,
                portable: true,
            }) as Box<dyn OpCase>
        })
        .collect()
}

/// E2B's tail (hidden 1536, intermediate 6144 and the double-wide 12288, per-layer input
/// 256) at 132 and 264 workgroups.
pub fn bench_cases() -> Vec<Box<dyn OpCase>> {
    let mut cases: Vec<Box<dyn OpCase>> = Vec::new();
    for inter in [6144, 12288] {
        for workgroups in [132, 264] {
            cases.push(Box::new(PersistentTailCase {
                hidden: 1536,
                inter,
                ple: 256,
                group: 32,
                workgroups,
                portable: false,
            }));
        }
    }
    cases
}

/// E2B's tail with the device's reduction (the subgroup one where it has 32-lane
/// subgroups), for `ops check`.
pub fn check_cases() -> Vec<Box<dyn OpCase>> {
    [(6144, 264), (12288, 132)]
        .into_iter()
        .map(|(inter, workgroups)| {
            Box::new(PersistentTailCase {
                hidden: 1536,
                inter,
                ple: 256,
                group: 32,
                workgroups,
                portable: false,
            }) as Box<dyn OpCase>
        })
        .collect()
}
