//! A linear layer's weight and an embedding table on the GPU, made from a prepared
//! [`Matrix`] (whole, or zeroed and then written a block of rows at a time by
//! [`super::upload`]).

use crate::error::Result;
use crate::gpu::{GpuContext, Tensor};
use crate::ops::embedding::{EmbeddingTable, TableFormat, TableRows};
use crate::ops::ggml_linear::{ggml_linear, GgmlWeight};
use crate::ops::linear::{dense_linear, q4_linear, Linear, Q4Weight, Q4Words};
use crate::weights::layout::{Matrix, MatrixData, MatrixLayout, WeightFormat};

/// A linear layer's weight `[N, K]` in one of the formats.
#[derive(Debug, Clone)]
pub enum LinearWeight {
    Q4(Q4Weight),
    Dense(Tensor),
    /// ggml blocks as a GGUF file stores them (Q8_0, Q4_K, Q5_K, Q6_K, ...), run at their
    /// own precision ([`crate::ops::ggml_linear`]).
    Ggml(GgmlWeight),
}

impl LinearWeight {
    /// Uploads `w` (`[n, k]` row-major f32) in `format` ([`MatrixLayout::of`]: Q4 needs K
    /// to be a multiple of the group, else f16).
    pub fn upload(
        ctx: &GpuContext,
        name: &str,
        w: &[f32],
        n: usize,
        k: usize,
        format: WeightFormat,
    ) -> Result<Self> {
        let matrix = Matrix::prepare(w.to_vec(), n, k, MatrixLayout::of(format, k))?;
        LinearWeight::from_matrix(ctx, name, &matrix)
    }

    /// Uploads a prepared matrix as it is (no conversion).
    pub fn from_matrix(ctx: &GpuContext, name: &str, m: &Matrix<'_>) -> Result<Self> {
        m.validate(name)?;
        let (n, k) = (m.n, m.k);
        Ok(match &m.data {
            MatrixData::Q4 {
                group,
                packed,
                scales,
            } => LinearWeight::Q4(Q4Weight::upload_words(
                ctx,
                Q4Words {
                    n,
                    k,
                    group: *group,
                    packed,
                    scales,
                },
            )?),
            MatrixData::F32(w) => LinearWeight::Dense(Tensor::from_f32(ctx, name, &[n, k], w)?),
            MatrixData::F16(w) => LinearWeight::Dense(Tensor::from_f16(ctx, name, &[n, k], w)?),
        })
    }

    /// Builds `y = x W^T`.
    pub fn linear(&self, ctx: &GpuContext, x: &Tensor, y: &Tensor) -> Result<Linear> {
        match self {
            LinearWeight::Q4(w) => q4_linear(ctx, x, w, y),
            LinearWeight::Dense(w) => dense_linear(ctx, x, w, y),
            LinearWeight::Ggml(w) => ggml_linear(ctx, x, w, y),
        }
    }

    pub fn bytes(&self) -> u64 {
        match self {
            LinearWeight::Q4(w) => w.bytes(),
            LinearWeight::Dense(t) => t.byte_size(),
            LinearWeight::Ggml(w) => w.bytes(),
        }
    }
}

/// The table of a tied matrix over its linear weight's buffers, where the layouts agree
/// (Q4: [`EmbeddingTable::from_q4`]; ggml blocks: [`EmbeddingTable::from_ggml`]): one copy
/// on the GPU. None for dense weights, whose table is chunked and the linear weight not.
pub fn table_over(linear: &LinearWeight) -> Option<EmbeddingTable> {
    match linear {
        LinearWeight::Q4(w) => Some(EmbeddingTable::from_q4(w)),
        LinearWeight::Ggml(w) => Some(EmbeddingTable::from_ggml(w)),
        LinearWeight::Dense(_) => None,
    }
}

/// Uploads a prepared `[rows, dim]` matrix as an embedding table in its own layout.
pub fn table_from_matrix(ctx: &GpuContext, label: &str, m: &Matrix<'_>) -> Result<EmbeddingTable> {
    m.validate(label)?;
    let (format, rows) = table_rows(m);
    EmbeddingTable::from_rows(ctx, label, m.k, format, rows, None)
}

/// A prepared matrix's rows as an embedding table takes them, and that table's format.
pub fn table_rows<'m>(m: &'m Matrix<'_>) -> (TableFormat, TableRows<'m>) {
    match &m.data {
        MatrixData::F32(w) => (TableFormat::F32, TableRows::F32(w)),
        MatrixData::F16(h) => (TableFormat::F16, TableRows::F16(h)),
        MatrixData::Q4 {
            group,
            packed,
            scales,
        } => {
            // f16 scales two per word; the last word's high half is padding when odd.
            let scales: &[half::f16] = bytemuck::cast_slice(scales);
            let rows = TableRows::Q4 {
                words: packed,
                scales: &scales[..m.n * m.k / group],
            };
            (TableFormat::Q4 { group: *group }, rows)
        }
    }
}
