//! Kernels and steps. A [`Kernel`] is one pre-built dispatch (pipeline, bind group, grid and
//! its constant-parameter uniform), made once when a model or op is planned. A [`Step`] is one
//! command encoder: all dispatches go into ONE compute pass, readback copies follow, and
//! the step is submitted once. Values that change per step (positions, lengths) live in GPU
//! buffers written through the queue, so kernels and bind groups never change.

use super::{GpuContext, Grid, Readback, Tensor};
use crate::error::{Error, Result};
use crate::gpu::registry;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;
use wgpu::util::DeviceExt;

/// One pre-built dispatch.
#[derive(Debug)]
pub struct Kernel {
    pub name: &'static str,
    pipeline: Arc<wgpu::ComputePipeline>,
    bind_group: wgpu::BindGroup,
    grid: Grid,
    /// Each storage binding's tensor and whether the shader declares it read-write: what
    /// decides wgpu's barriers (see [`Pass`]). Holding the tensors keeps their buffers'
    /// addresses unique while the kernel lives.
    storage: Arc<Vec<(Tensor, bool)>>,
}

impl Kernel {
    pub fn grid(&self) -> Grid {
        self.grid
    }

    /// The same pipeline and bind group with another grid (a per-step grid, e.g. attention
    /// over the current context length, as a `Kernel` the harness can run). Shares the
    /// bind group: nothing is allocated.
    pub fn with_grid(&self, grid: Grid) -> Kernel {
        Kernel {
            name: self.name,
            pipeline: self.pipeline.clone(),
            bind_group: self.bind_group.clone(),
            grid,
            storage: self.storage.clone(),
        }
    }
}

enum Binding {
    Tensor(Tensor),
    Uniform(wgpu::Buffer),
}

/// Builds a [`Kernel`]: bindings are numbered 0, 1, 2, ... in the order they are added,
/// all in bind group 0.
pub struct KernelBuilder<'a> {
    ctx: &'a GpuContext,
    shader: &'static str,
    entry: &'static str,
    constants: Vec<(&'static str, u64)>,
    bindings: Vec<Binding>,
}

impl<'a> KernelBuilder<'a> {
    pub fn new(ctx: &'a GpuContext, shader: &'static str) -> Self {
        KernelBuilder {
            ctx,
            shader,
            entry: "main",
            constants: Vec::new(),
            bindings: Vec::new(),
        }
    }

    pub fn entry(mut self, entry: &'static str) -> Self {
        self.entry = entry;
        self
    }

    /// A pipeline-overridable constant (`override NAME: u32`).
    pub fn constant(mut self, name: &'static str, value: u64) -> Self {
        self.constants.push((name, value));
        self
    }

    /// A uniform buffer holding `params`, created now and owned by the kernel.
    pub fn uniform<T: bytemuck::Pod>(mut self, params: &T) -> Self {
        let buffer = self
            .ctx
            .device
            .create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: Some(self.shader),
                contents: bytemuck::bytes_of(params),
                usage: wgpu::BufferUsages::UNIFORM,
            });
        self.bindings.push(Binding::Uniform(buffer));
        self
    }

    /// A storage binding (read-only or read-write is decided by the shader).
    pub fn tensor(mut self, tensor: &Tensor) -> Self {
        self.bindings.push(Binding::Tensor(tensor.clone()));
        self
    }

    /// The workgroup size the registry parsed for this kernel's entry point.
    pub fn workgroup_size(&self) -> Result<[u32; 3]> {
        registry::shader(self.shader)
            .and_then(|s| s.workgroup_size(self.entry))
            .ok_or_else(|| Error::UnknownShader(format!("{}::{}", self.shader, self.entry)))
    }

    /// Builds with a grid of `workgroups` 1-D workgroups, folded to 2-D when above the
    /// device's per-dimension limit.
    pub fn build_1d(self, workgroups: u64) -> Result<Kernel> {
        let grid = Grid::fold_1d(
            workgroups,
            self.ctx.limits.max_compute_workgroups_per_dimension,
        )?;
        self.build(grid)
    }

    pub fn build(self, grid: Grid) -> Result<Kernel> {
        let max = self.ctx.limits.max_compute_workgroups_per_dimension;
        if grid.x > max || grid.y > max || grid.z > max {
            return Err(Error::DispatchTooLarge {
                workgroups: grid.count(),
                max_per_dim: max,
            });
        }
        let pipeline = self
            .ctx
            .pipeline(self.shader, self.entry, &self.constants)?;
        let layout = pipeline.get_bind_group_layout(0);
        let entries: Vec<wgpu::BindGroupEntry> = self
            .bindings
            .iter()
            .enumerate()
            .map(|(i, b)| wgpu::BindGroupEntry {
                binding: i as u32,
                resource: match b {
                    Binding::Tensor(t) => t.buffer().as_entire_binding(),
                    Binding::Uniform(u) => u.as_entire_binding(),
                },
            })
            .collect();
        let bind_group = self
            .ctx
            .device
            .create_bind_group(&wgpu::BindGroupDescriptor {
                label: Some(self.shader),
                layout: &layout,
                entries: &entries,
            });
        let read_write = registry::shader(self.shader)
            .map(|s| read_write_bindings(s.source))
            .unwrap_or_default();
        let storage = self
            .bindings
            .iter()
            .enumerate()
            .filter_map(|(i, b)| match b {
                Binding::Tensor(t) => Some((t.clone(), read_write.contains(&(i as u32)))),
                Binding::Uniform(_) => None,
            })
            .collect::<Vec<_>>()
            .into();
        Ok(Kernel {
            name: self.shader,
            pipeline,
            bind_group,
            grid,
            storage,
        })
    }
}

