//! A GGUF file as a [`WeightSource`]: HF tensor names mapped to llama.cpp's, each tensor
//! handed over as stored (its ggml type). The uploader ([`crate::weights::upload`]) and
//! [`crate::weights::raw`] convert them, a block of rows at a time; ggml's block formats are
//! [`crate::weights::ggml`] (re-exported here as `quant`).
//!
//! With [`StreamOptions::native_ggml`] (the session loader sets it when no `--dtype` is
//! given) the ggml types [`crate::ops::ggml_linear`] runs (Q8_0, Q4_1, Q5_0, Q5_1, Q4_K,
//! Q5_K, Q6_K) are uploaded as stored and run at their own precision; every other load
//! converts, by stored type and the layout the load asks for:
//! - Q4_0 -> Q4 group 32: the same format (32 weights, one f16 scale, `(q - 8) * d`), so
//!   the blocks are rewritten into wgemma's packing with no value changed (error 0).
//! - F32 / F16 / BF16 -> any layout: the stored rows go through the same path as a
//!   Hugging Face checkpoint's (the GPU quantiser on a hardware adapter).
//! - the other ggml types (and Q4_0 into another group or a dense layout) -> dequantised to
//!   f32 exactly as ggml does, then prepared like f32 weights: for Q4 a second quantisation
//!   onto wgemma's symmetric group-32 grid (absmax / 7), whose error adds to the file's own
//!   (measured in docs/models.md).
//!
//! Each conversion a load makes is recorded ([`GgufWeights::conversion_line`]) for the one
//! line the loader prints.

use super::model::{assistant_gguf_name, gguf_name};
use super::quant::GgmlType;
use super::reader::{GgufFile, TensorInfo};
use crate::error::{Error, Result};
use crate::ops::ggml_linear::is_native;
use crate::weights::conversion::{summarise, Conversion};
use crate::weights::raw::{RawDtype, RawTensor};
use crate::weights::source::WeightSource;
use crate::weights::upload::StreamOptions;
use std::cell::RefCell;
use std::ops::Range;

const OP: &str = "gguf";

/// Called with byte ranges of the file a load is done with (the CLI drops those pages).
pub type ReleaseFn<'a> = dyn Fn(Range<usize>) + 'a;

/// The target model's weights in a parsed GGUF file.
pub struct GgufWeights<'f, 'a> {
    pub file: &'f GgufFile<'a>,
    release: Option<&'f ReleaseFn<'f>>,
    stream: StreamOptions,
    conversions: RefCell<Vec<Conversion>>,
}

impl<'f, 'a> GgufWeights<'f, 'a> {
    pub fn new(file: &'f GgufFile<'a>) -> Self {
        GgufWeights {
            file,
            release: None,
            stream: StreamOptions::default(),
            conversions: RefCell::new(Vec::new()),
        }
    }

    /// What the loads from this file converted so far (one line: [`summarise`]).
    pub fn conversions(&self) -> Vec<Conversion> {
        self.conversions.borrow().clone()
    }

    /// The one line saying what the loads from this file converted, if anything.
    pub fn conversion_line(&self) -> Option<String> {
        summarise(&self.conversions.borrow())
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
    fn tensor_info(&self, hf: &str, expected_shape: &[usize]) -> Result<&'f TensorInfo<'a>> {
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
        Ok(t)
    }

    /// `t` as a stored tensor of `expected_shape`, each block's bytes released once the
    /// loader is done with them.
    fn raw(&self, t: &'f TensorInfo<'a>, expected_shape: &[usize]) -> RawTensor<'f> {
        let raw = stored(t, expected_shape);
        match self.release {
            Some(release) => {
                let start = t.file_offset;
                raw.with_release(move |r: Range<usize>| release(start + r.start..start + r.end))
            }
            None => raw,
        }
    }
}

