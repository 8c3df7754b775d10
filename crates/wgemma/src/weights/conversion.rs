//! What a load converts, said once: a stored tensor uploaded in another layout than its own
//! (a second rounding, or more bytes) is recorded as a [`Conversion`] where the uploader
//! places it ([`super::source::Scope`]), and the loader prints [`summarise`]'s one line.
//! A GGUF file loaded with no `--dtype` runs its ggml types as stored
//! ([`crate::ops::ggml_linear`]), so the conversions left are the float matrices (quantised
//! to Q4 like a checkpoint's), MoE experts and the ggml types no kernel reads.

use super::ggml::GgmlType;
use super::layout::{MatrixLayout, MatrixSpec, MatrixUse};
use super::raw::{RawDtype, RawTensor};
use crate::ops::ggml_linear::is_native;
use std::collections::BTreeMap;

/// One tensor uploaded in another layout than it is stored in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conversion {
    pub name: String,
    /// The stored type (`Q6_K`, `F16`, ...).
    pub from: String,
    /// What it became (`f16 table`, `Q4 group 32`, ...).
    pub to: String,
    pub bytes_from: u64,
    pub bytes_to: u64,
}

fn layout_name(layout: MatrixLayout) -> String {
    match layout {
        MatrixLayout::F32 => "f32".into(),
        MatrixLayout::F16 => "f16".into(),
        MatrixLayout::Q4 { group } => format!("Q4 group {group}"),
    }
}

fn layout_bytes(layout: MatrixLayout, n: usize, k: usize) -> u64 {
    let e = (n * k) as u64;
    match layout {
        MatrixLayout::F32 => 4 * e,
        MatrixLayout::F16 => 2 * e,
        MatrixLayout::Q4 { group } => e / 2 + 2 * e / group.max(1) as u64,
    }
}

fn dtype_name(dtype: RawDtype) -> Option<String> {
    Some(match dtype {
        RawDtype::F32 => "F32".into(),
        RawDtype::F16 => "F16".into(),
        RawDtype::BF16 => "BF16".into(),
        RawDtype::Ggml(ty) => format!("{ty:?}"),
        _ => return None,
    })
}

/// What uploading the matrix `name` stacked from `parts` as `spec` converts (None: placed
/// as stored), with `native` set when ggml types run as stored. Mirrors the uploader's
/// choice ([`super::upload::upload_matrix`]).
pub fn matrix_conversion(
    name: &str,
    parts: &[RawTensor<'_>],
    spec: MatrixSpec,
    native: bool,
) -> Option<Conversion> {
    let MatrixSpec { n, k, layout, use_ } = spec;
    let dtype = parts.first()?.dtype;
    let from = dtype_name(dtype)?;
    let bytes_from = parts
        .iter()
        .map(|p| p.stored_bytes().map_or(0, |b| b.len() as u64))
        .sum();
    let to = match dtype {
        RawDtype::Ggml(ty) if native && is_native(ty) => match use_ {
            MatrixUse::Linear | MatrixUse::Table | MatrixUse::TableAndLinear => return None,
            _ => layout,
        },
        RawDtype::Ggml(GgmlType::Q4_0) if layout == (MatrixLayout::Q4 { group: 32 }) => {
            return None
        }
        RawDtype::F32 if layout == MatrixLayout::F32 => return None,
        RawDtype::F16 if layout == MatrixLayout::F16 => return None,
        _ => layout,
    };
    Some(Conversion {
        name: name.to_string(),
        from,
        to: layout_name(to),
        bytes_from,
        bytes_to: layout_bytes(to, n, k),
    })
}

/// One line for a load's conversions, grouped by (from, to): count, bytes before and after.
pub fn summarise(conversions: &[Conversion]) -> Option<String> {
    let mut groups: BTreeMap<(&str, &str), (usize, u64, u64)> = BTreeMap::new();
    for c in conversions {
        let g = groups.entry((&c.from, &c.to)).or_default();
        g.0 += 1;
        g.1 += c.bytes_from;
        g.2 += c.bytes_to;
    }
    let mb = |b: u64| b as f64 / 1e6;
    let parts: Vec<String> = groups
        .into_iter()
        .map(|((from, to), (count, before, after))| {
            let sizes = format!("{:.1} MB -> {:.1} MB", mb(before), mb(after));
            format!("{count} x {from} -> {to} ({sizes})")
        })
        .collect();
    (!parts.is_empty()).then(|| format!("converted on load: {}", parts.join("; ")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn native_linears_are_not_conversions_and_the_rest_are_named() {
        let q8 = vec![0u8; 34 * 2];
        let spec = |use_| MatrixSpec {
            n: 2,
            k: 32,
            layout: MatrixLayout::Q4 { group: 32 },
            use_,
        };
        let part = [RawTensor::bytes(
            RawDtype::Ggml(GgmlType::Q8_0),
            &[2, 32],
            &q8,
            "`w`",
        )];
        assert_eq!(
            matrix_conversion("w", &part, spec(MatrixUse::Linear), true),
            None
        );
        let c = matrix_conversion("w", &part, spec(MatrixUse::Linear), false).unwrap();
        assert_eq!((c.from.as_str(), c.to.as_str()), ("Q8_0", "Q4 group 32"));
        assert_eq!((c.bytes_from, c.bytes_to), (68, 32 + 4));
        let tied = spec(MatrixUse::TableAndLinear);
        assert_eq!(matrix_conversion("w", &part, tied, true), None);
        let experts = spec(MatrixUse::Experts { experts: 1 });
        let e = matrix_conversion("w", &part, experts, true).unwrap();
        let line = summarise(&[c.clone(), c, e]).unwrap();
        assert_eq!(
            line,
            "converted on load: 3 x Q8_0 -> Q4 group 32 (0.0 MB -> 0.0 MB)"
        );
        assert_eq!(summarise(&[]), None);
    }
}
