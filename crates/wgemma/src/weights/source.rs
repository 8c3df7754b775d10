//! The one seam between the model and where its weights come from: a Hugging Face
//! checkpoint ([`crate::formats::hf::Checkpoint`]), a model artifact
//! ([`crate::formats::artifact::ArtifactWeights`]), a llama.cpp GGUF file
//! ([`crate::formats::gguf::GgufWeights`]) or synthetic weights ([`crate::formats::synthetic`]). Names are
//! the decoder's HF names without the `model.` prefix; [`Scope`] builds them the way
//! candle's `VarBuilder::pp` does, so the loader reads like the module tree.
//!
//! Layering (no module cycle): `prepared` (layouts) <- `linear_weight` (GPU weights from
//! prepared matrices) <- `upload` (streaming) <- `source` (this trait) <- the sources, and
//! `weights` (the model's weights) on top.

use super::upload::{Uploaded, Uploader};
use crate::error::Result;
use crate::ops::moe::{ExpertFormat, ExpertHost};
use crate::weights::layout::{prepare_parts, Matrix, MatrixLayout, MatrixSpec};
use safetensors::Dtype;

/// Where the model's weights come from: a checkpoint, synthetic random weights for
/// benchmarks and the demo, or a model artifact. Names are the decoder's HF names without
/// the prefix.
pub trait WeightSource {
    /// The tensor converted to f32, checked against the expected shape.
    fn f32(&self, name: &str, expected_shape: &[usize]) -> Result<Vec<f32>>;
    fn has(&self, name: &str) -> bool;
    /// The embedding's storage dtype (HF rounds sqrt(hidden) to it).
    fn embedding_dtype(&self) -> Result<Dtype>;

    /// The matrix the loader uploads as `name`, `[n, k]`: the equal row blocks `parts`
    /// stacked (`gate_proj` over `up_proj` for `gate_up_proj`), in `layout`. By default
    /// read as f32 and prepared here; an artifact hands over what it stores under `name`.
    fn matrix(
        &self,
        name: &str,
        parts: &[&str],
        n: usize,
        k: usize,
        layout: MatrixLayout,
    ) -> Result<Matrix<'_>> {
        let _ = name;
        prepare_parts(&|part, shape| self.f32(part, shape), parts, n, k, layout)
    }

    /// The matrix of [`WeightSource::matrix`] uploaded as `spec` says. By default prepared
    /// whole on the host and uploaded; a checkpoint streams it a block of rows at a time.
    fn upload_matrix(
        &self,
        up: &mut Uploader<'_>,
        name: &str,
        parts: &[&str],
        spec: MatrixSpec,
    ) -> Result<Uploaded> {
        let m = self.matrix(name, parts, spec.n, spec.k, spec.layout)?;
        Uploaded::from_matrix(up.ctx, name, &m, spec.use_)
    }

    /// Expert weights `[E, N, K]` in `format` (by default read as f32 and converted).
    fn experts(
        &self,
        name: &str,
        experts: usize,
        n: usize,
        k: usize,
        format: ExpertFormat,
    ) -> Result<ExpertHost> {
        ExpertHost::from_f32(&self.f32(name, &[experts, n, k])?, experts, n, k, format)
    }
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

    pub fn f32(&self, name: &str, expected_shape: &[usize]) -> Result<Vec<f32>> {
        self.source.f32(&self.name(name), expected_shape)
    }

    pub fn has(&self, name: &str) -> bool {
        self.source.has(&self.name(name))
    }

    /// [`WeightSource::upload_matrix`] of `parts` (names in this scope) uploaded as `name`.
    pub fn upload_matrix(
        &self,
        up: &mut Uploader<'_>,
        name: &str,
        parts: &[&str],
        spec: MatrixSpec,
    ) -> Result<Uploaded> {
        let parts: Vec<String> = parts.iter().map(|p| self.name(p)).collect();
        let parts: Vec<&str> = parts.iter().map(String::as_str).collect();
        self.source
            .upload_matrix(up, &self.name(name), &parts, spec)
    }

    pub fn experts(
        &self,
        name: &str,
        experts: usize,
        n: usize,
        k: usize,
        format: ExpertFormat,
    ) -> Result<ExpertHost> {
        self.source.experts(&self.name(name), experts, n, k, format)
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
            let mut halves: Vec<u16> = Vec::with_capacity(experts * n * groups + 1);
            for e in 0..experts {
                let q = crate::ops::linear::quantize_q4(&read(e)?, n, k, group)?;
                packed.extend_from_slice(&q.packed);
                halves
                    .extend_from_slice(&bytemuck::cast_slice::<u32, u16>(&q.scales)[..n * groups]);
            }
            if halves.len() % 2 == 1 {
                halves.push(0);
            }
            let scales = halves
                .chunks_exact(2)
                .map(|p| p[0] as u32 | (p[1] as u32) << 16)
                .collect();
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
        }
    }
}