/// `t` as a stored tensor of `expected_shape` (its elements as the file stores them).
fn stored<'t>(t: &'t TensorInfo<'_>, expected_shape: &[usize]) -> RawTensor<'t> {
    let dtype = match t.ty {
        GgmlType::F32 => RawDtype::F32,
        GgmlType::F16 => RawDtype::F16,
        GgmlType::BF16 => RawDtype::BF16,
        GgmlType::I32 => RawDtype::I32,
        GgmlType::I64 => RawDtype::I64,
        block => RawDtype::Ggml(block),
    };
    RawTensor::bytes(dtype, expected_shape, t.data, format!("`{}`", t.name))
}

/// How a matrix stored as `ty` loads, in words for `wgemma inspect FILE.gguf`: with no
/// `--dtype` (the file's own types), and with `--dtype q4` / `f16` / `f32`.
pub fn load_route(ty: GgmlType) -> &'static str {
    match ty {
        GgmlType::Q4_0 => {
            "as stored: Q4 group 32 (the same blocks, repacked); f16/f32: dequantised"
        }
        GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => {
            "as a checkpoint's float weights: quantised to Q4 group 32 unless --dtype f16/f32"
        }
        GgmlType::Q8_0
        | GgmlType::Q4_1
        | GgmlType::Q5_0
        | GgmlType::Q5_1
        | GgmlType::Q4_K
        | GgmlType::Q5_K
        | GgmlType::Q6_K => {
            "linear layers run as stored; --dtype q4 requantises, f16/f32 dequantise"
        }
        GgmlType::I32 | GgmlType::I64 => "integers (the assistant's token ordering)",
    }
}

/// What the tensor `name` (GGUF name, `dims` as ggml orders them) runs as when the file is
/// loaded with no `--dtype`, in words for `wgemma inspect FILE.gguf`.
pub fn runs_as(name: &str, ty: GgmlType, dims: &[usize]) -> String {
    let as_stored = match ty {
        t if is_native(t) => format!("{t:?} as stored"),
        GgmlType::Q4_0 => "Q4 group 32 (the same blocks)".to_string(),
        GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => {
            "Q4 group 32 (quantised on load)".to_string()
        }
        other => format!("{other:?}"),
    };
    if dims.iter().filter(|&&d| d > 1).count() < 2 || !ty.is_float() {
        return match ty {
            GgmlType::I32 | GgmlType::I64 => "integers".to_string(),
            _ => "f32".to_string(),
        };
    }
    match name {
        "token_embd.weight" => format!("embedding table and lm_head, {as_stored}"),
        "per_layer_token_embd.weight" => format!("embedding table, {as_stored}"),
        n if n.contains("_exps") => "experts, Q4 group 32".to_string(),
        _ => as_stored,
    }
}

impl WeightSource for GgufWeights<'_, '_> {
    fn tensor(&self, name: &str, expected_shape: &[usize]) -> Result<RawTensor<'_>> {
        Ok(self.raw(self.tensor_info(name, expected_shape)?, expected_shape))
    }

    fn has(&self, name: &str) -> bool {
        gguf_name(name).is_some_and(|g| self.file.tensor(&g).is_some())
    }

    fn stream_options(&self) -> StreamOptions {
        self.stream
    }

    fn converted(&self, conversion: Conversion) {
        self.conversions.borrow_mut().push(conversion);
    }
}

/// A `gemma4-assistant` GGUF file as the assistant's weight source (full HF names).
pub struct GgufAssistant<'f, 'a> {
    pub file: &'f GgufFile<'a>,
}

impl<'a> GgufAssistant<'_, 'a> {
    fn tensor_info(&self, hf: &str, expected_shape: &[usize]) -> Result<&TensorInfo<'a>> {
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

/// The assistant's stored tensors by full HF name (its projections, layers, head and
/// `token_ordering`).
impl WeightSource for GgufAssistant<'_, '_> {
    fn tensor(&self, name: &str, expected_shape: &[usize]) -> Result<RawTensor<'_>> {
        Ok(stored(
            self.tensor_info(name, expected_shape)?,
            expected_shape,
        ))
    }

    fn has(&self, name: &str) -> bool {
        assistant_gguf_name(name).is_some_and(|g| self.file.tensor(&g).is_some())
    }
}
