//! A block's weights, declared once: each block lists its tensors (name in its scope,
//! shape, use) and everything else follows from that list: the load ([`load_group`]), the
//! bytes on the GPU ([`WeightBytes`]) and the artifact plan
//! ([`crate::formats::artifact::plan`]). A format only hands over the raw tensors.

use super::layout::{MatrixSpec, MatrixUse, WeightFormat};
use super::linear::LinearWeight;
use super::source::Scope;
use super::upload::{Uploaded, Uploader};
use crate::error::{Error, Result};
use crate::gpu::Tensor;
use crate::ops::embedding::EmbeddingTable;
use crate::ops::moe::ExpertWeight;
use std::collections::HashMap;

/// What a declared tensor is and how it is loaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TensorKind {
    /// f32 as stored, uploaded as it is and kept on the host too (norm weights, scales).
    F32 { shape: Vec<usize> },
    /// A `[1]` f32 read to the host only, and only where the source holds it
    /// (`layer_scalar`: older checkpoints lack it).
    OptionalScalar,
    /// A `[n, k]` matrix stacked from the row blocks `parts` (names in the same scope), in
    /// the load format's layout.
    Matrix {
        parts: Vec<String>,
        n: usize,
        k: usize,
        use_: MatrixUse,
    },
    /// MoE experts `[experts, n, k]` in the format's expert form.
    Experts { experts: usize, n: usize, k: usize },
}

/// One tensor a block loads: its HF name relative to the block's scope, and its kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorDecl {
    pub name: String,
    pub kind: TensorKind,
}

impl TensorDecl {
    pub fn vector(name: &str, len: usize) -> Self {
        TensorDecl {
            name: name.to_string(),
            kind: TensorKind::F32 { shape: vec![len] },
        }
    }

    pub fn optional_scalar(name: &str) -> Self {
        TensorDecl {
            name: name.to_string(),
            kind: TensorKind::OptionalScalar,
        }
    }

    /// A linear layer's weight `[n, k]`.
    pub fn linear(name: &str, n: usize, k: usize) -> Self {
        Self::matrix(name, n, k, MatrixUse::Linear)
    }

    /// A matrix `[n, k]` uploaded for `use_`, stored under its own name.
    pub fn matrix(name: &str, n: usize, k: usize, use_: MatrixUse) -> Self {
        Self::stacked(name, &[name], n, k, use_)
    }

    /// A matrix `[n, k]` stacked from the equal row blocks `parts` (`gate_proj` over
    /// `up_proj` for `gate_up_proj`), uploaded for `use_` as `name`.
    pub fn stacked(name: &str, parts: &[&str], n: usize, k: usize, use_: MatrixUse) -> Self {
        TensorDecl {
            name: name.to_string(),
            kind: TensorKind::Matrix {
                parts: parts.iter().map(|p| p.to_string()).collect(),
                n,
                k,
                use_,
            },
        }
    }

    pub fn experts(name: &str, experts: usize, n: usize, k: usize) -> Self {
        TensorDecl {
            name: name.to_string(),
            kind: TensorKind::Experts { experts, n, k },
        }
    }

    /// The declaration as seen from a parent scope: `prefix` (e.g. `layers.3.`) put before
    /// its name and its parts' names.
    pub fn under(mut self, prefix: &str) -> Self {
        self.name = format!("{prefix}{}", self.name);
        if let TensorKind::Matrix { parts, .. } = &mut self.kind {
            for p in parts {
                *p = format!("{prefix}{p}");
            }
        }
        self
    }
}

/// Bytes of weights on the GPU: all of them, and those of embedding tables (of which a
/// forward reads only its tokens' rows).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WeightBytes {
    pub total: u64,
    pub tables: u64,
}

impl std::ops::AddAssign for WeightBytes {
    fn add_assign(&mut self, other: WeightBytes) {
        self.total += other.total;
        self.tables += other.tables;
    }
}

/// Bytes of an embedding table's chunks (rows and scales).
pub fn table_bytes(t: &EmbeddingTable) -> u64 {
    t.chunks()
        .iter()
        .map(|c| c.data.byte_size() + c.scales.as_ref().map_or(0, |s| s.byte_size()))
        .sum()
}

/// A load in progress: the uploader, the format, and the bytes of the groups finished.
pub struct WeightLoader<'u, 'c> {
    pub up: &'u mut Uploader<'c>,
    pub format: WeightFormat,
    pub bytes: WeightBytes,
}

impl<'u, 'c> WeightLoader<'u, 'c> {
    pub fn new(up: &'u mut Uploader<'c>, format: WeightFormat) -> Self {
        WeightLoader {
            up,
            format,
            bytes: WeightBytes::default(),
        }
    }

    /// Loads `decls` from `src` ([`load_group`]).
    pub fn load(&mut self, src: &Scope<'_>, decls: &[TensorDecl]) -> Result<LoadedGroup> {
        load_group(self.up, src, decls, self.format)
    }

    /// Counts a group's bytes once its block took every tensor ([`LoadedGroup::finish`]).
    pub fn finish(&mut self, group: LoadedGroup) -> Result<()> {
        self.bytes += group.finish()?;
        Ok(())
    }
}

enum Loaded {
    F32 { tensor: Tensor, host: Vec<f32> },
    Scalar(f32),
    Matrix(Uploaded),
    Experts(ExpertWeight),
}

