//! Stored bf16 / f16 / f32 rows to the GPU a block at a time: checked on the host, then
//! quantised on the GPU from a staging buffer or prepared on the CPU ([`super::Quantiser`]).

use super::{StreamOptions, Uploaded, Uploader};
use crate::error::{Error, Result};
use crate::gpu::Step;
use crate::ops::quantize::{
    check_finite_source, check_q4_source, q4_quantize, source_to_f32, Q4Dest, SourceDtype,
};
use crate::weights::layout::{Matrix, MatrixLayout, MatrixSpec};
use crate::weights::raw::RawTensor;
use std::ops::Range;

/// Uploads stored bf16 / f16 / f32 row blocks `parts` as one `[n, k]` matrix, a block of
/// rows at a time, each block's bytes released once uploaded.
pub(super) fn upload_float_parts(
    up: &mut Uploader<'_>,
    options: StreamOptions,
    name: &str,
    parts: &[RawTensor<'_>],
    spec: MatrixSpec,
) -> Result<Uploaded> {
    let MatrixSpec { n, k, layout, use_ } = spec;
    let dest = Uploaded::zeros(up, name, n, k, layout, use_)?;
    let part_rows = n / parts.len();
    let mut stored = Vec::with_capacity(parts.len());
    for (p, part) in parts.iter().enumerate() {
        let dtype = part
            .dtype
            .source_dtype()
            .ok_or_else(|| layout_mismatch_raw(part))?;
        let data = part.stored_bytes()?;
        let row_bytes = k * dtype.bytes();
        if data.len() != part_rows * row_bytes {
            return Err(Error::invalid(
                "upload",
                format!("bytes of part {p} of `{name}`"),
                part_rows * row_bytes,
                data.len(),
            ));
        }
        stored.push((part, dtype, data));
    }
    // Parts must start on whole words of the destination (Q4: of the scales too), else two
    // blocks would share a word: only tiny test shapes miss, and load whole.
    let part_elems = match layout {
        MatrixLayout::Q4 { group } => part_rows * (k / group),
        MatrixLayout::F16 => part_rows * k,
        MatrixLayout::F32 => 0,
    };
    if parts.len() > 1 && part_elems % 2 == 1 {
        for &(part, dtype, data) in &stored {
            check_block(&part.what, dtype, data, k, layout, 0)?;
        }
        let values: Vec<f32> = stored
            .iter()
            .flat_map(|&(_, dtype, data)| source_to_f32(data, dtype))
            .collect();
        dest.write_rows(up.ctx, 0, &Matrix::prepare(values, n, k, layout)?)?;
        up.flush();
        for &(part, _, data) in &stored {
            part.release(0..data.len());
        }
        return Ok(dest);
    }
    let on_gpu = options.quantiser.on_gpu(up.ctx);
    for (p, &(part, dtype, data)) in stored.iter().enumerate() {
        let row_bytes = k * dtype.bytes();
        // Whole multiples of 64 rows per block (every chunk boundary is one), at least 64.
        let block_bytes = options.block_bytes.min(up.staging_bytes());
        let block_rows = (block_bytes / row_bytes / 64 * 64).max(64);
        let mut r0 = 0;
        while r0 < part_rows {
            let r1 = (r0 + block_rows).min(part_rows);
            let range = r0 * row_bytes..r1 * row_bytes;
            let bytes = &data[range.clone()];
            let first = p * part_rows + r0;
            let rows = first..first + r1 - r0;
            check_block(&part.what, dtype, bytes, k, layout, r0)?;
            match layout {
                MatrixLayout::Q4 { group } if on_gpu => {
                    quantise_block_on_gpu(up, &dest, bytes, dtype, rows, k, group)?;
                }
                _ => {
                    let values = source_to_f32(bytes, dtype);
                    let block = Matrix::prepare(values, rows.len(), k, layout)?;
                    dest.write_rows(up.ctx, first, &block)?;
                    up.flush();
                }
            }
            part.release(range);
            r0 = r1;
        }
    }
    Ok(dest)
}

fn layout_mismatch_raw(part: &RawTensor<'_>) -> Error {
    Error::invalid(
        "upload",
        format!("dtype of {}", part.what),
        "bf16, f16 or f32",
        format!("{:?}", part.dtype),
    )
}

/// Checks a block of a stored tensor (rows from `first_row` of it) before anything is
/// uploaded: finite weights, and for Q4 scales within f16's range.
fn check_block(
    what: &str,
    dtype: SourceDtype,
    bytes: &[u8],
    k: usize,
    layout: MatrixLayout,
    first_row: usize,
) -> Result<()> {
    match layout {
        MatrixLayout::Q4 { group } => check_q4_source(bytes, dtype, k, group, first_row, what),
        _ => check_finite_source(bytes, dtype, first_row * k, what),
    }
}

/// Stages one block's raw bytes and quantises them into every destination chunk it
/// overlaps, in one submit.
fn quantise_block_on_gpu(
    up: &mut Uploader<'_>,
    dest: &Uploaded,
    bytes: &[u8],
    dtype: SourceDtype,
    rows: Range<usize>,
    k: usize,
    group: usize,
) -> Result<()> {
    let staging = up.staging()?;
    let ctx = up.ctx;
    if bytes.len() % 4 == 0 {
        ctx.queue.write_buffer(staging.buffer(), 0, bytes);
    } else {
        let mut padded = bytes.to_vec();
        padded.resize(bytes.len().div_ceil(4) * 4, 0);
        ctx.queue.write_buffer(staging.buffer(), 0, &padded);
    }
    let groups = k / group;
    let mut kernels = Vec::new();
    for (chunk, packed, scales) in dest.q4_chunks() {
        let (lo, hi) = (rows.start.max(chunk.start), rows.end.min(chunk.end));
        if lo >= hi {
            continue;
        }
        kernels.push(q4_quantize(
            ctx,
            &staging,
            dtype,
            (lo - rows.start) * k,
            (hi - lo) * groups,
            group,
            Q4Dest {
                packed,
                packed_offset: (lo - chunk.start) * k / 8,
                scales,
                scale_offset: (lo - chunk.start) * groups / 2,
            },
        )?);
    }
    let mut step = Step::new(ctx);
    step.pass(|pass| {
        for kernel in &kernels {
            pass.dispatch(kernel);
        }
    });
    let index = step.submit();
    up.submitted(index);
    Ok(())
}
