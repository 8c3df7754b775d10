//! `wgemma bench`'s diagnostics beside the table: GPU profiles by shader (`--profile`) and
//! the before/after comparisons of fusions on one load (`--compare-fusions`,
//! `--compare-norm-kernels`).

use anyhow::Result;
use std::time::Instant;
use wgemma::gpu::GpuContext;
use wgemma::model::state::KvState;
use wgemma::model::target::Want;
use wgemma::model::PlanOptions;

/// Per-shader totals of profiled forwards.
pub fn profile_forwards(
    ctx: &GpuContext,
    state: &mut KvState,
    first: u32,
    rows: usize,
    forwards: usize,
) -> Result<serde_json::Value> {
    let mut times = Vec::new();
    // Each forward feeds the previous one's token, at the same position.
    let mut token = first;
    for _ in 0..forwards {
        let input = vec![token; rows];
        let want = if rows == 1 {
            Want::NextToken
        } else {
            Want::AllNext
        };
        let base = state.len();
        token = pollster::block_on(state.forward(ctx, &input, want))?.next[0];
        // Every profiled forward runs at the same position (the context stays as timed).
        state.rollback(base)?;
        times.extend(pollster::block_on(ctx.read_profile())?);
    }
    Ok(summarize_profile(&times, rows, forwards))
}

/// Per-shader and per-dispatch totals of `forwards` profiled forwards.
pub fn summarize_profile(
    times: &[wgemma::gpu::DispatchTime],
    rows: usize,
    forwards: usize,
) -> serde_json::Value {
    use std::collections::BTreeMap;
    let mut by_label: BTreeMap<String, (u64, f64)> = BTreeMap::new();
    let mut total_ns = 0.0;
    for t in times {
        let e = by_label.entry(t.label.clone()).or_default();
        e.0 += 1;
        e.1 += t.nanos;
        total_ns += t.nanos;
    }
    let per = forwards as f64;
    let mut by_shader: BTreeMap<String, (u64, f64)> = BTreeMap::new();
    for (label, (n, ns)) in &by_label {
        let shader = label.split('[').next().unwrap_or(label).to_string();
        let e = by_shader.entry(shader).or_default();
        e.0 += n;
        e.1 += ns;
    }
    let rank = |m: BTreeMap<String, (u64, f64)>, key: &str| {
        let mut v: Vec<_> = m.into_iter().collect();
        v.sort_by(|a, b| b.1 .1.total_cmp(&a.1 .1));
        v.into_iter()
            .map(|(name, (n, ns))| {
                serde_json::json!({
                    key: name,
                    "dispatches_per_forward": n as f64 / per,
                    "us_per_forward": ns / per / 1e3,
                    "us_per_dispatch": ns / n as f64 / 1e3,
                })
            })
            .collect::<Vec<_>>()
    };
    serde_json::json!({
        "rows": rows,
        "forwards": forwards,
        "gpu_us_per_forward": total_ns / per / 1e3,
        "by_shader": rank(by_shader, "shader"),
        "by_dispatch": rank(by_label, "dispatch"),
    })
}

/// Decode tokens/s, dispatches per token and a verify forward with every RMSNorm a kernel,
/// and a verify forward with norm prologues, on the loaded model (then back to the default).
/// Greedy decode of `steps` tokens after `prompt` with the model's current plan settings:
/// (tokens/s, dispatches per token, barriers per token).
fn measure_decode(
    ctx: &GpuContext,
    state: &mut KvState,
    prompt: &[u32],
    steps: usize,
) -> Result<(f64, f64, f64)> {
    state.reset();
    let next = pollster::block_on(state.forward(ctx, prompt, Want::NextToken))?.next[0];
    // Warm-up: builds the decode plan.
    pollster::block_on(state.decode_greedy(ctx, next, 2, &mut |_| true))?;
    state.reset();
    let next = pollster::block_on(state.forward(ctx, prompt, Want::NextToken))?.next[0];
    let (d0, _, _) = ctx.counters().snapshot();
    let b0 = ctx.counters().barriers();
    let t = Instant::now();
    pollster::block_on(state.decode_greedy(ctx, next, steps, &mut |_| true))?;
    let seconds = t.elapsed().as_secs_f64();
    let (d1, _, _) = ctx.counters().snapshot();
    let b1 = ctx.counters().barriers();
    let per = |n: u64| n as f64 / steps as f64;
    Ok((steps as f64 / seconds, per(d1 - d0), per(b1 - b0)))
}

/// `--compare-fusions`: see its help. The variants run in order and then in reverse order
/// on the same load, and each reports the mean of its two runs (`*_decode_tokens_per_s`)
/// and both (`*_decode_tokens_per_s_runs`): a single pass in one order can read its last
/// variants 3-4% low (an H200 does), so order alone would move them.
pub fn compare_fusions(
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
        let (tps, dispatches, barriers) = measure_decode(ctx, state, prompt, steps)?;
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

pub fn compare_norm_kernels(
    ctx: &GpuContext,
    state: &mut KvState,
    prompt: &[u32],
    steps: usize,
    draft_tokens: usize,
) -> Result<serde_json::Value> {
    let time_forward = |state: &mut KvState, rows: usize| -> Result<f64> {
        let tokens = vec![1u32; rows];
        let base = state.len();
        pollster::block_on(state.forward(ctx, &tokens, Want::AllNext))?;
        state.rollback(base)?;
        let t = Instant::now();
        for _ in 0..32 {
            pollster::block_on(state.forward(ctx, &tokens, Want::AllNext))?;
            state.rollback(base)?;
        }
        Ok(t.elapsed().as_secs_f64() * 1e3 / 32.0)
    };
    let options = state.plan_options();
    let rows = |norm_prologue_rows| PlanOptions {
        norm_prologue_rows,
        ..options
    };
    state.set_plan_options(rows(0));
    let (tps, dispatches, barriers) = measure_decode(ctx, state, prompt, steps)?;
    let mut out = serde_json::json!({
        "norm_kernels_decode_tokens_per_s": tps,
        "norm_kernels_dispatches_per_token": dispatches,
        "norm_kernels_barriers_per_token": barriers,
    });
    if draft_tokens > 0 {
        out["norm_kernels_verify_forward_ms"] = time_forward(state, draft_tokens + 1)?.into();
        state.set_plan_options(rows(draft_tokens + 1));
        out["norm_prologue_verify_forward_ms"] = time_forward(state, draft_tokens + 1)?.into();
    }
    state.set_plan_options(options);
    state.reset();
    Ok(out)
}

pub fn print_profile(what: &str, p: &serde_json::Value) {
    println!(
        "\nprofile: {what} forward of {} rows, GPU {:.1} us per forward (mean of {})",
        p["rows"],
        p["gpu_us_per_forward"].as_f64().unwrap_or(0.0),
        p["forwards"]
    );
    println!(
        "{:<28} {:>10} {:>12} {:>12}",
        "shader", "dispatches", "us/forward", "us/dispatch"
    );
    for row in p["by_shader"].as_array().into_iter().flatten() {
        println!(
            "{:<28} {:>10.1} {:>12.1} {:>12.2}",
            row["shader"].as_str().unwrap_or(""),
            row["dispatches_per_forward"].as_f64().unwrap_or(0.0),
            row["us_per_forward"].as_f64().unwrap_or(0.0),
            row["us_per_dispatch"].as_f64().unwrap_or(0.0)
        );
    }
}
