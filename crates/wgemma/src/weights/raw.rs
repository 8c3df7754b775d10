//! A stored tensor as a format hands it over: dtype, shape and bytes, nothing converted.
//! Everything that turns one into what the model uses lives here and in
//! [`super::upload`]: f32 values for the host, integers, a block of rows prepared in a
//! [`MatrixLayout`], MoE experts. The formats only say what they store.

use super::ggml::{dequantize, q4_0_to_wgemma_q4, GgmlType};
use super::layout::{Matrix, MatrixData, MatrixLayout};
use crate::error::{Error, Result};
use crate::ops::linear::Q4Host;
use crate::ops::moe::{ExpertFormat, ExpertHost};
use crate::ops::quantize::{check_finite_source, source_to_f32, SourceDtype};
use std::borrow::Cow;
use std::ops::Range;

const OP: &str = "weights";

/// How a stored tensor's elements are encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RawDtype {
    F32,
    F16,
    BF16,
    /// One of ggml's block formats (Q8_0, Q4_0, Q4_K, Q6_K): dequantised exactly, and
    /// Q4_0 placed into Q4 group 32 with no value changed.
    Ggml(GgmlType),
    I32,
    I64,
    U32,
    /// Already in its GPU layout (an artifact's matrices, its f32 vectors): placed as
    /// stored. A Q4 one holds [`RawData::Q4Words`].
    Prepared(MatrixLayout),
}

/// A stored tensor's elements.
pub enum RawData<'a> {
    /// The stored bytes (row-major), borrowed from the file or owned.
    Bytes(Cow<'a, [u8]>),
    /// A prepared Q4 matrix's packed words and scale words ([`MatrixLayout::Q4`]).
    Q4Words { packed: &'a [u8], scales: &'a [u8] },
    /// f32 values computed on demand for a range of elements (synthetic weights: each
    /// value depends only on its index, so a block of rows is computed alone).
    Computed(Box<dyn Fn(Range<usize>) -> Vec<f32> + 'a>),
}

/// One stored tensor, checked by its source against the shape the loader expects.
pub struct RawTensor<'a> {
    pub dtype: RawDtype,
    /// The expected shape (row-major, HF order); rows are all dimensions but the last.
    pub shape: Vec<usize>,
    pub data: RawData<'a>,
    /// The tensor, for errors: e.g. "`model.norm.weight` in `model.safetensors`".
    pub what: String,
    /// Called with each byte range of [`RawData::Bytes`] once the loader is done with it
    /// (a memory map drops its pages).
    pub release: Option<Box<dyn Fn(Range<usize>) + 'a>>,
}

impl RawDtype {
    /// The dtype of the plain float kinds the GPU quantiser reads.
    pub fn source_dtype(self) -> Option<SourceDtype> {
        match self {
            RawDtype::F32 | RawDtype::Prepared(MatrixLayout::F32) => Some(SourceDtype::F32),
            RawDtype::F16 | RawDtype::Prepared(MatrixLayout::F16) => Some(SourceDtype::F16),
            RawDtype::BF16 => Some(SourceDtype::BF16),
            _ => None,
        }
    }

    /// Bytes of a row of `k` elements (None for a prepared Q4 matrix, stored as two
    /// tensors).
    pub fn row_bytes(self, k: usize) -> Option<usize> {
        match self {
            RawDtype::Ggml(ty) => Some(ty.bytes_of(k)),
            RawDtype::I64 => Some(8 * k),
            RawDtype::I32 | RawDtype::U32 => Some(4 * k),
            RawDtype::Prepared(MatrixLayout::Q4 { .. }) => None,
            other => other.source_dtype().map(|d| d.bytes() * k),
        }
    }
}

impl<'a> RawTensor<'a> {
    /// A tensor of stored bytes, with no release.
    pub fn bytes(
        dtype: RawDtype,
        shape: &[usize],
        data: &'a [u8],
        what: impl Into<String>,
    ) -> Self {
        RawTensor {
            dtype,
            shape: shape.to_vec(),
            data: RawData::Bytes(Cow::Borrowed(data)),
            what: what.into(),
            release: None,
        }
    }

    /// f32 values held on the host (a synthetic tensor computed whole).
    pub fn values(shape: &[usize], values: Vec<f32>, what: impl Into<String>) -> Self {
        RawTensor {
            dtype: RawDtype::F32,
            shape: shape.to_vec(),
            data: RawData::Bytes(Cow::Owned(bytemuck::cast_slice(&values).to_vec())),
            what: what.into(),
            release: None,
        }
    }

    /// Calls `release` with each byte range of the data the loader is done with.
    pub fn with_release(mut self, release: impl Fn(Range<usize>) + 'a) -> Self {
        self.release = Some(Box::new(release));
        self
    }