/// The binding numbers of group 0 that `source` declares `var<storage, read_write>`.
fn read_write_bindings(source: &str) -> Vec<u32> {
    source
        .lines()
        .filter(|line| line.contains("var<storage, read_write>") && line.contains("@group(0)"))
        .filter_map(|line| {
            let rest = line.split("@binding(").nth(1)?;
            rest.split(')').next()?.trim().parse().ok()
        })
        .collect()
}

/// Hashes buffer addresses for the barrier count: one multiply (the default SipHash would
/// cost a few microseconds of host time per forward, on the decode step's critical path
/// when the GPU is fast).
#[derive(Default)]
struct AddressHasher(u64);

impl Hasher for AddressHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8 | b as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }

    fn write_usize(&mut self, i: usize) {
        self.0 = (i as u64)
            .wrapping_mul(0x9E37_79B9_7F4A_7C15)
            .rotate_right(29);
    }
}

/// One compute pass inside a [`Step`].
///
/// It also counts the barriers wgpu records: a buffer's usage in a pass is read-only or
/// read-write storage, and wgpu inserts a pipeline barrier before a dispatch when one of its
/// buffers changes usage or is bound read-write again (read-write is never "ordered").
/// On Vulkan that barrier waits for everything before it, so barriers count the dependent
/// steps of a forward; dispatches between two barriers may overlap.
pub struct Pass<'e> {
    pass: wgpu::ComputePass<'static>,
    dispatches: u64,
    barriers: u64,
    /// Each buffer's last usage in this pass (true: read-write).
    usage: HashMap<usize, bool, BuildHasherDefault<AddressHasher>>,
    /// Print every dispatch and why it needs a barrier ([`GpuContext::set_trace_barriers`]).
    trace: bool,
    profiler: Option<&'e super::profile::Profiler>,
}

impl Pass<'_> {
    pub fn dispatch(&mut self, kernel: &Kernel) {
        self.dispatch_grid(kernel, kernel.grid);
    }

    /// Dispatches with a grid chosen now (e.g. attention over the current context length).
    pub fn dispatch_grid(&mut self, kernel: &Kernel, grid: Grid) {
        if grid.count() == 0 {
            return;
        }
        let mut barrier = false;
        let mut why = Vec::new();
        for (i, (tensor, read_write)) in kernel.storage.iter().enumerate() {
            let read_write = *read_write;
            if let Some(before) = self.usage.insert(tensor.buffer_key(), read_write) {
                if before || read_write {
                    barrier = true;
                    if self.trace {
                        why.push(format!(
                            "storage#{i}{}",
                            if read_write { " rw" } else { "" }
                        ));
                    }
                }
            }
        }
        self.barriers += barrier as u64;
        if self.trace {
            eprintln!(
                "dispatch {:>4} {:<28} {}",
                self.dispatches,
                kernel.name,
                if barrier {
                    format!("BARRIER ({})", why.join(", "))
                } else {
                    String::new()
                }
            );
        }
        self.pass.set_pipeline(&kernel.pipeline);
        self.pass.set_bind_group(0, &kernel.bind_group, &[]);
        self.pass.dispatch_workgroups(grid.x, grid.y, grid.z);
        self.dispatches += 1;
        if let Some(p) = self.profiler {
            p.mark(
                &mut self.pass,
                Some(format!("{}[{}]", kernel.name, grid.count())),
            );
        }
    }
}

