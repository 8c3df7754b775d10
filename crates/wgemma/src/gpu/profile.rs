//! Per-dispatch GPU timing for benchmarks: a timestamp is written at the start of every
//! compute pass and after every dispatch (`TIMESTAMP_QUERY_INSIDE_PASSES`), so the
//! difference between consecutive timestamps is what one dispatch cost in the real chain
//! (its own work, the barrier before it and the launch gap), not in isolation.
//!
//! Off unless [`super::GpuContext::enable_profiling`] is called; then every [`super::Step`]
//! resolves its timestamps at submit and [`super::GpuContext::read_profile`] returns them.
//! The profiler takes the device and queue, not the context that owns it, so that this file
//! sits below `context.rs`.

use crate::error::{Error, Result};
use std::sync::Mutex;

/// Timestamps one profiled stretch can hold (wgpu's per-query-set maximum).
pub const MAX_PROFILE_MARKS: u32 = 4096;

/// One dispatch's measured time.
#[derive(Debug, Clone, PartialEq)]
pub struct DispatchTime {
    /// `shader[workgroups]`: the same shader at different shapes stays apart.
    pub label: String,
    pub nanos: f64,
}

pub(crate) struct Profiler {
    query_set: wgpu::QuerySet,
    resolve: wgpu::Buffer,
    staging: wgpu::Buffer,
    /// Labels of the marks written so far; index i is query i. `None` starts a pass.
    marks: Mutex<Vec<Option<String>>>,
}

impl Profiler {
    pub(crate) fn new(device: &wgpu::Device, features: wgpu::Features) -> Result<Profiler> {
        let needed =
            wgpu::Features::TIMESTAMP_QUERY | wgpu::Features::TIMESTAMP_QUERY_INSIDE_PASSES;
        if !features.contains(needed) {
            return Err(Error::invalid(
                "profile",
                "device features",
                format!("{needed:?}"),
                format!("{:?}", features & needed),
            ));
        }
        let bytes = u64::from(MAX_PROFILE_MARKS) * 8;
        Ok(Profiler {
            query_set: device.create_query_set(&wgpu::QuerySetDescriptor {
                label: Some("profile"),
                ty: wgpu::QueryType::Timestamp,
                count: MAX_PROFILE_MARKS,
            }),
            resolve: device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("profile.resolve"),
                size: bytes,
                usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
                mapped_at_creation: false,
            }),
            staging: device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("profile.staging"),
                size: bytes,
                usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            }),
            marks: Mutex::new(Vec::new()),
        })
    }

    /// Writes the next timestamp into `pass` (silently stops at the capacity: the reader
    /// reports how many marks were dropped).
    pub(crate) fn mark(&self, pass: &mut wgpu::ComputePass<'static>, label: Option<String>) {
        let mut marks = self.marks.lock().expect("profile marks poisoned");
        let index = marks.len() as u32;
        if index < MAX_PROFILE_MARKS {
            pass.write_timestamp(&self.query_set, index);
        }
        marks.push(label);
    }

    /// Resolves every mark written so far into the staging buffer (recorded at submit).
    pub(crate) fn resolve(&self, encoder: &mut wgpu::CommandEncoder) {
        let count = self.recorded();
        if count == 0 {
            return;
        }
        encoder.resolve_query_set(&self.query_set, 0..count, &self.resolve, 0);
        encoder.copy_buffer_to_buffer(&self.resolve, 0, &self.staging, 0, u64::from(count) * 8);
    }

    fn recorded(&self) -> u32 {
        (self.marks.lock().expect("profile marks poisoned").len() as u32).min(MAX_PROFILE_MARKS)
    }

    /// The dispatches recorded since the last read, with their times; clears the marks.
    pub(crate) async fn read(
        &self,
        device: &wgpu::Device,
        queue: &wgpu::Queue,
    ) -> Result<Vec<DispatchTime>> {
        let marks = std::mem::take(&mut *self.marks.lock().expect("profile marks poisoned"));
        if marks.len() > MAX_PROFILE_MARKS as usize {
            return Err(Error::invalid(
                "profile",
                "timestamps between two reads",
                format!("<= {MAX_PROFILE_MARKS}"),
                marks.len(),
            ));
        }
        if marks.is_empty() {
            return Ok(Vec::new());
        }
        let slice = self.staging.slice(0..marks.len() as u64 * 8);
        let (tx, rx) = futures_channel::oneshot::channel();
        slice.map_async(wgpu::MapMode::Read, move |r| {
            let _ = tx.send(r);
        });
        #[cfg(not(target_arch = "wasm32"))]
        device
            .poll(wgpu::PollType::wait_indefinitely())
            .map_err(|e| Error::Readback(e.to_string()))?;
        // The browser maps the buffer without a poll.
        #[cfg(target_arch = "wasm32")]
        let _ = device;
        rx.await
            .map_err(|_| Error::Readback("map_async callback dropped".into()))?
            .map_err(|e| Error::Readback(e.to_string()))?;
        let ticks: Vec<u64> = bytemuck::pod_collect_to_vec(
            &slice
                .get_mapped_range()
                .map_err(|e| Error::Readback(e.to_string()))?,
        );
        self.staging.unmap();
        let period = f64::from(queue.get_timestamp_period());
        // Mark i (a dispatch) ends at tick i; the previous mark ended where it began.
        Ok((1..marks.len())
            .filter_map(|i| {
                marks[i].as_ref().map(|label| DispatchTime {
                    label: label.clone(),
                    nanos: ticks[i].saturating_sub(ticks[i - 1]) as f64 * period,
                })
            })
            .collect())
    }
}
