//! Q4 quantisation on the GPU: raw f32 / f16 / bf16 checkpoint rows, uploaded as they are
//! stored, become the packed words and f16 scales the Q4 kernels read (the format is
//! [`crate::ops::linear::quant`]'s), written straight into the weight's final buffers.
//!
//! The result is bit-identical to the CPU quantiser [`quantize_q4`](crate::ops::linear::quantize_q4),
//! which stays the reference: the shader does the f32 divisions and both roundings (f32
//! and f16, nearest even) in integer arithmetic on the bit patterns, since WGSL's division
//! is not correctly rounded and drivers may flush subnormals.
//!
//! What the shader cannot report, the host checks first ([`check_q4_source`]): every weight
//! finite, and every scale within f16's range, each error naming the tensor and element.

#[cfg(any(test, feature = "harness"))]
mod cases;
mod reference;
#[cfg(test)]
mod tests;

#[cfg(any(test, feature = "harness"))]
pub use cases::{bench_cases, random_cases, QuantizeCase};
pub use reference::{q4_quantize_ref, source_to_f32};

use crate::error::{Error, Result};
use crate::gpu::{workgroups_for, DType, GpuContext, Kernel, KernelBuilder, Tensor};
use half::f16;

const SHADER: &str = "q4_quantize";
const OP: &str = "q4_quantize";
const WORKGROUP: u32 = 64;

/// The storage dtype of the source rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SourceDtype {
    F32,
    F16,
    BF16,
}

impl SourceDtype {
    /// Bytes per element.
    pub fn bytes(self) -> usize {
        match self {
            SourceDtype::F32 => 4,
            SourceDtype::F16 | SourceDtype::BF16 => 2,
        }
    }

    fn code(self) -> u32 {
        match self {
            SourceDtype::F32 => 0,
            SourceDtype::F16 => 1,
            SourceDtype::BF16 => 2,
        }
    }

    /// Bits of element `i` of `bytes` as an f32 (exact).
    fn f32_bits(self, bytes: &[u8], i: usize) -> u32 {
        match self {
            SourceDtype::F32 => u32::from_le_bytes(bytes[4 * i..4 * i + 4].try_into().unwrap()),
            SourceDtype::F16 => f16::from_le_bytes([bytes[2 * i], bytes[2 * i + 1]])
                .to_f32()
                .to_bits(),
            SourceDtype::BF16 => {
                (u16::from_le_bytes([bytes[2 * i], bytes[2 * i + 1]]) as u32) << 16
            }
        }
    }
}

/// Where one dispatch writes: the packed words and scale words of a Q4 weight (or of one
/// of its row chunks), from word offsets.
#[derive(Debug, Clone, Copy)]
pub struct Q4Dest<'a> {
    pub packed: &'a Tensor,
    /// First packed word written.
    pub packed_offset: usize,
    pub scales: &'a Tensor,
    /// First scale word written (two f16 scales per word).
    pub scale_offset: usize,
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    groups: u32,
    group: u32,
    dtype: u32,
    src_offset: u32,
    packed_offset: u32,
    scale_offset: u32,
    _pad: [u32; 2],
}

/// Plans the quantisation of `groups` consecutive groups of `group` weights, read from the
/// u32 words of `src` (elements of `dtype`, starting at element `src_offset`), into `dst`.
/// The weights must have passed [`check_q4_source`]. Rows are `K / group` groups each, so
/// a block of whole rows is `rows * K / group` groups; a block whose group count is odd
/// leaves the high half of its last scale word zero, so only the last block of a weight
/// may have one.
pub fn q4_quantize(
    ctx: &GpuContext,
    src: &Tensor,
    dtype: SourceDtype,
    src_offset: usize,
    groups: usize,
    group: usize,
    dst: Q4Dest<'_>,
) -> Result<Kernel> {
    if group == 0 || group % 8 != 0 {
        return Err(Error::invalid(
            OP,
            "group size",
            "a positive multiple of 8",
            group,
        ));
    }
    if groups == 0 {
        return Err(Error::invalid(OP, "groups", ">= 1", groups));
    }
    for (t, what) in [(src, "dtype of src"), (dst.packed, "dtype of packed")] {
        if t.dtype() != DType::U32 {
            return Err(Error::invalid(OP, what, "u32", format!("{:?}", t.dtype())));
        }
    }
    if src.buffer() == dst.packed.buffer()
        || src.buffer() == dst.scales.buffer()
        || dst.packed.buffer() == dst.scales.buffer()
    {
        return Err(Error::invalid(
            OP,
            "buffers of src, packed and scales",
            "three distinct buffers",
            "a buffer bound twice",
        ));
    }
    let fits = |what: &str, end: u64, words: u64| {
        if end > words {
            Err(Error::invalid(
                OP,
                what.to_string(),
                format!("<= {words} words"),
                format!("{end} words"),
            ))
        } else {
            Ok(())
        }
    };
    let elements = groups as u64 * group as u64;
    let src_end = (src_offset as u64 + elements) * dtype.bytes() as u64;
    fits("source read", src_end.div_ceil(4), src.byte_size() / 4)?;
    fits(
        "packed words written",
        dst.packed_offset as u64 + elements / 8,
        dst.packed.byte_size() / 4,
    )?;
    fits(
        "scale words written",
        dst.scale_offset as u64 + (groups as u64).div_ceil(2),
        dst.scales.byte_size() / 4,
    )?;
    let to_u32 = |what: &str, v: u64| {
        u32::try_from(v).map_err(|_| Error::invalid(OP, what.to_string(), "< 2^32", v))
    };
    let params = Params {
        groups: to_u32("groups", groups as u64)?,
        group: to_u32("group size", group as u64)?,
        dtype: dtype.code(),
        src_offset: {
            to_u32("source end (elements)", src_offset as u64 + elements)?;
            src_offset as u32
        },
        packed_offset: to_u32("packed offset", dst.packed_offset as u64)?,
        scale_offset: to_u32("scale offset", dst.scale_offset as u64)?,
        _pad: [0; 2],
    };
    KernelBuilder::new(ctx, SHADER)
        .uniform(&params)
        .tensor(src)
        .tensor(dst.packed)
        .tensor(dst.scales)
        .build_1d(workgroups_for((groups as u64).div_ceil(2), WORKGROUP))
}

