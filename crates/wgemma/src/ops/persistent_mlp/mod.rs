//! The persistent MLP kernel (issue 12 step 4): a decode step's gate_up + GeGLU (with the
//! norm prologue) and down projection in ONE dispatch whose two phases meet at a
//! device-scope counter inside the kernel instead of at a dispatch boundary
//! (`q4_mlp_persistent.wgsl` documents the protocol).
//!
//! Native only and guarded ([`persistent_mlp_guards`]): coherent storage
//! (`MEMORY_DECORATION_COHERENT`), a native GPU (a browser promises no forward progress
//! across workgroups; a CPU adapter runs them on a few host threads), 32-lane subgroups,
//! one activation row, unsplit Q4 weights of one group size, and the plain matvec
//! geometry for both phases. Off by default: the plan asks for it
//! (`Model::set_persistent_mlp`, `wgemma bench --persistent-mlp`).

mod cases;
mod reference;
#[cfg(test)]
mod tests;

pub use cases::{check_cases, PersistentMlpCase};
pub use reference::persistent_mlp_ref;

use crate::error::{Error, Result};
use crate::gpu::{DType, GpuContext, Kernel, KernelBuilder, Tensor};
use crate::ops::linear::{
    check_norm_prologue, choose_tuning, matvec_caps, q4_norm_prologue_available, AdapterProfile,
    Epilogue, LinearOptions, MatvecTuning, NormPrologue, Q4Params, Q4Weight,
};

const SHADER: &str = "q4_mlp_persistent";
/// Storage bindings of the kernel (1-13).
const STORAGE_BINDINGS: u32 = 13;
/// Invocations per workgroup (8 slots of 32 lanes).
const WG: u32 = 256;

/// Workgroups of the grid when the plan does not say: two per SM of an H200 (132 SMs).
/// Any grid is safe (work is claimed, see the shader); this only sets how many take part.
pub const DEFAULT_PERSISTENT_MLP_WORKGROUPS: u32 = 264;

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct DownParams {
    n: u32,
    k: u32,
    groups: u32,
    units_a: u32,
    units_b: u32,
    _pad: [u32; 3],
}

/// The down phase's K split: the plain matvec's (4 rows, 32 lanes per quad) when each lane
/// then holds at most two vec4 words of act.
fn down_split(down: &Q4Weight) -> std::result::Result<u32, String> {
    let t = choose_tuning(AdapterProfile::BASE, down.n(), down.k(), Epilogue::None);
    let plain = MatvecTuning {
        ksplit: t.ksplit,
        ..MatvecTuning::BASE
    };
    if t != plain {
        return Err(format!(
            "the down projection's plain geometry is 4 rows x 32 lanes (found {t:?})"
        ));
    }
    let words = down.k() / 32;
    if down.k() % 32 != 0 || words > 2 * 32 * t.ksplit as usize {
        return Err(format!(
            "down K a multiple of 32 with at most {} vec4 words (found K {})",
            2 * 32 * t.ksplit,
            down.k()
        ));
    }
    Ok(t.ksplit)
}

/// The guards of the persistent MLP on this device, whatever the shapes (empty when it
/// can run here): coherent storage, a native GPU, 32-lane subgroups, 13 storage bindings.
pub fn device_guards(ctx: &GpuContext) -> Vec<String> {
    let mut failed = Vec::new();
    if !ctx.has(wgpu::Features::MEMORY_DECORATION_COHERENT) {
        failed.push("persistent MLP: no coherent storage (MEMORY_DECORATION_COHERENT)".into());
    }
    if ctx.info.backend == wgpu::Backend::BrowserWebGpu {
        failed.push(
            "persistent MLP: a browser adapter (WebGPU promises no forward progress across \
             workgroups)"
                .into(),
        );
    }
    if ctx.info.device_type == wgpu::DeviceType::Cpu {
        failed.push(format!(
            "persistent MLP: a CPU adapter ({}): its workgroups share a few host threads, \
             which the waiting ones would hold",
            ctx.info.name
        ));
    }
    let (subgroup, _) = matvec_caps(ctx, &LinearOptions::default());
    if !subgroup {
        failed.push(format!(
            "persistent MLP: subgroups of exactly 32 lanes (device: {}..={})",
            ctx.info.subgroup_min_size, ctx.info.subgroup_max_size
        ));
    }
    let have = ctx.limits.max_storage_buffers_per_shader_stage;
    if have < STORAGE_BINDINGS {
        failed.push(format!(
            "persistent MLP: {STORAGE_BINDINGS} storage bindings per stage (device: {have})"
        ));
    }
    failed
}

/// Every guard of the persistent MLP that fails for `m` rows of `gate_up` (`[2I, H]`, gate
/// rows over up rows) and `down` (`[H, I]`) on `ctx`: [`device_guards`], one row, unsplit
/// weights of one group size, the plain geometries; empty when it can be built.
pub fn persistent_mlp_guards(
    ctx: &GpuContext,
    m: usize,
    gate_up: &Q4Weight,
    down: &Q4Weight,
) -> Vec<String> {
    let mut failed = device_guards(ctx);
    if m != 1 {
        failed.push(format!("persistent MLP: one activation row (found {m})"));
    }
    if gate_up.chunks().len() != 1 || down.chunks().len() != 1 {
        failed.push(format!(
            "persistent MLP: unsplit weights (gate_up {} chunks, down {})",
            gate_up.chunks().len(),
            down.chunks().len()
        ));
    }
    if gate_up.n() % 2 != 0 || down.k() != gate_up.n() / 2 || down.n() != gate_up.k() {
        failed.push(format!(
            "persistent MLP: gate_up [2I, H] and down [H, I] (found [{}, {}] and [{}, {}])",
            gate_up.n(),
            gate_up.k(),
            down.n(),
            down.k()
        ));
    }
    if gate_up.group() != down.group() {
        failed.push(format!(
            "persistent MLP: one group size (gate_up {}, down {})",
            gate_up.group(),
            down.group()
        ));
    }
    if let Err(why) = down_split(down) {
        failed.push(format!("persistent MLP: {why}"));
    }
    if !q4_norm_prologue_available(ctx, m, gate_up, Epilogue::GegluPairs) {
        failed.push("persistent MLP: the gate_up matvec's norm prologue is unavailable".into());
    }
    failed
}

