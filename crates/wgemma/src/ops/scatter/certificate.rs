//! Uniqueness certificates: the only way an index tensor reaches the parallel scatter route.
//! Their fields are private and they have no public constructor that does not verify, so
//! code outside this module cannot forge one:
//!
//! - [`PermutationCertificate`]: a `[rows, cols]` u32 table verified on the host to hold
//!   each of `0..rows * cols` exactly once (the assistant's `token_ordering`, 2048 x 128 =
//!   262144), uploaded by the certificate itself.
//! - [`UniqueIndices`]: "the indices in THIS tensor are pairwise distinct within each row
//!   and `< bound`". Made by [`UniqueIndices::verify_and_upload`] (host check), or derived
//!   by [`PermutationCertificate::select_rows`]: rows of a certified permutation selected by
//!   TopK indices, which are distinct by construction ([`DistinctIndices`]). Distinct rows
//!   of a permutation are disjoint, so the selected ids are distinct.
//!
//! A certificate names its tensor (same buffer, shape and dtype); a look-alike tensor is
//! uncertified. It covers the values its producer writes (the upload, or the gather kernel
//! `select_rows` returns, dispatched before the scatter in the same pass): writing the
//! tensor by other means voids it, which is why the tensors are only handed out by `&`.
//!
//! ```compile_fail,E0451
//! // Outside the module, a certificate cannot be built from parts.
//! fn forge(t: wgemma::gpu::Tensor) -> wgemma::ops::scatter::UniqueIndices {
//!     wgemma::ops::scatter::UniqueIndices { tensor: t, rows: 1, per_row: 1, bound: 1 }
//! }
//! ```

use crate::error::{Error, Result};
use crate::gpu::{DType, GpuContext, Kernel, Tensor};
use crate::ops::gather::{gather_rows, RowTable};
use crate::ops::topk::{same_tensor, DistinctIndices};

const OP: &str = "scatter certificate";

/// A `[rows, cols]` u32 table on the GPU, verified to be a permutation of `0..rows * cols`.
#[derive(Debug, Clone)]
pub struct PermutationCertificate {
    table: RowTable,
    tensor: Tensor,
    rows: usize,
    cols: usize,
}

impl PermutationCertificate {
    /// Verifies on the host that `table` (`[rows, cols]`, row-major) holds each of
    /// `0..rows * cols` exactly once, then uploads it. Errors name the first offending entry.
    pub fn verify_and_upload(
        ctx: &GpuContext,
        label: &str,
        table: &[u32],
        rows: usize,
        cols: usize,
    ) -> Result<PermutationCertificate> {
        let len = rows * cols;
        if rows == 0 || cols == 0 || table.len() != len || u32::try_from(len).is_err() {
            return Err(Error::invalid(
                OP,
                format!("permutation table `{label}` [{rows}, {cols}]"),
                format!("{len} entries (rows, cols >= 1, < 2^32 in all)"),
                table.len(),
            ));
        }
        let mut seen = vec![false; len];
        for (pos, &v) in table.iter().enumerate() {
            let v = v as usize;
            if v >= len {
                return Err(Error::invalid(
                    OP,
                    format!("`{label}`[{pos}] of a permutation of 0..{len}"),
                    format!("< {len}"),
                    v,
                ));
            }
            if std::mem::replace(&mut seen[v], true) {
                return Err(Error::invalid(
                    OP,
                    format!("`{label}`[{pos}] of a permutation of 0..{len}"),
                    "a value not seen before",
                    format!("a second {v}"),
                ));
            }
        }
        let tensor = Tensor::from_u32(ctx, label, &[rows, cols], table)?;
        Ok(PermutationCertificate {
            table: RowTable::from_tensor(tensor.clone())?,
            tensor,
            rows,
            cols,
        })
    }

