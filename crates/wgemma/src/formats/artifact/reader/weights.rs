//! The weights of one model of an artifact, handed to the loaders as stored.

use super::{Artifact, Which, OP};
use crate::error::{Error, Result};
use crate::formats::artifact::manifest::TOKENIZER_TENSOR;
use crate::formats::artifact::plan::{ggml_suffix, Q4_PACKED, Q4_SCALES};
use crate::model::weights::WeightFormat;
use crate::weights::layout::MatrixLayout;
use crate::weights::raw::{RawData, RawDtype, RawTensor};
use crate::weights::source::WeightSource;
use crate::weights::upload::StreamOptions;
use safetensors::Dtype;
use std::cell::RefCell;
use std::collections::HashSet;
use std::ops::Range;

/// The weights of one model of an artifact, handed to the loaders as stored (no
/// conversion): matrices borrow the artifact's bytes when they are aligned for it.
pub struct ArtifactWeights<'s, 'a> {
    pub(super) artifact: &'s Artifact<'a>,
    pub(super) which: Which,
    pub(super) verify: bool,
    pub(super) read: RefCell<HashSet<String>>,
    /// Byte ranges read since the last [`ArtifactWeights::take_read_ranges`].
    pub(super) done: RefCell<Vec<Range<usize>>>,
}

impl<'a> ArtifactWeights<'_, 'a> {
    fn full(&self, name: &str) -> String {
        format!("{}{name}", self.which.prefix())
    }

    /// A stored tensor, checked for dtype and shape, verified when asked.
    fn tensor(&self, full: &str, dtype: Dtype, shape: &[usize]) -> Result<&'a [u8]> {
        let info = self.artifact.tensors.info(full).ok_or_else(|| {
            Error::invalid(
                OP,
                format!("tensor `{full}`"),
                format!("{dtype:?} {shape:?}"),
                "missing",
            )
        })?;
        if info.dtype != dtype || info.shape != shape {
            return Err(Error::invalid(
                OP,
                format!("tensor `{full}` as the loader asks for it"),
                format!("{dtype:?} {shape:?}"),
                format!("{:?} {:?}", info.dtype, info.shape),
            ));
        }
        if self.verify {
            self.artifact.verify_tensor(full)?;
        }
        let (data, range) = self.artifact.data(full)?;
        self.read.borrow_mut().insert(full.to_string());
        self.done.borrow_mut().push(range);
        Ok(data)
    }

    /// The byte ranges of the file read since the last call: the loader is done with them
    /// once it reports progress, so the CLI can drop their pages from its memory map.
    pub fn take_read_ranges(&self) -> Vec<Range<usize>> {
        std::mem::take(&mut *self.done.borrow_mut())
    }

    /// Errors unless the loader read every weight tensor of this model (so every one was
    /// verified): a tensor the plan lists but the loader skips is a bug in this build.
    pub fn check_all_read(&self) -> Result<()> {
        let read = self.read.borrow();
        let prefix = self.which.prefix();
        let tokenizer = self.full(TOKENIZER_TENSOR);
        let mut names: Vec<String> = self.artifact.tensors.tensors().into_keys().collect();
        names.sort();
        let unread = names
            .into_iter()
            .filter(|n| n.starts_with(prefix) && *n != tokenizer)
            .find(|n| !read.contains(n.as_str()));
        match unread {
            Some(n) => Err(Error::invalid(
                OP,
                format!("tensor `{n}`"),
                format!("read by the {} loader", self.which.name()),
                "never asked for",
            )),
            None => Ok(()),
        }
    }

    fn has_weight(&self, name: &str) -> bool {
        let full = self.full(name);
        let t = &self.artifact.tensors;
        t.info(&full).is_some()
            || t.info(&format!("{full}{Q4_PACKED}")).is_some()
            || self.artifact.ggml_type(&full).is_some()
    }

    /// A stored weight of `expected_shape` as the artifact holds it: in its GPU layout
    /// (matrices as two Q4 word tensors, or f16 / f32 rows; vectors f32), or u32
    /// (`token_ordering`). A matrix may be stored flat (`[E * N, K]` for `[E, N, K]`
    /// experts).
    fn stored(&self, name: &str, expected_shape: &[usize]) -> Result<RawTensor<'a>> {
        let full = self.full(name);
        let k = expected_shape.last().copied().unwrap_or(1);
        let n = expected_shape.iter().product::<usize>() / k.max(1);
        let tensors = &self.artifact.tensors;
        if let Some(ty) = self.artifact.ggml_type(&full) {
            let stored = format!("{full}{}", ggml_suffix(ty));
            let data = self.tensor(&stored, Dtype::U8, &[n, ty.bytes_of(k)])?;
            return Ok(RawTensor::bytes(
                RawDtype::Ggml(ty),
                &[n, k],
                data,
                format!("`{stored}`"),
            ));
        }
        if tensors.info(&format!("{full}{Q4_PACKED}")).is_some() {
            let WeightFormat::Q4 { group } = self.artifact.format() else {
                return Err(Error::invalid(
                    OP,
                    format!("tensor `{full}{Q4_PACKED}`"),
                    format!(
                        "none in a {} artifact",
                        self.artifact.manifest.quant.describe()
                    ),
                    "present",
                ));
            };
            let (p, s) = MatrixLayout::q4_words(n, k, group);
            let packed = self.tensor(
                &format!("{full}{Q4_PACKED}"),
                Dtype::U32,
                &[n, p / n.max(1)],
            )?;
            let scales = self.tensor(&format!("{full}{Q4_SCALES}"), Dtype::U32, &[s])?;
            return Ok(RawTensor {
                dtype: RawDtype::Prepared(MatrixLayout::Q4 { group }),
                shape: vec![n, k],
                data: RawData::Q4Words { packed, scales },
                what: format!("`{full}`"),
                release: None,
            });
        }
        let info = tensors.info(&full).ok_or_else(|| {
            Error::invalid(
                OP,
                format!("tensor `{full}`"),
                format!("a stored weight of shape {expected_shape:?}"),
                "missing",
            )
        })?;
        let dtype = match info.dtype {
            Dtype::F32 => RawDtype::Prepared(MatrixLayout::F32),
            Dtype::F16 => RawDtype::Prepared(MatrixLayout::F16),
            Dtype::U32 => RawDtype::U32,
            other => {
                return Err(Error::invalid(
                    OP,
                    format!("dtype of tensor `{full}`"),
                    "F32, F16 or U32",
                    format!("{other:?}"),
                ))
            }
        };
        let flat = [n, k];
        let shape: &[usize] = if info.shape == flat {
            &flat
        } else {
            expected_shape
        };
        let data = self.tensor(&full, info.dtype, shape)?;
        Ok(RawTensor::bytes(
            dtype,
            expected_shape,
            data,
            format!("`{full}`"),
        ))
    }
}

/// The stored weights of one model, its matrices in their GPU layout under the names the
/// loader uploads them as: the uploader places them as stored (borrowed from the
/// artifact's bytes where aligned), with no conversion.
impl WeightSource for ArtifactWeights<'_, '_> {
    fn tensor(&self, name: &str, expected_shape: &[usize]) -> Result<RawTensor<'_>> {
        self.stored(name, expected_shape)
    }

    fn has(&self, name: &str) -> bool {
        self.has_weight(name)
    }

    fn stores_stacked(&self) -> bool {
        true
    }

    /// Matrices stored in ggml blocks run as stored, as their GGUF file's load does.
    fn stream_options(&self) -> StreamOptions {
        StreamOptions {
            native_ggml: true,
            ..StreamOptions::default()
        }
    }
}