/// `act = geglu(prologue(resid) W_gu^T)` and `out = act W_down^T` in one dispatch of
/// `workgroups` workgroups (see the module docs); fails closed with every failed guard.
/// `act` `[1, I]` and `out` `[1, H]` must not alias the prologue's inputs. The kernel owns
/// its counters.
pub fn q4_mlp_persistent(
    ctx: &GpuContext,
    prologue: &NormPrologue,
    gate_up: &Q4Weight,
    down: &Q4Weight,
    act: &Tensor,
    out: &Tensor,
    workgroups: u32,
) -> Result<Kernel> {
    const OP: &str = "persistent_mlp";
    let (h, i) = (gate_up.k(), gate_up.n() / 2);
    let m = prologue.resid.numel() / h.max(1);
    let failed = persistent_mlp_guards(ctx, m, gate_up, down);
    if !failed.is_empty() {
        return Err(Error::NoRoute {
            op: OP,
            shapes: format!(
                "resid {:?}, gate_up [{}, {h}], down [{}, {}]",
                prologue.resid.shape(),
                gate_up.n(),
                down.n(),
                down.k()
            ),
            failed,
        });
    }
    check_norm_prologue(OP, prologue, m, h, &[act, out])?;
    for (t, name, len) in [(act, "act", i), (out, "out", h)] {
        if t.dtype() != DType::F32 || t.numel() != len {
            return Err(Error::invalid(
                OP,
                name,
                format!("f32 [1, {len}]"),
                format!("{:?} {:?}", t.dtype(), t.shape()),
            ));
        }
    }
    if act.buffer() == out.buffer() {
        return Err(Error::invalid(
            OP,
            "act and out",
            "distinct buffers",
            "shared",
        ));
    }
    if workgroups == 0 || workgroups > ctx.limits.max_compute_workgroups_per_dimension {
        return Err(Error::invalid(
            OP,
            "workgroups",
            format!("1..={}", ctx.limits.max_compute_workgroups_per_dimension),
            workgroups,
        ));
    }
    let tuning = choose_tuning(AdapterProfile::BASE, gate_up.n(), h, Epilogue::GegluPairs);
    let ksplit_b = down_split(down).map_err(|why| Error::NoRoute {
        op: OP,
        shapes: format!("down [{}, {}]", down.n(), down.k()),
        failed: vec![why],
    })?;
    let rows_a = tuning.rows_per_workgroup() as usize;
    let units_a = i.div_ceil(rows_a / 2);
    let units_b = down.n().div_ceil((4 * (WG / 32) / ksplit_b) as usize);
    let params = Q4Params {
        m: 1,
        n: gate_up.n() as u32,
        k: h as u32,
        groups: (h / gate_up.group()) as u32,
        y_stride: i as u32,
        y_offset: 0,
        aux0: i as u32,
        aux1: 0,
        eps: prologue.eps,
        out_scale: prologue.out_scale,
        write_resid: u32::from(prologue.resid_out.is_some()),
        _pad: 0,
    };
    let down_params = DownParams {
        n: down.n() as u32,
        k: down.k() as u32,
        groups: (down.k() / down.group()) as u32,
        units_a: units_a as u32,
        units_b: units_b as u32,
        _pad: [0; 3],
    };
    // Where the residual is not kept, its write goes to a scratch word.
    let resid_out = match prologue.resid_out {
        Some(t) => t.clone(),
        None => Tensor::zeros(ctx, "persistent_mlp.no_resid_out", &[1], DType::F32)?,
    };
    let sync = Tensor::zeros(ctx, "persistent_mlp.sync", &[4], DType::U32)?;
    let (gu, dn) = (&gate_up.chunks()[0], &down.chunks()[0]);
    let resid = prologue.resid;
    KernelBuilder::new(ctx, SHADER)
        .constant("GROUP", gate_up.group() as u64)
        .constant("MV_M", 1)
        .constant("EPILOGUE", 1)
        .constant("KSPLIT", u64::from(tuning.ksplit))
        .constant("LPR", u64::from(tuning.lanes))
        .constant("ROWS", u64::from(tuning.rows))
        .constant("ROWS_PER_WG", u64::from(tuning.rows_per_workgroup()))
        .constant("K_WORDS", if tuning.unroll { (h / 32) as u64 } else { 0 })
        .constant("PARK", u64::from(tuning.park_vec4s(1, true)))
        .constant("PROLOGUE", prologue.mode.code())
        .constant("X_VEC4", (h / 4) as u64)
        .constant("K_DIM", h as u64)
        .constant("KSPLIT_B", u64::from(ksplit_b))
        .uniform(&params)
        .tensor(resid)
        .tensor(&gu.packed)
        .tensor(&gu.scales)
        .tensor(act)
        .tensor(resid)
        .tensor(prologue.branch.map_or(resid, |(t, _)| t))
        .tensor(prologue.branch.map_or(resid, |(_, w)| w))
        .tensor(prologue.w_in.unwrap_or(resid))
        .tensor(&resid_out)
        .tensor(&dn.packed)
        .tensor(&dn.scales)
        .tensor(out)
        .tensor(&sync)
        .uniform(&down_params)
        .build_1d(u64::from(workgroups))
}