    /// The verified table, u32 `[rows, cols]`.
    pub fn table(&self) -> &Tensor {
        &self.tensor
    }
    pub fn rows(&self) -> usize {
        self.rows
    }
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Plans the gather `out[r, j * cols + c] = table[selection[r, j], c]` (the centroid
    /// head's `token_ordering[top_k_indices]`) and returns its kernels with the certificate
    /// that `out` (u32, `[.., k * cols]` with `rows * k * cols` elements) holds distinct ids
    /// per row. The selection must come from a TopK over at most `self.rows()` entries, so
    /// every selected row exists (the gather's zero rows for out-of-range indices would
    /// repeat 0).
    pub fn select_rows(
        &self,
        ctx: &GpuContext,
        selection: &DistinctIndices,
        out: &Tensor,
    ) -> Result<(Vec<Kernel>, UniqueIndices)> {
        if selection.bound() > self.rows {
            return Err(Error::invalid(
                OP,
                "bound of the TopK selection (its row length)",
                format!("<= {} (rows of the permutation)", self.rows),
                selection.bound(),
            ));
        }
        let per_row = selection.k() * self.cols;
        if out.dtype() != DType::U32
            || out.shape().last() != Some(&per_row)
            || out.numel() != selection.rows() * per_row
        {
            return Err(Error::invalid(
                OP,
                "selected ids tensor",
                format!(
                    "u32 [.., {per_row}] with {} elements",
                    selection.rows() * per_row
                ),
                format!("{:?} {:?}", out.dtype(), out.shape()),
            ));
        }
        let flat = out.reshaped(&[selection.rows() * selection.k(), self.cols])?;
        let gather = gather_rows(ctx, &self.table, selection.tensor(), &flat)?;
        Ok((
            gather.kernels,
            UniqueIndices {
                tensor: out.clone(),
                rows: selection.rows(),
                per_row,
                bound: self.rows * self.cols,
            },
        ))
    }
}

/// Proof that the u32 indices of one tensor (`[.., per_row]`, `rows` rows) are pairwise
/// distinct within each row and all `< bound`.
#[derive(Debug, Clone)]
pub struct UniqueIndices {
    tensor: Tensor,
    rows: usize,
    per_row: usize,
    bound: usize,
}

impl UniqueIndices {
    /// Verifies on the host that each row (the last dim of `shape`) of `indices` holds
    /// distinct values, then uploads them. `bound` is one past the largest index.
    pub fn verify_and_upload(
        ctx: &GpuContext,
        label: &str,
        shape: &[usize],
        indices: &[u32],
    ) -> Result<UniqueIndices> {
        let per_row = shape.last().copied().unwrap_or(0);
        let numel: usize = shape.iter().product();
        if per_row == 0 || numel != indices.len() {
            return Err(Error::invalid(
                OP,
                format!("indices `{label}` of shape {shape:?}"),
                format!("{numel} entries and a last dim >= 1"),
                indices.len(),
            ));
        }
        let mut seen = std::collections::HashSet::with_capacity(per_row);
        for (r, row) in indices.chunks(per_row).enumerate() {
            seen.clear();
            for (i, &v) in row.iter().enumerate() {
                if !seen.insert(v) {
                    return Err(Error::invalid(
                        OP,
                        format!("`{label}` row {r} position {i}"),
                        "an index not seen before in its row",
                        format!("a second {v}"),
                    ));
                }
            }
        }
        let bound = indices.iter().max().map_or(0, |&m| m as usize + 1);
        Ok(UniqueIndices {
            tensor: Tensor::from_u32(ctx, label, shape, indices)?,
            rows: numel / per_row,
            per_row,
            bound,
        })
    }

    /// The certified index tensor.
    pub fn tensor(&self) -> &Tensor {
        &self.tensor
    }
    pub fn rows(&self) -> usize {
        self.rows
    }
    pub fn per_row(&self) -> usize {
        self.per_row
    }
    pub fn bound(&self) -> usize {
        self.bound
    }
    /// Whether this certificate is about `tensor` (same buffer, shape and dtype).
    pub fn certifies(&self, tensor: &Tensor) -> bool {
        same_tensor(&self.tensor, tensor)
    }
}