    /// Elements per row (the last dimension).
    pub fn k(&self) -> usize {
        self.shape.last().copied().unwrap_or(1)
    }

    /// Rows (the product of all dimensions but the last).
    pub fn rows(&self) -> usize {
        self.shape.iter().product::<usize>() / self.k().max(1)
    }

    pub(crate) fn release(&self, bytes: Range<usize>) {
        if let Some(release) = &self.release {
            release(bytes);
        }
    }

    fn bad_dtype(&self, expected: &str) -> Error {
        Error::invalid(
            OP,
            format!("dtype of {}", self.what),
            expected,
            format!("{:?}", self.dtype),
        )
    }

    /// The byte range of rows `rows` of stored bytes, checked.
    pub(crate) fn row_range(&self, rows: &Range<usize>) -> Result<Range<usize>> {
        let total = self.rows();
        if rows.start > rows.end || rows.end > total {
            return Err(Error::invalid(
                OP,
                format!("rows of {}", self.what),
                format!("a range within 0..{total}"),
                format!("{rows:?}"),
            ));
        }
        let row = self
            .dtype
            .row_bytes(self.k())
            .ok_or_else(|| self.bad_dtype("a dtype stored row by row"))?;
        Ok(rows.start * row..rows.end * row)
    }

    /// The stored bytes (an error for computed values and prepared Q4 words).
    pub(crate) fn stored_bytes(&self) -> Result<&[u8]> {
        match &self.data {
            RawData::Bytes(b) => Ok(b),
            _ => Err(self.bad_dtype("stored bytes")),
        }
    }

    /// The stored bytes of rows `rows`, checked against what the source holds.
    fn rows_bytes(&self, rows: &Range<usize>) -> Result<&[u8]> {
        let range = self.row_range(rows)?;
        let bytes = self.stored_bytes()?;
        bytes.get(range.clone()).ok_or_else(|| {
            Error::invalid(
                OP,
                format!("bytes of rows {rows:?} of {}", self.what),
                format!("{range:?} within the tensor's data"),
                format!("{} bytes", bytes.len()),
            )
        })
    }

    /// Rows `rows` as f32, checked finite (an error naming the tensor and element).
    pub fn rows_f32(&self, rows: Range<usize>) -> Result<Vec<f32>> {
        let k = self.k();
        let first = rows.start * k;
        if let RawData::Computed(values) = &self.data {
            if rows.end > self.rows() {
                return Err(Error::invalid(
                    OP,
                    format!("rows of {}", self.what),
                    format!("a range within 0..{}", self.rows()),
                    format!("{rows:?}"),
                ));
            }
            // Computed values are finite by construction: no scan of E2B's billions.
            return Ok(values(first..rows.end * k));
        }
        let bytes = self.rows_bytes(&rows)?;
        if let Some(dtype) = self.dtype.source_dtype() {
            check_finite_source(bytes, dtype, first, &self.what)?;
            return Ok(source_to_f32(bytes, dtype));
        }
        match self.dtype {
            RawDtype::Ggml(ty) if ty.is_float() => {
                let mut values = vec![0.0f32; rows.len() * k];
                dequantize(ty, bytes, &mut values)?;
                check_finite_values(&self.what, first, &values)?;
                Ok(values)
            }
            _ => Err(self.bad_dtype("bf16, f16 or f32, or a ggml block type")),
        }
    }

    /// The whole tensor as f32 ([`RawTensor::rows_f32`]).
    pub fn to_f32(&self) -> Result<Vec<f32>> {
        self.rows_f32(0..self.rows())
    }

    /// An integer tensor (i64, i32 or u32) as i64.
    pub fn to_i64(&self) -> Result<Vec<i64>> {
        let ints = |b: &[u8]| -> Result<Vec<i64>> {
            Ok(match self.dtype {
                RawDtype::I64 => b
                    .chunks_exact(8)
                    .map(|b| i64::from_le_bytes(b.try_into().expect("8 bytes")))
                    .collect(),
                RawDtype::I32 => b
                    .chunks_exact(4)
                    .map(|b| i32::from_le_bytes(b.try_into().expect("4 bytes")) as i64)
                    .collect(),
                RawDtype::U32 => b
                    .chunks_exact(4)
                    .map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")) as i64)
                    .collect(),
                _ => return Err(self.bad_dtype("i64, i32 or u32")),
            })
        };
        match &self.data {
            RawData::Bytes(b) => ints(b),
            _ => Err(self.bad_dtype("i64, i32 or u32")),
        }
    }