/// One command encoder, submitted once.
pub struct Step<'c> {
    ctx: &'c GpuContext,
    encoder: wgpu::CommandEncoder,
}

impl<'c> Step<'c> {
    pub fn new(ctx: &'c GpuContext) -> Self {
        let encoder = ctx
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("step"),
            });
        Step { ctx, encoder }
    }

    /// Records one compute pass; call once per forward.
    pub fn pass(&mut self, record: impl FnOnce(&mut Pass<'_>)) {
        let pass = self
            .encoder
            .begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: Some("forward"),
                timestamp_writes: None,
            })
            .forget_lifetime();
        let mut pass = Pass {
            pass,
            dispatches: 0,
            barriers: 0,
            usage: HashMap::default(),
            trace: self.ctx.trace_barriers(),
            profiler: self.ctx.profiler(),
        };
        if let Some(p) = pass.profiler {
            p.mark(&mut pass.pass, None);
        }
        record(&mut pass);
        let (dispatches, barriers) = (pass.dispatches, pass.barriers);
        drop(pass);
        self.ctx.count_pass(dispatches, barriers);
    }

    /// Copies a tensor into a readback buffer after the pass (same submit).
    pub fn copy_to_readback(&mut self, tensor: &Tensor, readback: &Readback) -> Result<()> {
        readback.record_copy(&mut self.encoder, tensor)
    }

    pub fn encoder(&mut self) -> &mut wgpu::CommandEncoder {
        &mut self.encoder
    }

    /// Submits the step; returns without waiting.
    pub fn submit(mut self) -> wgpu::SubmissionIndex {
        self.ctx.count_submit();
        if let Some(p) = self.ctx.profiler() {
            p.resolve(&mut self.encoder);
        }
        self.ctx.queue.submit([self.encoder.finish()])
    }
}

/// Records `kernels` into one pass and submits them (for tests and op cases).
pub fn run_kernels(ctx: &GpuContext, kernels: &[Kernel]) -> wgpu::SubmissionIndex {
    let mut step = Step::new(ctx);
    step.pass(|pass| kernels.iter().for_each(|k| pass.dispatch(k)));
    step.submit()
}

// The one-tensor readers live next to Step, which they drive, so readback.rs does not
// depend on the step recorder.
/// Convenience for tests and tools: copies one tensor out through a fresh staging buffer.
/// Not for the decode path (it allocates); models keep a [`Readback`].
pub async fn read_tensor_bytes(ctx: &GpuContext, tensor: &Tensor) -> Result<Vec<u8>> {
    let readback = Readback::new(ctx, "read_tensor", tensor.byte_size());
    let mut step = Step::new(ctx);
    step.copy_to_readback(tensor, &readback)?;
    step.submit();
    readback.read_bytes(ctx).await
}

pub async fn read_tensor_f32(ctx: &GpuContext, tensor: &Tensor) -> Result<Vec<f32>> {
    let bytes = read_tensor_bytes(ctx, tensor).await?;
    Ok(bytemuck::pod_collect_to_vec(&bytes[..tensor.numel() * 4]))
}

pub async fn read_tensor_u32(ctx: &GpuContext, tensor: &Tensor) -> Result<Vec<u32>> {
    let bytes = read_tensor_bytes(ctx, tensor).await?;
    Ok(bytemuck::pod_collect_to_vec(&bytes[..tensor.numel() * 4]))
}

pub async fn read_tensor_i32(ctx: &GpuContext, tensor: &Tensor) -> Result<Vec<i32>> {
    let bytes = read_tensor_bytes(ctx, tensor).await?;
    Ok(bytemuck::pod_collect_to_vec(&bytes[..tensor.numel() * 4]))
}

#[cfg(test)]
mod tests {
    use super::read_write_bindings;

    #[test]
    fn read_write_bindings_are_read_from_the_declarations() {
        let src = "@group(0) @binding(0) var<uniform> params: P;\n\
                   @group(0) @binding(1) var<storage, read_write> out: array<f32>;\n\
                   @group(0) @binding(2) var<storage, read> x: array<f32>;\n\
                   @group(0) @binding( 3 ) var<storage, read_write> y: array<f32>;\n";
        assert_eq!(read_write_bindings(src), vec![1, 3]);
    }
}
