//! Tensors on the device: allocation, uploads, and the context's shared scratch. Apart from
//! `tensor.rs` (what a tensor is) so that the context can hold tensors while the code that
//! creates them uses the context: tensor.rs, then context.rs, then this file.

use super::context::GpuContext;
use super::tensor::{DType, Tensor};
use crate::error::{Error, Result};

impl Tensor {
    /// An uninitialised (zeroed by wgpu) tensor.
    pub fn zeros(ctx: &GpuContext, label: &str, shape: &[usize], dtype: DType) -> Result<Tensor> {
        let size = dtype.bytes_for(shape.iter().product()).max(4);
        check_size(ctx, label, size)?;
        let buffer = ctx.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size,
            usage: wgpu::BufferUsages::STORAGE
                | wgpu::BufferUsages::COPY_SRC
                | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        ctx.count_tensor_bytes(size);
        Ok(Tensor::from_buffer(buffer, shape, dtype))
    }

    /// A tensor holding `data` (raw little-endian bytes of `dtype` elements).
    pub fn from_bytes(
        ctx: &GpuContext,
        label: &str,
        shape: &[usize],
        dtype: DType,
        data: &[u8],
    ) -> Result<Tensor> {
        let numel: usize = shape.iter().product();
        let unpadded = match dtype {
            DType::F16 => numel as u64 * 2,
            _ => numel as u64 * 4,
        };
        if data.len() as u64 != unpadded {
            return Err(Error::invalid(
                "tensor",
                format!("bytes for `{label}` of shape {shape:?} {dtype:?}"),
                unpadded,
                data.len(),
            ));
        }
        let t = Tensor::zeros(ctx, label, shape, dtype)?;
        t.write_bytes(ctx, data);
        Ok(t)
    }

    pub fn from_f32(
        ctx: &GpuContext,
        label: &str,
        shape: &[usize],
        data: &[f32],
    ) -> Result<Tensor> {
        Tensor::from_bytes(ctx, label, shape, DType::F32, bytemuck::cast_slice(data))
    }

    pub fn from_u32(
        ctx: &GpuContext,
        label: &str,
        shape: &[usize],
        data: &[u32],
    ) -> Result<Tensor> {
        Tensor::from_bytes(ctx, label, shape, DType::U32, bytemuck::cast_slice(data))
    }

    pub fn from_i32(
        ctx: &GpuContext,
        label: &str,
        shape: &[usize],
        data: &[i32],
    ) -> Result<Tensor> {
        Tensor::from_bytes(ctx, label, shape, DType::I32, bytemuck::cast_slice(data))
    }

    pub fn from_f16(
        ctx: &GpuContext,
        label: &str,
        shape: &[usize],
        data: &[half::f16],
    ) -> Result<Tensor> {
        Tensor::from_bytes(ctx, label, shape, DType::F16, bytemuck::cast_slice(data))
    }

    /// Writes raw bytes at the start of the buffer through the queue (ordered before the
    /// next submit; no CPU wait). Odd-length data is padded to a word.
    pub fn write_bytes(&self, ctx: &GpuContext, data: &[u8]) {
        if data.len() % 4 == 0 {
            ctx.queue.write_buffer(self.buffer(), 0, data);
        } else {
            let mut padded = data.to_vec();
            padded.resize(data.len().div_ceil(4) * 4, 0);
            ctx.queue.write_buffer(self.buffer(), 0, &padded);
        }
    }
}

impl GpuContext {
    /// A zeroed-at-creation scratch tensor of at least `len` elements, shared by every caller
    /// that names it: for kernels that each finish with it within their own dispatch (wgpu
    /// orders dispatches that write one buffer) and leave it as they found it where that
    /// matters (counters). A larger request replaces the held tensor; kernels built before
    /// keep theirs.
    pub fn shared_scratch(&self, name: &'static str, len: usize, dtype: DType) -> Result<Tensor> {
        let mut held = self.scratch.lock().unwrap_or_else(|e| e.into_inner());
        match held.get(name) {
            Some(t) if t.numel() >= len && t.dtype() == dtype => Ok(t.clone()),
            _ => {
                let t = Tensor::zeros(self, name, &[len], dtype)?;
                held.insert(name, t.clone());
                Ok(t)
            }
        }
    }
}

fn check_size(ctx: &GpuContext, label: &str, size: u64) -> Result<()> {
    let max_binding = ctx.limits.max_storage_buffer_binding_size;
    let max_buffer = ctx.limits.max_buffer_size;
    if size > max_binding.min(max_buffer) {
        return Err(Error::invalid(
            "tensor",
            format!("size of `{label}` (split larger tensors with plan_row_chunks)"),
            format!(
                "<= {} bytes (device max storage binding)",
                max_binding.min(max_buffer)
            ),
            size,
        ));
    }
    Ok(())
}
