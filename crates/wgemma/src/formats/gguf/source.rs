//! A GGUF file as a [`WeightSource`]: HF tensor names mapped to llama.cpp's, every
//! supported block format dequantised bit-exactly, matrices streamed to the GPU a block of
//! rows at a time.
//!
//! Conversions, by stored type and the layout the load asks for:
//! - Q4_0 -> Q4 group 32: the same format (32 weights, one f16 scale, `(q - 8) * d`), so
//!   the blocks are rewritten into wgemma's packing with no value changed (error 0).
//! - F32 / F16 / BF16 -> any layout: the stored rows go through the same path as a
//!   Hugging Face checkpoint's (the GPU quantiser on a hardware adapter).
//! - Q8_0, Q4_K, Q6_K (and Q4_0 into another group or a dense layout) -> dequantised to
//!   f32 exactly as ggml does, then prepared like f32 weights: for Q4 that is a second
//!   quantisation onto wgemma's symmetric group-32 grid (absmax / 7), whose error adds to
//!   the file's own; f16 / f32 keep the dequantised values (f16 rounds Q8_0 / K-quant values
//!   to 11 bits). Q4_K is `d * sc * q - dmin * m` per 32 weights: the per-sub-block min has
//!   no place in the symmetric Q4 kernels (an exact map would need an offset per group), and
//!   Q6_K's 6 bits do not fit 4. Measured on the Q4_K_M fixture (`tests/gguf.rs`,
//!   `k_quants_requantised_to_q4_stay_within_a_4_bit_error`), weights' RMS error relative to
//!   their RMS, worst tensor: Q4_K's own 0.072 against the unquantised weights, requantising
//!   its values to Q4 0.099 on top; Q6_K's own 0.018, requantised 0.098, i.e. what a Q4 load
//!   of unquantised weights costs. At f32 the file's logits equal HF's on its dequantised
//!   values (1e-3 of the logit scale, `q4_k_m_gguf_matches_hf_on_its_dequantised_weights`).

use super::model::{assistant_gguf_name, gguf_name};
use super::quant::{dequantize, q4_0_to_wgemma_q4, GgmlType};
use super::reader::{GgufFile, TensorInfo};
use crate::error::{Error, Result};
use crate::model::assistant::AssistantSource;
use crate::ops::moe::{ExpertFormat, ExpertHost};
use crate::ops::quantize::SourceDtype;
use crate::weights::layout::{Matrix, MatrixData, MatrixLayout, MatrixSpec};
use crate::weights::source::{experts_by_expert, WeightSource};
use crate::weights::upload::{
    upload_blocks, upload_raw_parts, RawTensor, StreamOptions, Uploaded, Uploader,
};
use std::borrow::Cow;
use std::ops::Range;

const OP: &str = "gguf";

/// Called with byte ranges of the file a load is done with (the CLI drops those pages).
pub type ReleaseFn<'a> = dyn Fn(Range<usize>) + 'a;

/// The target model's weights in a parsed GGUF file.
pub struct GgufWeights<'f, 'a> {
    pub file: &'f GgufFile<'a>,
    release: Option<&'f ReleaseFn<'f>>,
    stream: StreamOptions,
}

impl<'f, 'a> GgufWeights<'f, 'a> {
    pub fn new(file: &'f GgufFile<'a>) -> Self {
        GgufWeights {
            file,
            release: None,
            stream: StreamOptions::default(),
        }
    }

    /// Calls `release(file byte range)` for each block of rows uploaded.
    pub fn with_release(mut self, release: &'f ReleaseFn<'f>) -> Self {
        self.release = Some(release);
        self
    }

    pub fn with_stream(mut self, stream: StreamOptions) -> Self {
        self.stream = stream;
        self
    }

