//! The one seam between a model (the target or its assistant) and where its weights come
//! from: a Hugging Face checkpoint ([`crate::formats::hf::Checkpoint`]), a model artifact
//! ([`crate::formats::artifact::ArtifactWeights`]), a llama.cpp GGUF file
//! ([`crate::formats::gguf::GgufWeights`], [`crate::formats::gguf::GgufAssistant`]) or
//! synthetic weights ([`crate::formats::synthetic`]). The target's names are the decoder's
//! HF names without the `model.` prefix, the assistant's its full HF names; [`Scope`]
//! builds them the way candle's `VarBuilder::pp` does, so the loader reads like the module
//! tree. A source only hands over stored tensors; every conversion is the seam's.
//!
//! Layering (no module cycle): `layout` <- `linear` (GPU weights from prepared matrices)
//! <- `raw` (stored tensors and their conversions) <- `upload` (the uploader) <- `source`
//! (this trait) <- the formats, and the model's weights on top.

use super::conversion::{matrix_conversion, Conversion};
use super::raw::{expert_layout, RawTensor};
use super::upload::{upload_matrix, StreamOptions, Uploaded, Uploader};
use crate::error::Result;
use crate::ops::moe::{ExpertFormat, ExpertHost};
use crate::weights::layout::{MatrixSpec, MatrixUse};
use safetensors::Dtype;

/// Where a model's weights come from (the target's and the assistant's alike): a
/// checkpoint, a GGUF file, a model artifact, or synthetic weights. A source hands over
/// its tensors as stored ([`RawTensor`]: dtype, shape, bytes); what they become on the host
/// or the GPU is decided by [`super::raw`] and the one uploader ([`upload_matrix`]).
pub trait WeightSource {
    /// The stored tensor `name`, checked against the expected shape (row-major; a source
    /// storing a prepared matrix, [`WeightSource::stores_stacked`], checks its rows and
    /// columns against the words of its layout).
    fn tensor(&self, name: &str, expected_shape: &[usize]) -> Result<RawTensor<'_>>;
    fn has(&self, name: &str) -> bool;

    /// Whether a matrix stacked from row blocks (`gate_proj` over `up_proj`) is stored
    /// as the loader uploads it, under its own name (an artifact), rather than as its
    /// row blocks (a checkpoint, a GGUF file).
    fn stores_stacked(&self) -> bool {
        false
    }

    /// How this source's matrices stream to the GPU (the caller sets where Q4 quantises
    /// on the source it opens; the uploader reads it here).
    fn stream_options(&self) -> StreamOptions {
        StreamOptions::default()
    }

    /// Told of each tensor the load converts ([`Conversion`]); a source that reports them
    /// (a GGUF file) keeps them for the loader's one line.
    fn converted(&self, _conversion: Conversion) {}
}

/// A [`WeightSource`] seen under a name prefix: `src.pp("layers").pp(3).f32("input_layernorm.weight", ..)`
/// reads `layers.3.input_layernorm.weight`.
#[derive(Clone)]
pub struct Scope<'s> {
    source: &'s dyn WeightSource,
    prefix: String,
}

impl<'s> Scope<'s> {
    pub fn root(source: &'s dyn WeightSource) -> Self {
        Scope {
            source,
            prefix: String::new(),
        }
    }

    /// The scope one level down (`pp` as in candle: "push prefix").
    pub fn pp(&self, name: impl std::fmt::Display) -> Scope<'s> {
        Scope {
            source: self.source,
            prefix: format!("{}{name}.", self.prefix),
        }
    }

    /// The full name of `name` in this scope.
    pub fn name(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }

    pub fn source(&self) -> &'s dyn WeightSource {
        self.source
    }

    /// The stored tensor `name` of this scope ([`WeightSource::tensor`]).
    pub fn tensor(&self, name: &str, expected_shape: &[usize]) -> Result<RawTensor<'s>> {
        self.source.tensor(&self.name(name), expected_shape)
    }

    /// The tensor as f32, checked finite.
    pub fn f32(&self, name: &str, expected_shape: &[usize]) -> Result<Vec<f32>> {
        self.tensor(name, expected_shape)?.to_f32()
    }

    /// An integer tensor as i64 (the centroid head's `token_ordering`).
    pub fn i64(&self, name: &str, expected_shape: &[usize]) -> Result<Vec<i64>> {
        self.tensor(name, expected_shape)?.to_i64()
    }

    pub fn has(&self, name: &str) -> bool {
        self.source.has(&self.name(name))
    }

    /// The stored tensors of the `[n, k]` matrix uploaded as `name` from the row blocks
    /// `parts` (names in this scope): the parts, or the stacked matrix where the source
    /// stores it so ([`WeightSource::stores_stacked`]).
    pub fn matrix_tensors(
        &self,
        name: &str,
        parts: &[&str],
        n: usize,
        k: usize,
    ) -> Result<Vec<RawTensor<'s>>> {
        if self.source.stores_stacked() {
            return Ok(vec![self.tensor(name, &[n, k])?]);
        }
        let rows = n / parts.len().max(1);
        parts.iter().map(|p| self.tensor(p, &[rows, k])).collect()
    }

    /// Uploads the matrix `name` stacked from `parts` as `spec` says ([`upload_matrix`]).
    pub fn upload_matrix(
        &self,
        up: &mut Uploader<'_>,
        name: &str,
        parts: &[&str],
        spec: MatrixSpec,
    ) -> Result<Uploaded> {
        let raw = self.matrix_tensors(name, parts, spec.n, spec.k)?;
        let options = self.source.stream_options();
        let full = self.name(name);
        let uploaded = upload_matrix(up, options, &full, &raw, spec)?;
        if let Some(c) = matrix_conversion(&full, &raw, spec, options.native_ggml) {
            self.source.converted(c);
        }
        Ok(uploaded)
    }

    /// MoE experts `[experts, n, k]` in `format` ([`RawTensor::experts`]).
    pub fn experts(
        &self,
        name: &str,
        experts: usize,
        n: usize,
        k: usize,
        format: ExpertFormat,
    ) -> Result<ExpertHost> {
        let raw = self.tensor(name, &[experts, n, k])?;
        let host = raw.experts(experts, n, k, format)?;
        let spec = MatrixSpec {
            n: experts * n,
            k,
            layout: expert_layout(format),
            use_: MatrixUse::Experts { experts },
        };
        let raw = std::slice::from_ref(&raw);
        if let Some(c) = matrix_conversion(&self.name(name), raw, spec, false) {
            self.source.converted(c);
        }
        Ok(host)
    }
}

/// `sqrt(hidden)` as HF's scaled embedding applies it: rounded to the weight dtype first
/// (for bf16 weights, sqrt(1536) = 39.19... becomes 39.25).
pub fn embed_scale(hidden: usize, dtype: Dtype) -> f32 {
    let s = (hidden as f64).sqrt() as f32;
    match dtype {
        Dtype::BF16 => half::bf16::from_f32(s).to_f32(),
        Dtype::F16 => half::f16::from_f32(s).to_f32(),
        _ => s,
    }
}
