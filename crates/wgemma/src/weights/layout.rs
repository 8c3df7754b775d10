//! Weights in the layout the GPU reads, on the host: the step between a checkpoint's f32
//! values and a GPU upload. A Hugging Face checkpoint is prepared while it loads
//! (quantised to Q4, rounded to f16); an artifact stores the prepared form and hands it
//! over as it is, borrowed from its bytes, so both paths upload bit-identical buffers.

use crate::error::{Error, Result};
use crate::ops::linear::quantize_q4;
use crate::ops::moe::ExpertFormat;
use half::f16;
use std::borrow::Cow;

/// What the loader does with a prepared matrix (the census reads it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MatrixUse {
    /// A linear layer's weight.
    Linear,
    /// An embedding table (rows gathered by token id).
    Table,
    /// The tied embedding: a table and the lm_head.
    TableAndLinear,
    /// Dense rows gathered by the centroid head.
    Rows,
    /// MoE experts `[E * N, K]` (always in the format's own layout: no f16 fallback).
    Experts { experts: usize },
}

/// The matrix a loader asks for: `[n, k]`, stored in `layout`, uploaded for `use_`. The four
/// travel together from a weight's declaration through the source to the uploader, so they
/// go as one value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MatrixSpec {
    pub n: usize,
    pub k: usize,
    pub layout: MatrixLayout,
    pub use_: MatrixUse,
}

impl MatrixSpec {
    /// `[n, k]` for `use_`, in `format`'s layout for rows of `k` ([`MatrixLayout::of`]).
    pub fn of(format: WeightFormat, n: usize, k: usize, use_: MatrixUse) -> MatrixSpec {
        MatrixSpec {
            n,
            k,
            layout: MatrixLayout::of(format, k),
            use_,
        }
    }
}

/// How weights are stored on the GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WeightFormat {
    F32,
    F16,
    /// The project's Q4 with this group size (32, 64 or 128).
    Q4 {
        group: usize,
    },
}

impl WeightFormat {
    /// Parses `f32`, `f16`, `q4` (group 32), `q4g64`, `q4g128`.
    pub fn parse(s: &str) -> Result<WeightFormat> {
        match s {
            "f32" => Ok(WeightFormat::F32),
            "f16" => Ok(WeightFormat::F16),
            "q4" | "q4g32" => Ok(WeightFormat::Q4 { group: 32 }),
            "q4g64" => Ok(WeightFormat::Q4 { group: 64 }),
            "q4g128" => Ok(WeightFormat::Q4 { group: 128 }),
            other => Err(Error::invalid(
                "weights",
                "--dtype",
                "f32, f16, q4, q4g64 or q4g128",
                other,
            )),
        }
    }

    pub fn expert_format(self) -> ExpertFormat {
        match self {
            WeightFormat::F32 => ExpertFormat::F32,
            WeightFormat::F16 => ExpertFormat::F16,
            WeightFormat::Q4 { group } => ExpertFormat::Q4 { group },
        }
    }
}

/// How a `[n, k]` matrix is stored under a [`WeightFormat`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MatrixLayout {
    F32,
    F16,
    /// Packed u32 words `[n, k/8]` and f16 scales two per u32 word
    /// ([`crate::ops::linear::quant`] documents the format).
    Q4 {
        group: usize,
    },
}

impl MatrixLayout {
    /// The layout of a matrix with `k` columns: Q4 needs K to be a multiple of the group
    /// (and of 8); a matrix that is not falls back to f16. Only tiny test models have such
    /// shapes. Linear weights and embedding tables follow the same rule, which is why the
    /// tied lm_head and the embedding table can share one prepared matrix.
    pub fn of(format: WeightFormat, k: usize) -> MatrixLayout {
        match format {
            WeightFormat::F32 => MatrixLayout::F32,
            WeightFormat::Q4 { group } if group > 0 && k % group == 0 && k % 8 == 0 => {
                MatrixLayout::Q4 { group }
            }
            _ => MatrixLayout::F16,
        }
    }

    /// Q4 words of `[n, k]`: `n * k / 8` packed, `ceil(n * k/group / 2)` of scales.
    pub fn q4_words(n: usize, k: usize, group: usize) -> (usize, usize) {
        (n * k / 8, (n * (k / group)).div_ceil(2))
    }
}