    /// The GGUF tensor behind an HF name, its shape (HF order) checked.
    fn tensor(&self, hf: &str, expected_shape: &[usize]) -> Result<&'f TensorInfo<'a>> {
        let gguf = gguf_name(hf).ok_or_else(|| {
            Error::invalid(
                OP,
                format!("tensor `{hf}`"),
                "a name llama.cpp's gemma4 layout has",
                "none",
            )
        })?;
        let t = self.file.tensor(&gguf).ok_or_else(|| {
            Error::invalid(
                OP,
                format!("tensor `{gguf}` (HF `{hf}`)"),
                "present in the GGUF file",
                "missing",
            )
        })?;
        // ggml drops trailing 1s nowhere, but a [1] vector may be written as a scalar row.
        let shape = t.hf_shape();
        let same = shape == expected_shape
            || (expected_shape.iter().product::<usize>() == t.elements()
                && expected_shape
                    .iter()
                    .filter(|&&d| d != 1)
                    .eq(shape.iter().filter(|&&d| d != 1)));
        if !same {
            return Err(Error::invalid(
                OP,
                format!("shape of `{gguf}` (HF `{hf}`, row-major)"),
                format!("{expected_shape:?}"),
                format!("{shape:?}"),
            ));
        }
        if !t.ty.is_float() {
            return Err(Error::invalid(
                OP,
                format!("type of `{gguf}`"),
                "a float or block-quantised type",
                format!("{:?}", t.ty),
            ));
        }
        Ok(t)
    }

    fn release(&self, t: &TensorInfo<'_>, bytes: Range<usize>) {
        if let Some(release) = self.release {
            release(t.file_offset + bytes.start..t.file_offset + bytes.end);
        }
    }

    /// Rows `rows` of `[_, k]` tensor `t` prepared in `layout` (see the module docs).
    fn block(
        &self,
        t: &TensorInfo<'_>,
        k: usize,
        rows: Range<usize>,
        layout: MatrixLayout,
    ) -> Result<Matrix<'static>> {
        let row_bytes = t.ty.bytes_of(k);
        let range = rows.start * row_bytes..rows.end * row_bytes;
        let bytes = &t.data[range.clone()];
        let n = rows.len();
        let m = match (t.ty, layout) {
            (GgmlType::Q4_0, MatrixLayout::Q4 { group: 32 }) => {
                let (packed, scales) = q4_0_to_wgemma_q4(bytes, n, k)?;
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
            _ => {
                let mut values = vec![0.0f32; n * k];
                dequantize(t.ty, bytes, &mut values)?;
                check_finite(&t.name, rows.start * k, &values)?;
                Matrix::prepare(values, n, k, layout)?
            }
        };
        self.release(t, range);
        Ok(m)
    }
}

/// How a matrix stored as `ty` reaches each GPU layout (see the module docs), in words for
/// `wgemma inspect FILE.gguf`.
pub fn load_route(ty: GgmlType) -> &'static str {
    match ty {
        GgmlType::Q4_0 => "q4 (group 32): blocks as stored; f16/f32: dequantised exactly",
        GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => {
            "as a checkpoint's float weights (q4: quantised on load)"
        }
        GgmlType::Q8_0 | GgmlType::Q4_K | GgmlType::Q6_K => {
            "dequantised exactly, then q4: requantised (absmax / 7, group 32); f16: rounded"
        }
        GgmlType::I32 | GgmlType::I64 => "integers (the assistant's token ordering)",
    }
}

fn check_finite(name: &str, first: usize, values: &[f32]) -> Result<()> {
    match values.iter().position(|v| !v.is_finite()) {
        None => Ok(()),
        Some(i) => Err(Error::invalid(
            OP,
            format!("weights of `{name}`"),
            "finite numbers",
            format!("{} at element {}", values[i], first + i),
        )),
    }
}

fn source_dtype(ty: GgmlType) -> Option<SourceDtype> {
    match ty {
        GgmlType::F32 => Some(SourceDtype::F32),
        GgmlType::F16 => Some(SourceDtype::F16),
        GgmlType::BF16 => Some(SourceDtype::BF16),
        _ => None,
    }
}

impl WeightSource for GgufWeights<'_, '_> {
    fn f32(&self, name: &str, expected_shape: &[usize]) -> Result<Vec<f32>> {
        let t = self.tensor(name, expected_shape)?;
        let mut values = vec![0.0f32; t.elements()];
        dequantize(t.ty, t.data, &mut values)?;
        check_finite(&t.name, 0, &values)?;
        Ok(values)
    }

    fn has(&self, name: &str) -> bool {
        gguf_name(name).is_some_and(|g| self.file.tensor(&g).is_some())
    }

    fn embedding_dtype(&self) -> Result<safetensors::Dtype> {
        let t = self.tensor_any("embed_tokens.weight")?;
        Ok(match t.ty {
            GgmlType::BF16 => safetensors::Dtype::BF16,
            GgmlType::F16 => safetensors::Dtype::F16,
            _ => safetensors::Dtype::F32,
        })
    }