    /// Rows `rows` of this `[_, k]` matrix prepared in `layout`, their bytes released: a
    /// ggml Q4_0 block into Q4 group 32 is moved bit for bit, everything else goes through
    /// f32 ([`Matrix::prepare`]). What the loader uploads a block at a time, and what
    /// `wgemma convert` writes, so both hold the same words.
    pub fn prepared_rows(
        &self,
        rows: Range<usize>,
        layout: MatrixLayout,
    ) -> Result<Matrix<'static>> {
        let (n, k) = (rows.len(), self.k());
        let m = match (self.dtype, layout) {
            (RawDtype::Ggml(GgmlType::Q4_0), MatrixLayout::Q4 { group: 32 }) => {
                let (packed, scales) = q4_0_to_wgemma_q4(self.rows_bytes(&rows)?, n, k)?;
                Matrix {
                    n,
                    k,
                    data: MatrixData::Q4 {
                        group: 32,
                        packed: Cow::Owned(packed),
                        scales: Cow::Owned(scales),
                    },
                }
            }
            _ => Matrix::prepare(self.rows_f32(rows.clone())?, n, k, layout)?,
        };
        if let RawData::Bytes(_) = self.data {
            self.release(self.row_range(&rows)?);
        }
        Ok(m)
    }

    /// A prepared matrix `[n, k]` in `layout` as stored, borrowed where aligned; an error
    /// naming both layouts when the tensor is stored in another one.
    pub fn as_prepared(&self, n: usize, k: usize, layout: MatrixLayout) -> Result<Matrix<'_>> {
        if self.dtype != RawDtype::Prepared(layout) {
            return Err(self.bad_dtype(&format!("{:?}", RawDtype::Prepared(layout))));
        }
        let data = match (&self.data, layout) {
            (RawData::Q4Words { packed, scales }, MatrixLayout::Q4 { group }) => MatrixData::Q4 {
                group,
                packed: view(packed),
                scales: view(scales),
            },
            (RawData::Bytes(b), MatrixLayout::F32) => MatrixData::F32(view(b)),
            (RawData::Bytes(b), MatrixLayout::F16) => MatrixData::F16(view(b)),
            _ => return Err(self.bad_dtype("stored words of its layout")),
        };
        let m = Matrix { n, k, data };
        m.validate(&self.what)?;
        Ok(m)
    }

    /// This whole `[n, k]` matrix in `layout` on the host: as stored when prepared in it,
    /// else converted (the centroid head's row table).
    pub fn host_matrix(&self, n: usize, k: usize, layout: MatrixLayout) -> Result<Matrix<'_>> {
        match self.dtype {
            RawDtype::Prepared(_) => self.as_prepared(n, k, layout),
            _ => self.prepared_rows(0..n, layout),
        }
    }

    /// MoE experts `[experts, n, k]` in `format`: as stored when prepared in it (one
    /// transient copy: expert uploads take owned data), else expert by expert
    /// ([`experts_by_expert`]), each expert's bytes released once converted.
    pub fn experts(
        &self,
        experts: usize,
        n: usize,
        k: usize,
        format: ExpertFormat,
    ) -> Result<ExpertHost> {
        if let RawDtype::Prepared(_) = self.dtype {
            let m = self.as_prepared(experts * n, k, expert_layout(format))?;
            return match m.data {
                MatrixData::F32(v) => ExpertHost::f32(v.into_owned(), experts, n, k),
                MatrixData::F16(v) => ExpertHost::f16(v.into_owned(), experts, n, k),
                MatrixData::Q4 {
                    group,
                    packed,
                    scales,
                } => ExpertHost::from_q4(
                    Q4Host::from_parts(
                        experts * n,
                        k,
                        group,
                        packed.into_owned(),
                        scales.into_owned(),
                    )?,
                    experts,
                ),
            };
        }
        experts_by_expert(experts, n, k, format, &mut |e| {
            let rows = e * n..(e + 1) * n;
            let values = self.rows_f32(rows.clone())?;
            if let RawData::Bytes(_) = self.data {
                self.release(self.row_range(&rows)?);
            }
            Ok(values)
        })
    }
}

/// The layout of MoE experts: the format's own, as [`ExpertHost::from_f32`] makes it.
pub fn expert_layout(format: ExpertFormat) -> MatrixLayout {
    match format {
        ExpertFormat::F32 => MatrixLayout::F32,
        ExpertFormat::F16 => MatrixLayout::F16,
        ExpertFormat::Q4 { group } => MatrixLayout::Q4 { group },
    }
}