/// Largest finite f32, as bits: `|w|` bits above it are infinities and NaNs.
const FINITE_MAX: u32 = 0x7f7f_ffff;

/// Checks what the shader takes for granted about a `[rows, k]` block of raw weights whose
/// first row is `first_row` of the tensor `what` names (e.g. "`model.norm.weight` in
/// `model.safetensors`"): every weight finite, and every group's scale within f16's range.
pub fn check_q4_source(
    bytes: &[u8],
    dtype: SourceDtype,
    k: usize,
    group: usize,
    first_row: usize,
    what: &str,
) -> Result<()> {
    // |w| as f32 bits orders like |w| for finite values, and every non-finite value is
    // above every finite one: one max over the block decides both checks.
    let max_abs = max_abs_bits(bytes, dtype);
    if max_abs > FINITE_MAX {
        return Err(non_finite(bytes, dtype, first_row * k, what));
    }
    if !f16::from_f32(f32::from_bits(max_abs) / 7.0).is_infinite() {
        return Ok(());
    }
    // A scale overflows: name the first group whose does (rare, so a plain scan).
    let n = bytes.len() / dtype.bytes();
    let k = k.max(1);
    for i in 0..n {
        let w = f32::from_bits(dtype.f32_bits(bytes, i) & 0x7fff_ffff);
        if f16::from_f32(w / 7.0).is_infinite() {
            return Err(Error::invalid(
                "q4",
                format!(
                    "max |w| of row {} group {} of {what} (its scale must fit f16)",
                    first_row + i / k,
                    (i % k) / group.max(1)
                ),
                "<= 7 * 65504",
                w,
            ));
        }
    }
    Ok(())
}

/// Checks that every weight of a block of raw weights is finite (a NaN or an infinity
/// turns every logit into NaN); `first` is the block's first element in the tensor `what`
/// names. The error is the checkpoint reader's.
pub fn check_finite_source(
    bytes: &[u8],
    dtype: SourceDtype,
    first: usize,
    what: &str,
) -> Result<()> {
    if max_abs_bits(bytes, dtype) > FINITE_MAX {
        return Err(non_finite(bytes, dtype, first, what));
    }
    Ok(())
}

/// The error for the first non-finite weight of a block known to hold one.
fn non_finite(bytes: &[u8], dtype: SourceDtype, first: usize, what: &str) -> Error {
    let n = bytes.len() / dtype.bytes();
    let (i, bits) = (0..n)
        .map(|i| (i, dtype.f32_bits(bytes, i)))
        .find(|(_, bits)| bits & 0x7fff_ffff > FINITE_MAX)
        .unwrap_or((0, 0));
    Error::invalid(
        "checkpoint",
        format!("weights of {what}"),
        "finite numbers",
        format!("{} at element {}", f32::from_bits(bits), first + i),
    )
}

/// The largest `|w|` of the block as f32 bits, on all cores natively (this scan is also
/// what first touches a memory-mapped checkpoint's pages, so it is the read from disk).
fn max_abs_bits(bytes: &[u8], dtype: SourceDtype) -> u32 {
    let scan = |b: &[u8]| -> u32 {
        match dtype {
            SourceDtype::F32 => b
                .chunks_exact(4)
                .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]) & 0x7fff_ffff)
                .max()
                .unwrap_or(0),
            // Half-width bit patterns order the same way as their values; widen the max.
            SourceDtype::F16 | SourceDtype::BF16 => {
                let m = b
                    .chunks_exact(2)
                    .map(|h| u16::from_le_bytes([h[0], h[1]]) & 0x7fff)
                    .max()
                    .unwrap_or(0);
                dtype.f32_bits(&m.to_le_bytes(), 0)
            }
        }
    };
    let threads = if cfg!(target_arch = "wasm32") || bytes.len() < (8 << 20) {
        1
    } else {
        std::thread::available_parallelism()
            .map_or(1, |t| t.get())
            .min(16)
    };
    if threads == 1 {
        return scan(bytes);
    }
    let piece = (bytes.len() / threads).next_multiple_of(4);
    std::thread::scope(|s| {
        let handles: Vec<_> = bytes
            .chunks(piece)
            .map(|b| s.spawn(move || scan(b)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("scan thread"))
            .max()
            .unwrap_or(0)
    })
}
