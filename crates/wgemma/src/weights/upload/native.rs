//! GGUF matrices at their stored precision: ggml blocks of a type [`crate::ops::ggml_linear`]
//! runs are uploaded byte for byte into a [`GgmlWeight`] (no second rounding), a block of
//! rows at a time from the memory map, each block's pages released once written. A linear
//! weight runs them as they are; an embedding table gathers from the same buffers
//! ([`EmbeddingTable::from_ggml`]), so the tied embedding and lm_head hold one copy.

use super::{Uploaded, Uploader, BLOCK_BYTES};
use crate::error::{Error, Result};
use crate::ops::embedding::EmbeddingTable;
use crate::ops::ggml_linear::{is_native, GgmlWeight};
use crate::weights::ggml::GgmlType;
use crate::weights::layout::{MatrixSpec, MatrixUse};
use crate::weights::linear::LinearWeight;
use crate::weights::raw::{RawData, RawDtype, RawTensor};

/// The ggml type every part stores, when the ops run it natively and the matrix is a
/// linear weight, an embedding table or both (not MoE experts or the centroid head's rows).
pub(super) fn native_type(parts: &[RawTensor<'_>], use_: MatrixUse) -> Option<GgmlType> {
    let RawDtype::Ggml(ty) = parts.first()?.dtype else {
        return None;
    };
    let stored =
        |p: &RawTensor<'_>| p.dtype == RawDtype::Ggml(ty) && matches!(p.data, RawData::Bytes(_));
    let used = matches!(
        use_,
        MatrixUse::Linear | MatrixUse::Table | MatrixUse::TableAndLinear
    );
    (is_native(ty) && used && parts.iter().all(stored)).then_some(ty)
}

/// Uploads the `[n, k]` matrix stacked from `parts` (all stored as `ty`) as stored: a
/// [`LinearWeight::Ggml`] and/or an embedding table over the same buffers.
pub(super) fn upload_native(
    up: &mut Uploader<'_>,
    name: &str,
    parts: &[RawTensor<'_>],
    spec: MatrixSpec,
    ty: GgmlType,
) -> Result<Uploaded> {
    let MatrixSpec { n, k, use_, .. } = spec;
    let ctx = up.ctx;
    let part_rows = n / parts.len();
    let row_bytes = ty.bytes_of(k);
    let weight = match up.max_chunk_bytes {
        Some(max) => GgmlWeight::zeros_with_max_binding(ctx, ty, n, k, max)?,
        None => GgmlWeight::zeros(ctx, ty, n, k)?,
    };
    let mut stored = Vec::with_capacity(parts.len());
    for (p, part) in parts.iter().enumerate() {
        let bytes = part.stored_bytes()?;
        if bytes.len() != part_rows * row_bytes {
            return Err(Error::invalid(
                "upload",
                format!("{ty:?} bytes of part {p} of `{name}` [{part_rows}, {k}]"),
                part_rows * row_bytes,
                bytes.len(),
            ));
        }
        stored.push(bytes);
    }
    if parts.len() > 1 && (part_rows * row_bytes) % 4 != 0 {
        // Parts whose rows meet mid word (tiny test shapes only): written as one block.
        weight.write_rows(ctx, 0, &stored.concat())?;
        up.flush();
        for (part, bytes) in parts.iter().zip(&stored) {
            part.release(0..bytes.len());
        }
    } else {
        // Blocks of whole multiples of 64 rows: every chunk start is one.
        let block_rows = (BLOCK_BYTES / row_bytes / 64 * 64).max(64);
        for (p, (part, bytes)) in parts.iter().zip(&stored).enumerate() {
            for r0 in (0..part_rows).step_by(block_rows) {
                let range = r0 * row_bytes..(r0 + block_rows).min(part_rows) * row_bytes;
                weight.write_rows(ctx, p * part_rows + r0, &bytes[range.clone()])?;
                up.flush();
                part.release(range);
            }
        }
    }
    let table = matches!(use_, MatrixUse::Table | MatrixUse::TableAndLinear)
        .then(|| EmbeddingTable::from_ggml(&weight));
    let linear = (use_ != MatrixUse::Table).then_some(LinearWeight::Ggml(weight));
    Ok(Uploaded { linear, table })
}