    fn upload_matrix(
        &self,
        up: &mut Uploader<'_>,
        name: &str,
        parts: &[&str],
        spec: MatrixSpec,
    ) -> Result<Uploaded> {
        let MatrixSpec { n, k, layout, use_ } = spec;
        let rows = n / parts.len().max(1);
        let tensors = parts
            .iter()
            .map(|p| self.tensor(p, &[rows, k]))
            .collect::<Result<Vec<_>>>()?;
        // Plain float rows: the checkpoint path (GPU quantiser on hardware adapters).
        if let Some(dtypes) = tensors
            .iter()
            .map(|t| source_dtype(t.ty))
            .collect::<Option<Vec<_>>>()
        {
            let releases: Vec<_> = tensors
                .iter()
                .map(|t| move |r: Range<usize>| self.release(t, r))
                .collect();
            let raw: Vec<RawTensor<'_>> = tensors
                .iter()
                .zip(&dtypes)
                .zip(&releases)
                .map(|((t, &dtype), release)| RawTensor {
                    data: t.data,
                    dtype,
                    what: &t.name,
                    release,
                })
                .collect();
            return upload_raw_parts(up, self.stream, name, &raw, spec);
        }
        let groups = match layout {
            MatrixLayout::Q4 { group } => k / group,
            _ => k,
        };
        if parts.len() > 1 && (rows * groups) % 2 == 1 {
            // Parts meeting mid word (tiny test shapes only): prepared whole.
            let m = self.matrix(name, parts, n, k, layout)?;
            return Uploaded::from_matrix(up.ctx, name, &m, use_);
        }
        upload_blocks(up, name, spec, parts.len(), &mut |p, r| {
            self.block(tensors[p], k, r, layout)
        })
    }

    /// Expert by expert ([`experts_by_expert`]): ggml stores `[K, N, E]`, so each expert's
    /// blocks are contiguous.
    fn experts(
        &self,
        name: &str,
        experts: usize,
        n: usize,
        k: usize,
        format: ExpertFormat,
    ) -> Result<ExpertHost> {
        let t = self.tensor(name, &[experts, n, k])?;
        let per = t.ty.bytes_of(n * k);
        experts_by_expert(experts, n, k, format, &mut |e| {
            let range = e * per..(e + 1) * per;
            let mut values = vec![0.0f32; n * k];
            dequantize(t.ty, &t.data[range.clone()], &mut values)?;
            check_finite(&t.name, e * n * k, &values)?;
            self.release(t, range);
            Ok(values)
        })
    }
}

impl<'f, 'a> GgufWeights<'f, 'a> {
    /// Rows `rows` (over all leading dimensions) of a tensor, dequantised; `expected_shape`
    /// is the whole tensor's (HF order). What `wgemma convert` reads.
    pub fn f32_rows(
        &self,
        name: &str,
        expected_shape: &[usize],
        rows: Range<usize>,
    ) -> Result<Vec<f32>> {
        let t = self.tensor(name, expected_shape)?;
        dequantize_rows(t, expected_shape, rows)
    }

    /// Rows `rows` of a `[n, k]` matrix prepared in `layout` as a load prepares them (Q4_0
    /// into Q4 group 32 unchanged): what `wgemma convert` writes, so an artifact of a GGUF
    /// file holds the weights a load of the file would.
    pub fn prepared_rows(
        &self,
        name: &str,
        expected_shape: &[usize],
        rows: Range<usize>,
        layout: MatrixLayout,
    ) -> Result<Matrix<'static>> {
        let t = self.tensor(name, expected_shape)?;
        let k = expected_shape.last().copied().unwrap_or(1);
        check_rows(t, expected_shape, &rows)?;
        self.block(t, k, rows, layout)
    }

    fn tensor_any(&self, hf: &str) -> Result<&'f TensorInfo<'a>> {
        let gguf = gguf_name(hf).unwrap_or_default();
        self.file.tensor(&gguf).ok_or_else(|| {
            Error::invalid(
                OP,
                format!("tensor `{gguf}` (HF `{hf}`)"),
                "present in the GGUF file",
                "missing",
            )
        })
    }
}

/// A `gemma4-assistant` GGUF file as the assistant's weight source (full HF names).
pub struct GgufAssistant<'f, 'a> {
    pub file: &'f GgufFile<'a>,
}