/// The tensors of one block's declarations, loaded; the block takes each by the name it
/// declared, and [`LoadedGroup::finish`] refuses a declared tensor it did not take.
pub struct LoadedGroup {
    scope: String,
    tensors: HashMap<String, Loaded>,
    bytes: WeightBytes,
}

/// Loads every tensor of `decls` from `src` in declaration order, matrices in `format`.
pub fn load_group(
    up: &mut Uploader<'_>,
    src: &Scope<'_>,
    decls: &[TensorDecl],
    format: WeightFormat,
) -> Result<LoadedGroup> {
    let ctx = up.ctx;
    let mut group = LoadedGroup {
        scope: src.name(""),
        tensors: HashMap::new(),
        bytes: WeightBytes::default(),
    };
    for d in decls {
        let name = d.name.as_str();
        let loaded = match &d.kind {
            TensorKind::F32 { shape } => {
                let host = src.f32(name, shape)?;
                let tensor = Tensor::from_f32(ctx, &src.name(name), shape, &host)?;
                group.bytes.total += tensor.byte_size();
                Loaded::F32 { tensor, host }
            }
            TensorKind::OptionalScalar if !src.has(name) => continue,
            TensorKind::OptionalScalar => Loaded::Scalar(src.f32(name, &[1])?[0]),
            TensorKind::Matrix { parts, n, k, use_ } => {
                let parts: Vec<&str> = parts.iter().map(String::as_str).collect();
                let spec = MatrixSpec::of(format, *n, *k, *use_);
                let m = src.upload_matrix(up, name, &parts, spec)?;
                // A table over the linear weight's buffers (a tied lm_head) is one copy on
                // the GPU, and a decode step reads it whole: linear bytes, not table bytes.
                let tables = match m.table_shares_linear() {
                    true => 0,
                    false => m.table.as_ref().map_or(0, table_bytes),
                };
                group.bytes.tables += tables;
                group.bytes.total += tables + m.linear.as_ref().map_or(0, |l| l.bytes());
                Loaded::Matrix(m)
            }
            TensorKind::Experts { experts, n, k } => {
                let host = src.experts(name, *experts, *n, *k, format.expert_format())?;
                let w = ExpertWeight::upload(ctx, &host)?;
                group.bytes.total += w.bytes();
                Loaded::Experts(w)
            }
        };
        group.tensors.insert(d.name.clone(), loaded);
    }
    Ok(group)
}

impl LoadedGroup {
    fn take(&mut self, name: &str, what: &str) -> Result<Loaded> {
        self.tensors.remove(name).ok_or_else(|| {
            Error::invalid(
                "weights",
                format!("`{}{name}`", self.scope),
                format!("a declared {what}"),
                "not declared",
            )
        })
    }

    fn wrong(&self, name: &str, what: &str) -> Error {
        Error::invalid(
            "weights",
            format!("`{}{name}`", self.scope),
            format!("declared as a {what}"),
            "another kind",
        )
    }

    /// An f32 tensor on the GPU and its values on the host.
    pub fn vector_and_host(&mut self, name: &str) -> Result<(Tensor, Vec<f32>)> {
        match self.take(name, "f32 tensor")? {
            Loaded::F32 { tensor, host } => Ok((tensor, host)),
            _ => Err(self.wrong(name, "f32 tensor")),
        }
    }

    pub fn vector(&mut self, name: &str) -> Result<Tensor> {
        Ok(self.vector_and_host(name)?.0)
    }

    /// An optional scalar: None where the source lacks it.
    pub fn scalar(&mut self, name: &str) -> Result<Option<f32>> {
        match self.tensors.remove(name) {
            None => Ok(None),
            Some(Loaded::Scalar(v)) => Ok(Some(v)),
            Some(_) => Err(self.wrong(name, "scalar")),
        }
    }

    /// A matrix as the uploader built it (a linear weight, a table, or both).
    pub fn matrix(&mut self, name: &str) -> Result<Uploaded> {
        match self.take(name, "matrix")? {
            Loaded::Matrix(m) => Ok(m),
            _ => Err(self.wrong(name, "matrix")),
        }
    }

    pub fn linear(&mut self, name: &str) -> Result<LinearWeight> {
        self.matrix(name)?
            .linear
            .ok_or_else(|| self.wrong(name, "linear weight"))
    }

    pub fn table(&mut self, name: &str) -> Result<EmbeddingTable> {
        self.matrix(name)?
            .table
            .ok_or_else(|| self.wrong(name, "table"))
    }

    /// The tied embedding: one matrix as a table and as a linear weight.
    pub fn table_and_linear(&mut self, name: &str) -> Result<(EmbeddingTable, LinearWeight)> {
        let m = self.matrix(name)?;
        match (m.table, m.linear) {
            (Some(table), Some(linear)) => Ok((table, linear)),
            _ => Err(self.wrong(name, "table and linear weight")),
        }
    }

    pub fn experts(&mut self, name: &str) -> Result<ExpertWeight> {
        match self.take(name, "expert weight")? {
            Loaded::Experts(w) => Ok(w),
            _ => Err(self.wrong(name, "expert weight")),
        }
    }

    /// The group's bytes on the GPU, once the block has taken every tensor it declared.
    pub fn finish(self) -> Result<WeightBytes> {
        match self.tensors.keys().min() {
            None => Ok(self.bytes),
            Some(left) => Err(Error::invalid(
                "weights",
                format!("`{}{left}`", self.scope),
                "taken by the block that declared it",
                "loaded and left",
            )),
        }
    }
}
