//! Harness cases for the GPU Q4 quantiser: random weights in every source dtype, with
//! groups built to hit the roundings (exact ties `(j + 1/2) * scale` and their neighbours,
//! scales that are f16 subnormals or zero, f32 subnormal weights, magnitudes near f16's
//! limit), checked word for word against the CPU quantiser.

use super::{check_q4_source, q4_quantize, q4_quantize_ref, Q4Dest, SourceDtype};
use crate::error::Result;
use crate::gpu::{GpuContext, Tensor};
use crate::harness::{Check, Expected, OpCase, Prepared, Rng, Values};
use half::f16;
use rand::Rng as _;

/// Quantise a `[rows, k]` weight of `dtype` in groups of `group`.
pub struct QuantizeCase {
    pub rows: usize,
    pub k: usize,
    pub group: usize,
    pub dtype: SourceDtype,
    /// Source elements before the weight in the source buffer (a block in a staging
    /// buffer), and words before it in the destination buffers.
    pub offsets: (usize, usize, usize),
}

/// One group's values, drawn to cover the quantiser's corners.
fn group_values(rng: &mut Rng, group: usize, dtype: SourceDtype) -> Vec<f32> {
    let scale_from = |rng: &mut Rng, lo: i32, hi: i32| {
        // A few mantissa bits, so ties survive bf16.
        let m = 1.0 + rng.random_range(0..8) as f32 / 8.0;
        m * 2f32.powi(rng.random_range(lo..hi))
    };
    match rng.random_range(0..6) {
        // Plain random weights over a wide range of magnitudes.
        0 | 1 => {
            let a = 2f32.powi(rng.random_range(-24..12));
            (0..group).map(|_| rng.random_range(-a..=a)).collect()
        }
        // Ties: max = 7 s makes the scale exactly s; then (j + 1/2) s and one ulp either
        // side of it.
        2 => {
            let s = scale_from(rng, -14, 10);
            let mut v: Vec<f32> = (0..group)
                .map(|_| {
                    let j = rng.random_range(-8..8) as f32;
                    let t = (j + 0.5) * s;
                    match rng.random_range(0..3) {
                        0 => t,
                        1 => f32::from_bits(t.to_bits() + 1),
                        _ => f32::from_bits(t.to_bits().saturating_sub(1)),
                    }
                })
                .collect();
            v[rng.random_range(0..group)] = 7.0 * s * if rng.random() { 1.0 } else { -1.0 };
            v
        }
        // Tiny groups: f16-subnormal or zero scales (and f32 subnormal weights).
        3 => {
            let a = 2f32.powi(rng.random_range(-40..-14));
            let mut v: Vec<f32> = (0..group).map(|_| rng.random_range(-a..=a)).collect();
            if dtype == SourceDtype::F32 {
                v[0] = f32::from_bits(rng.random_range(1..0x0080_0000));
            }
            v
        }
        // Zeros of both signs, and a lone value.
        4 => {
            let mut v: Vec<f32> = (0..group)
                .map(|_| if rng.random() { 0.0 } else { -0.0 })
                .collect();
            if rng.random() {
                v[rng.random_range(0..group)] = scale_from(rng, -20, 5);
            }
            v
        }
        // Magnitudes up to just under where the scale leaves f16 (f16 sources cap at 65504).
        _ => {
            // 7 * 60000, so bf16's rounding up cannot push a scale past 65504.
            let a = if dtype == SourceDtype::F16 {
                65504.0
            } else {
                420_000.0
            };
            (0..group).map(|_| rng.random_range(-a..=a)).collect()
        }
    }
}

/// Encodes f32 values in `dtype` (rounded to nearest even where narrower).
pub(super) fn encode(values: &[f32], dtype: SourceDtype) -> Vec<u8> {
    match dtype {
        SourceDtype::F32 => bytemuck::cast_slice(values).to_vec(),
        SourceDtype::F16 => values
            .iter()
            .flat_map(|&v| f16::from_f32(v).to_le_bytes())
            .collect(),
        SourceDtype::BF16 => values
            .iter()
            .flat_map(|&v| half::bf16::from_f32(v).to_le_bytes())
            .collect(),
    }
}