impl<'a> GgufAssistant<'_, 'a> {
    fn tensor(&self, hf: &str, expected_shape: &[usize]) -> Result<&TensorInfo<'a>> {
        let gguf = assistant_gguf_name(hf).ok_or_else(|| {
            Error::invalid(
                OP,
                format!("assistant tensor `{hf}`"),
                "a name llama.cpp's gemma4-assistant layout has",
                "none",
            )
        })?;
        let t = self.file.tensor(&gguf).ok_or_else(|| {
            Error::invalid(
                OP,
                format!("tensor `{gguf}` (HF `{hf}`)"),
                "present in the GGUF file",
                "missing",
            )
        })?;
        if t.elements() != expected_shape.iter().product::<usize>()
            || t.dims[0] != expected_shape.last().copied().unwrap_or(1)
        {
            return Err(Error::invalid(
                OP,
                format!("shape of `{gguf}` (HF `{hf}`, row-major)"),
                format!("{expected_shape:?}"),
                format!("{:?}", t.hf_shape()),
            ));
        }
        Ok(t)
    }
}

impl GgufAssistant<'_, '_> {
    /// Rows `rows` of a float tensor (full HF name), dequantised: what `wgemma convert`
    /// reads.
    pub fn f32_rows(
        &self,
        name: &str,
        expected_shape: &[usize],
        rows: Range<usize>,
    ) -> Result<Vec<f32>> {
        let t = self.tensor(name, expected_shape)?;
        dequantize_rows(t, expected_shape, rows)
    }
}

/// Refuses rows past the end of a tensor of `shape` (rows over its leading dimensions).
fn check_rows(t: &TensorInfo<'_>, shape: &[usize], rows: &Range<usize>) -> Result<()> {
    let k = shape.last().copied().unwrap_or(1).max(1);
    let total = shape.iter().product::<usize>() / k;
    if rows.start > rows.end || rows.end > total {
        return Err(Error::invalid(
            OP,
            format!("rows of `{}`", t.name),
            format!("a range within 0..{total}"),
            format!("{rows:?}"),
        ));
    }
    Ok(())
}

/// Rows `rows` of `t` (of HF shape `shape`) dequantised, checked finite.
fn dequantize_rows(t: &TensorInfo<'_>, shape: &[usize], rows: Range<usize>) -> Result<Vec<f32>> {
    if !t.ty.is_float() {
        return Err(Error::invalid(
            OP,
            format!("type of `{}`", t.name),
            "a float or block-quantised type",
            format!("{:?}", t.ty),
        ));
    }
    check_rows(t, shape, &rows)?;
    let k = shape.last().copied().unwrap_or(1);
    let row_bytes = t.ty.bytes_of(k);
    let mut values = vec![0.0f32; rows.len() * k];
    dequantize(
        t.ty,
        &t.data[rows.start * row_bytes..rows.end * row_bytes],
        &mut values,
    )?;
    check_finite(&t.name, rows.start * k, &values)?;
    Ok(values)
}

impl AssistantSource for GgufAssistant<'_, '_> {
    fn f32(&self, name: &str, expected_shape: &[usize]) -> Result<Vec<f32>> {
        let t = self.tensor(name, expected_shape)?;
        if !t.ty.is_float() {
            return Err(Error::invalid(
                OP,
                format!("type of `{}`", t.name),
                "a float or block-quantised type",
                format!("{:?}", t.ty),
            ));
        }
        let values = super::quant::dequantize_to_vec(t.ty, t.data)?;
        check_finite(&t.name, 0, &values)?;
        Ok(values)
    }

    fn i64(&self, name: &str, expected_shape: &[usize]) -> Result<Vec<i64>> {
        let t = self.tensor(name, expected_shape)?;
        Ok(match t.ty {
            GgmlType::I64 => t
                .data
                .chunks_exact(8)
                .map(|b| i64::from_le_bytes(b.try_into().expect("8-byte chunks")))
                .collect(),
            GgmlType::I32 => t
                .data
                .chunks_exact(4)
                .map(|b| i32::from_le_bytes(b.try_into().expect("4-byte chunks")) as i64)
                .collect(),
            other => {
                return Err(Error::invalid(
                    OP,
                    format!("type of `{}`", t.name),
                    "I32 or I64",
                    format!("{other:?}"),
                ))
            }
        })
    }

    fn has(&self, name: &str) -> bool {
        assistant_gguf_name(name).is_some_and(|g| self.file.tensor(&g).is_some())
    }
}
