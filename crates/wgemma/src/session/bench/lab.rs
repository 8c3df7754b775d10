//! The bench's lab comparisons (`wgemma bench --compare-fusions`, `--compare-norm-kernels`):
//! a fusion's before and after measured on one load, in one process, by switching the
//! plan options between runs. Lab apparatus: only with the `harness` feature.

use super::forward_ms;
use crate::error::Result;
use crate::gpu::GpuContext;
use crate::model::state::KvState;
use crate::model::target::Want;
use crate::model::PlanOptions;
use web_time::Instant;

/// Greedy decode of `steps` tokens after `prompt` with the model's current plan options,
/// after a warm-up that builds the decode plan: (tokens/s, dispatches per token, barriers
/// per token).
async fn measure_decode(
    ctx: &GpuContext,
    state: &mut KvState,
    prompt: &[u32],
    steps: usize,
) -> Result<(f64, f64, f64)> {
    state.reset();
    let next = state.forward(ctx, prompt, Want::NextToken).await?.next[0];
    state.decode_greedy(ctx, next, 2, &mut |_| true).await?;
    state.reset();
    let next = state.forward(ctx, prompt, Want::NextToken).await?.next[0];
    let (d0, _, _) = ctx.counters().snapshot();
    let b0 = ctx.counters().barriers();
    let t = Instant::now();
    state.decode_greedy(ctx, next, steps, &mut |_| true).await?;
    let seconds = t.elapsed().as_secs_f64();
    let (d1, _, _) = ctx.counters().snapshot();
    let b1 = ctx.counters().barriers();
    let per = |n: u64| n as f64 / steps as f64;
    Ok((steps as f64 / seconds, per(d1 - d0), per(b1 - b0)))
}

/// Decode with the K/V append kernel (`unfused_*`), with the append folded into norm_rope
/// (`fold_only_*`), and with the append and the KV-shared layers' q_norm and RoPE folded
/// (`fold_q_*`). The variants run in order and then in reverse order on the same load,
/// and each reports the mean of its two runs (`*_decode_tokens_per_s`) and both
/// (`*_decode_tokens_per_s_runs`): a single pass in one order can read its last variants
/// 3-4% low (an H200 does), so order alone would move them. The plan options are restored
/// after.
pub async fn compare_fusions(
    ctx: &GpuContext,
    state: &mut KvState,
    prompt: &[u32],
    steps: usize,
) -> Result<serde_json::Value> {
    let options = state.plan_options();
    let variants = [
        ("unfused", false, false),
        ("fold_only", true, false),
        ("fold_q", true, true),
    ];
    let mut runs: Vec<Vec<f64>> = vec![Vec::new(); variants.len()];
    let mut out = serde_json::json!({});
    let there_and_back = (0..variants.len()).chain((0..variants.len()).rev());
    for i in there_and_back {
        let (name, fold_now, fold_q_now) = variants[i];
        state.set_plan_options(PlanOptions {
            fold_kv_append: fold_now,
            fold_q_norm_rope: fold_q_now,
            ..options
        });
        let (tps, dispatches, barriers) = measure_decode(ctx, state, prompt, steps).await?;
        runs[i].push(tps);
        out[format!("{name}_dispatches_per_token")] = dispatches.into();
        out[format!("{name}_barriers_per_token")] = barriers.into();
    }
    for ((name, ..), tps) in variants.iter().zip(&runs) {
        let mean = tps.iter().sum::<f64>() / tps.len() as f64;
        out[format!("{name}_decode_tokens_per_s")] = mean.into();
        out[format!("{name}_decode_tokens_per_s_runs")] = tps.clone().into();
    }
    state.set_plan_options(options);
    state.reset();
    Ok(out)
}

/// Decode (tokens/s, dispatches and barriers per token) and a verify forward of
/// `draft_tokens + 1` rows with every RMSNorm a kernel of its own (`norm_kernels_*`), and
/// the verify forward with norm prologues (`norm_prologue_verify_forward_ms`): the
/// fusion's before/after on one load. The plan options are restored after.
pub async fn compare_norm_kernels(
    ctx: &GpuContext,
    state: &mut KvState,
    prompt: &[u32],
    steps: usize,
    draft_tokens: usize,
) -> Result<serde_json::Value> {
    let options = state.plan_options();
    let rows = |norm_prologue_rows| PlanOptions {
        norm_prologue_rows,
        ..options
    };
    state.set_plan_options(rows(0));
    let (tps, dispatches, barriers) = measure_decode(ctx, state, prompt, steps).await?;
    let mut out = serde_json::json!({
        "norm_kernels_decode_tokens_per_s": tps,
        "norm_kernels_dispatches_per_token": dispatches,
        "norm_kernels_barriers_per_token": barriers,
    });
    if draft_tokens > 0 {
        // A verify forward of k + 1 rows, as `forward_ms` times one.
        let verify_rows = draft_tokens + 1;
        out["norm_kernels_verify_forward_ms"] =
            forward_ms(ctx, state, 1, verify_rows).await?.into();
        state.set_plan_options(rows(verify_rows));
        out["norm_prologue_verify_forward_ms"] =
            forward_ms(ctx, state, 1, verify_rows).await?.into();
    }
    state.set_plan_options(options);
    state.reset();
    Ok(out)
}
