//! `wgemma info`.

use clap::Args;
use serde_json::json;
use wgemma::gpu::registry::SHADERS;
use wgemma::gpu::{ContextOptions, GpuContext};

#[derive(Args)]
pub struct InfoArgs {
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
    /// What a page gets in desktop Chrome on this adapter: its WebGPU features and its
    /// tiered limits (as `bench --webgpu-limits` runs).
    #[arg(long)]
    webgpu_limits: bool,
}

pub fn run(args: InfoArgs) -> anyhow::Result<()> {
    let ctx = GpuContext::new_blocking(ContextOptions {
        webgpu_limits: args.webgpu_limits,
        ..crate::gpu_args::context_options()
    })?;
    let l = &ctx.limits;
    let limits = json!({
        "max_buffer_size": l.max_buffer_size,
        "max_bind_groups": l.max_bind_groups,
        "max_storage_buffer_binding_size": l.max_storage_buffer_binding_size,
        "max_uniform_buffer_binding_size": l.max_uniform_buffer_binding_size,
        "max_storage_buffers_per_shader_stage": l.max_storage_buffers_per_shader_stage,
        "max_compute_workgroups_per_dimension": l.max_compute_workgroups_per_dimension,
        "max_compute_invocations_per_workgroup": l.max_compute_invocations_per_workgroup,
        "max_compute_workgroup_size_x": l.max_compute_workgroup_size_x,
        "max_compute_workgroup_storage_size": l.max_compute_workgroup_storage_size,
        "min_storage_buffer_offset_alignment": l.min_storage_buffer_offset_alignment,
        "min_subgroup_size": ctx.adapter.get_info().subgroup_min_size,
        "max_subgroup_size": ctx.adapter.get_info().subgroup_max_size,
    });
    let features: Vec<String> = ctx
        .features
        .iter_names()
        .map(|(n, _)| n.to_lowercase())
        .collect();
    let shaders: Vec<_> = SHADERS
        .iter()
        .map(|s| {
            json!({
                "name": s.name,
                "path": s.path,
                "hash": s.hash,
                "entry_points": s.entry_points.iter().map(|e| json!({
                    "name": e.name, "workgroup_size": e.workgroup_size,
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    if args.json {
        let out = json!({
            "adapter": {
                "name": ctx.info.name,
                "backend": format!("{:?}", ctx.info.backend).to_lowercase(),
                "device_type": format!("{:?}", ctx.info.device_type),
                "vendor": ctx.info.vendor,
                "device": ctx.info.device,
                "driver": ctx.info.driver,
                "driver_info": ctx.info.driver_info,
            },
            "limits": limits,
            "features": features,
            "integer_dot_product": ctx.has_integer_dot(),
            "activations": ctx.activations().name(),
            "shaders": shaders,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    println!("adapter   {}", ctx.describe());
    println!(
        "features  {}",
        if features.is_empty() {
            "(none)".into()
        } else {
            features.join(", ")
        }
    );
    println!(
        "matvecs   {} activations ({} packed integer dot products)",
        ctx.activations().name(),
        if ctx.has_integer_dot() {
            "native"
        } else {
            "no native"
        }
    );
    println!("limits");
    for (k, v) in limits.as_object().expect("object") {
        println!("  {k:<40} {v}");
    }
    println!("shaders ({})", SHADERS.len());
    for s in SHADERS {
        for e in s.entry_points {
            let [x, y, z] = e.workgroup_size;
            println!(
                "  {:<28} {:<12} {:>4}x{}x{}  {}",
                s.name,
                e.name,
                x,
                y,
                z,
                &s.hash[..16]
            );
        }
    }
    Ok(())
}