/// A u32 / f32 / f16 view of `bytes`, borrowed when aligned, else copied.
fn view<T: bytemuck::Pod>(bytes: &[u8]) -> Cow<'_, [T]> {
    match bytemuck::try_cast_slice(bytes) {
        Ok(v) => Cow::Borrowed(v),
        Err(_) => Cow::Owned(bytemuck::pod_collect_to_vec(bytes)),
    }
}

/// Refuses a NaN or infinite weight, naming the tensor and the element (the same error as
/// [`check_finite_source`]): such a weight turns every logit into NaN, and the model would
/// silently emit token 0.
fn check_finite_values(what: &str, first: usize, values: &[f32]) -> Result<()> {
    match values.iter().position(|v| !v.is_finite()) {
        None => Ok(()),
        Some(i) => Err(Error::invalid(
            "checkpoint",
            format!("weights of {what}"),
            "finite numbers",
            format!("{} at element {}", values[i], first + i),
        )),
    }
}

/// Builds expert weights `[E, N, K]` in `format` one expert at a time: `read(e)` gives
/// expert `e`'s `[N, K]` values, which are converted and dropped before the next is read,
/// so a load never holds the whole tensor in f32 (26B-A4B's `gate_up_proj` is 2 GB of f32
/// per layer; its Q4 form 0.28 GB). Q4 groups never cross a row, so quantising expert by
/// expert gives the words of the whole `[E * N, K]` matrix.
pub fn experts_by_expert(
    experts: usize,
    n: usize,
    k: usize,
    format: ExpertFormat,
    read: &mut dyn FnMut(usize) -> Result<Vec<f32>>,
) -> Result<ExpertHost> {
    match format {
        ExpertFormat::F32 => {
            let mut w = Vec::with_capacity(experts * n * k);
            for e in 0..experts {
                w.extend(read(e)?);
            }
            ExpertHost::f32(w, experts, n, k)
        }
        ExpertFormat::F16 => {
            let mut w = Vec::with_capacity(experts * n * k);
            for e in 0..experts {
                w.extend(read(e)?.into_iter().map(half::f16::from_f32));
            }
            ExpertHost::f16(w, experts, n, k)
        }
        ExpertFormat::Q4 { group } => {
            let groups = k / group.max(1);
            let mut packed = Vec::with_capacity(experts * n * k / 8);
            let mut halves: Vec<u16> = Vec::with_capacity(experts * n * groups);
            for e in 0..experts {
                let q = crate::ops::linear::quantize_q4(&read(e)?, n, k, group)?;
                packed.extend_from_slice(&q.packed);
                halves
                    .extend_from_slice(&bytemuck::cast_slice::<u32, u16>(&q.scales)[..n * groups]);
            }
            let scales = crate::ops::linear::pack_scale_halves(&halves);
            let q = crate::ops::linear::Q4Host::from_parts(experts * n, k, group, packed, scales)?;
            ExpertHost::from_q4(q, experts)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Expert by expert gives what the whole tensor gives, in every format, including an
    /// odd scale count per expert (experts meeting mid word).
    #[test]
    fn experts_by_expert_equal_the_whole_tensor() {
        let (experts, n, k) = (3, 5, 64);
        let w: Vec<f32> = (0..experts * n * k)
            .map(|i| ((i as f32) * 0.37).sin() * (1.0 + (i % 5) as f32))
            .collect();
        for format in [
            ExpertFormat::F32,
            ExpertFormat::F16,
            ExpertFormat::Q4 { group: 32 },
            ExpertFormat::Q4 { group: 64 },
        ] {
            let whole = ExpertHost::from_f32(&w, experts, n, k, format).unwrap();
            let mut read = |e: usize| Ok(w[e * n * k..(e + 1) * n * k].to_vec());
            let streamed = experts_by_expert(experts, n, k, format, &mut read).unwrap();
            assert_eq!(streamed, whole, "{format:?}");
            let raw = RawTensor::values(&[experts, n, k], w.clone(), "`w`");
            assert_eq!(
                raw.experts(experts, n, k, format).unwrap(),
                whole,
                "{format:?}"
            );
        }
    }

    #[test]
    fn wrong_dtypes_and_bad_values_are_named() {
        let ints = RawTensor::bytes(RawDtype::I64, &[1], &[0; 8], "`t` in `f`");
        let err = ints.to_f32().unwrap_err().to_string();
        assert!(
            err.contains("bf16, f16 or f32") && err.contains("`t` in `f`"),
            "{err}"
        );
        assert_eq!(ints.to_i64().unwrap(), vec![0]);
        let nan = RawTensor::values(&[3], vec![1.0, f32::NAN, 2.0], "`n`");
        let err = nan.to_f32().unwrap_err().to_string();
        assert!(
            err.contains("NaN at element 1") && err.contains("`n`"),
            "{err}"
        );
    }
}