/// The element data of a [`Matrix`], borrowed (an artifact's bytes) or owned (prepared
/// from f32 while loading).
#[derive(Debug, Clone)]
pub enum MatrixData<'a> {
    F32(Cow<'a, [f32]>),
    F16(Cow<'a, [f16]>),
    Q4 {
        group: usize,
        packed: Cow<'a, [u32]>,
        scales: Cow<'a, [u32]>,
    },
}

/// A row-major `[n, k]` matrix in its GPU layout.
#[derive(Debug, Clone)]
pub struct Matrix<'a> {
    pub n: usize,
    pub k: usize,
    pub data: MatrixData<'a>,
}

impl Matrix<'_> {
    /// Prepares f32 values for `layout` (f32: kept; f16: rounded to nearest even; Q4:
    /// [`quantize_q4`]).
    pub fn prepare(
        w: Vec<f32>,
        n: usize,
        k: usize,
        layout: MatrixLayout,
    ) -> Result<Matrix<'static>> {
        if w.len() != n * k {
            return Err(Error::invalid(
                "prepared",
                format!("elements of a [{n}, {k}] matrix"),
                n * k,
                w.len(),
            ));
        }
        let data = match layout {
            MatrixLayout::F32 => MatrixData::F32(Cow::Owned(w)),
            MatrixLayout::F16 => {
                MatrixData::F16(Cow::Owned(w.iter().map(|&v| f16::from_f32(v)).collect()))
            }
            MatrixLayout::Q4 { group } => {
                let q = quantize_q4(&w, n, k, group)?;
                MatrixData::Q4 {
                    group,
                    packed: Cow::Owned(q.packed),
                    scales: Cow::Owned(q.scales),
                }
            }
        };
        Ok(Matrix { n, k, data })
    }

    pub fn layout(&self) -> MatrixLayout {
        match &self.data {
            MatrixData::F32(_) => MatrixLayout::F32,
            MatrixData::F16(_) => MatrixLayout::F16,
            MatrixData::Q4 { group, .. } => MatrixLayout::Q4 { group: *group },
        }
    }

    /// Checks that the data's lengths match `[n, k]` in its layout.
    pub fn validate(&self, what: &str) -> Result<()> {
        let (n, k) = (self.n, self.k);
        let bad = |part: &str, expected: usize, found: usize| {
            Err(Error::invalid(
                "prepared",
                format!("{part} of `{what}` [{n}, {k}]"),
                expected,
                found,
            ))
        };
        match &self.data {
            MatrixData::F32(v) if v.len() != n * k => bad("f32 elements", n * k, v.len()),
            MatrixData::F16(v) if v.len() != n * k => bad("f16 elements", n * k, v.len()),
            MatrixData::Q4 {
                group,
                packed,
                scales,
            } => {
                if *group == 0 || k % group != 0 || k % 8 != 0 {
                    return Err(Error::invalid(
                        "prepared",
                        format!("Q4 group of `{what}` (K = {k})"),
                        "a divisor of K, K % 8 == 0",
                        group,
                    ));
                }
                let (p, s) = MatrixLayout::q4_words(n, k, *group);
                if packed.len() != p {
                    return bad("packed words", p, packed.len());
                }
                if scales.len() != s {
                    return bad("scale words", s, scales.len());
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_falls_back_to_f16_when_k_is_not_a_group_multiple() {
        let q4 = WeightFormat::Q4 { group: 32 };
        assert_eq!(MatrixLayout::of(q4, 64), MatrixLayout::Q4 { group: 32 });
        assert_eq!(MatrixLayout::of(q4, 48), MatrixLayout::F16);
        assert_eq!(MatrixLayout::of(WeightFormat::F16, 64), MatrixLayout::F16);
        assert_eq!(MatrixLayout::of(WeightFormat::F32, 48), MatrixLayout::F32);
    }

    #[test]
    fn prepared_q4_matches_quantize_and_validates() {
        let w: Vec<f32> = (0..4 * 32).map(|i| (i as f32 * 0.37).sin()).collect();
        let m = Matrix::prepare(w.clone(), 4, 32, MatrixLayout::Q4 { group: 32 }).unwrap();
        let q = quantize_q4(&w, 4, 32, 32).unwrap();
        match &m.data {
            MatrixData::Q4 { packed, scales, .. } => {
                assert_eq!(&packed[..], &q.packed[..]);
                assert_eq!(&scales[..], &q.scales[..]);
            }
            other => panic!("expected Q4, got {other:?}"),
        }
        m.validate("w").unwrap();
        let short = Matrix {
            n: 4,
            k: 32,
            data: MatrixData::F32(Cow::Owned(vec![0.0; 5])),
        };
        let err = short.validate("w").unwrap_err().to_string();
        assert!(err.contains("128") && err.contains('5'), "{err}");
    }
}
