//! Readback of what the host needs, through a staging buffer allocated once. Reading is
//! `map_async` + await, so it works in the browser; on native the device is polled so the
//! callback fires.

use super::{GpuContext, Tensor};
use crate::error::{Error, Result};

/// A reusable MAP_READ staging buffer.
#[derive(Debug)]
pub struct Readback {
    buffer: wgpu::Buffer,
    /// Bytes copied by the last recorded copy.
    len: std::sync::atomic::AtomicU64,
}

impl Readback {
    pub fn new(ctx: &GpuContext, label: &str, capacity: u64) -> Readback {
        let buffer = ctx.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size: capacity.max(4).div_ceil(4) * 4,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        Readback {
            buffer,
            len: 0.into(),
        }
    }

    /// Bytes it can hold.
    pub fn capacity(&self) -> u64 {
        self.buffer.size()
    }

    pub(crate) fn record_copy(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        tensor: &Tensor,
    ) -> Result<()> {
        let size = tensor.byte_size();
        if size > self.buffer.size() {
            return Err(Error::invalid(
                "readback",
                "tensor bytes",
                format!("<= {} (staging capacity)", self.buffer.size()),
                size,
            ));
        }
        encoder.copy_buffer_to_buffer(tensor.buffer(), 0, &self.buffer, 0, size);
        self.len.store(size, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }

    /// Waits for the copy recorded last and returns its bytes.
    pub async fn read_bytes(&self, ctx: &GpuContext) -> Result<Vec<u8>> {
        self.read_bytes_of(ctx, None).await
    }

    /// Like [`Readback::read_bytes`], waiting only for `submission` (the one holding the
    /// copy) rather than for everything submitted: work queued after it keeps the GPU busy
    /// while the host reads.
    pub async fn read_bytes_of(
        &self,
        ctx: &GpuContext,
        submission: Option<wgpu::SubmissionIndex>,
    ) -> Result<Vec<u8>> {
        let len = self.len.load(std::sync::atomic::Ordering::Relaxed);
        let slice = self.buffer.slice(0..len.max(4));
        let (tx, rx) = futures_channel::oneshot::channel();
        slice.map_async(wgpu::MapMode::Read, move |r| {
            let _ = tx.send(r);
        });
        #[cfg(not(target_arch = "wasm32"))]
        ctx.device
            .poll(wgpu::PollType::Wait {
                submission_index: submission,
                timeout: None,
            })
            .map_err(|e| Error::Readback(e.to_string()))?;
        #[cfg(target_arch = "wasm32")]
        let _ = (ctx, submission);
        rx.await
            .map_err(|_| Error::Readback("map_async callback dropped".into()))?
            .map_err(|e| Error::Readback(e.to_string()))?;
        let bytes = slice
            .get_mapped_range()
            .map_err(|e| Error::Readback(e.to_string()))?[..len as usize]
            .to_vec();
        self.buffer.unmap();
        Ok(bytes)
    }

    pub async fn read_f32(&self, ctx: &GpuContext) -> Result<Vec<f32>> {
        Ok(bytemuck::pod_collect_to_vec(&self.read_bytes(ctx).await?))
    }

    pub async fn read_u32(&self, ctx: &GpuContext) -> Result<Vec<u32>> {
        Ok(bytemuck::pod_collect_to_vec(&self.read_bytes(ctx).await?))
    }
}