/// Bytes as u32 words, zero-padded.
pub(super) fn words(bytes: &[u8]) -> Vec<u32> {
    let mut padded = bytes.to_vec();
    padded.resize(bytes.len().div_ceil(4) * 4, 0);
    bytemuck::pod_collect_to_vec(&padded)
}

impl OpCase for QuantizeCase {
    fn name(&self) -> String {
        format!(
            "q4_quantize {:?} rows={} k={} group={} offsets={:?}",
            self.dtype, self.rows, self.k, self.group, self.offsets
        )
    }

    fn prepare(&self, ctx: &GpuContext, rng: &mut Rng) -> Result<Prepared> {
        let (rows, k, group, dtype) = (self.rows, self.k, self.group, self.dtype);
        let (src_off, packed_off, scale_off) = self.offsets;
        let values: Vec<f32> = (0..rows * k / group)
            .flat_map(|_| group_values(rng, group, dtype))
            .collect();
        let weight = encode(&values, dtype);
        check_q4_source(&weight, dtype, k, group, 0, "the case's weight")?;
        let expected = q4_quantize_ref(&weight, dtype, rows, k, group)?;
        // The weight sits after `src_off` garbage elements in the source buffer.
        let mut src_bytes = encode(&vec![1.0e3; src_off], dtype);
        src_bytes.extend_from_slice(&weight);
        let src_words = words(&src_bytes);
        let src = Tensor::from_u32(ctx, "q4_quantize src", &[src_words.len()], &src_words)?;
        // Destinations start dirty: every word in range must be written, none outside.
        let dirty = |len: usize| -> Vec<u32> { (0..len as u32).map(|i| 0xdead_0000 | i).collect() };
        let packed_len = packed_off + expected.packed.len() + 3;
        let scale_len = scale_off + expected.scales.len() + 3;
        let packed = Tensor::from_u32(ctx, "q4 packed", &[packed_len], &dirty(packed_len))?;
        let scales = Tensor::from_u32(ctx, "q4 scales", &[scale_len], &dirty(scale_len))?;
        let kernel = q4_quantize(
            ctx,
            &src,
            dtype,
            src_off,
            rows * k / group,
            group,
            Q4Dest {
                packed: &packed,
                packed_offset: packed_off,
                scales: &scales,
                scale_offset: scale_off,
            },
        )?;
        let around = |len: usize, off: usize, inner: &[u32]| -> Vec<u32> {
            let mut v = dirty(len);
            v[off..off + inner.len()].copy_from_slice(inner);
            v
        };
        Ok(Prepared {
            kernels: vec![kernel],
            outputs: vec![
                Expected {
                    name: "packed",
                    reference: Values::U32(around(packed_len, packed_off, &expected.packed)),
                    tensor: packed,
                    check: Check::Exact,
                },
                Expected {
                    name: "scales",
                    reference: Values::U32(around(scale_len, scale_off, &expected.scales)),
                    tensor: scales,
                    check: Check::Exact,
                },
            ],
            bytes_moved: (weight.len() + rows * k / 2 + expected.scales.len() * 4) as u64,
        })
    }
}

/// Random shapes, dtypes, groups and offsets.
pub fn random_cases(rng: &mut Rng) -> Vec<Box<dyn OpCase>> {
    [SourceDtype::F32, SourceDtype::F16, SourceDtype::BF16]
        .into_iter()
        .map(|dtype| {
            let group = [8, 32, 64, 128][rng.random_range(0..4)];
            let k = group * rng.random_range(1..6);
            Box::new(QuantizeCase {
                rows: rng.random_range(1..40),
                k,
                group,
                dtype,
                offsets: (
                    rng.random_range(0..5),
                    rng.random_range(0..5),
                    rng.random_range(0..5),
                ),
            }) as Box<dyn OpCase>
        })
        .collect()
}

/// E2B's largest load-time weights from bf16: a 32 MiB block of the per-layer embedding
/// table (K 8960) and of an MLP projection (K 1536).
pub fn bench_cases() -> Vec<Box<dyn OpCase>> {
    [(1856, 8960), (10_880, 1536)]
        .into_iter()
        .map(|(rows, k)| {
            Box::new(QuantizeCase {
                rows,
                k,
                group: 32,
                dtype: SourceDtype::BF16,
                offsets: (0, 0, 0),
            }) as Box<dyn OpCase>
        })
        .collect()
}
