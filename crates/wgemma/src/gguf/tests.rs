//! GGUF reader, dequantisation and mapping tests. The reference values come from the
//! `gguf` Python package (`tools/gguf/make_fixtures.py`), committed under
//! `crates/wgemma/tests/data/gguf/`.

use super::quant::{dequantize_to_vec, q4_0_to_wgemma_q4, GgmlType};
use super::reader::GgufFile;
use crate::ops::linear::Q4Host;

fn data(name: &str) -> Vec<u8> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/gguf")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every `<TYPE>.blocks` tensor of the reference file dequantises to exactly the bits of
/// its `<TYPE>.expected` (the `gguf` package's `dequantize`).
#[test]
fn dequantisation_is_bit_exact_against_the_gguf_package() {
    let bytes = data("dequant_reference.gguf");
    let file = GgufFile::parse(&bytes).unwrap();
    let mut seen = Vec::new();
    for t in file.tensors.iter().filter(|t| t.name.ends_with(".blocks")) {
        let ty = t.name.trim_end_matches(".blocks");
        let expected = file.tensor(&format!("{ty}.expected")).unwrap();
        assert_eq!(expected.ty, GgmlType::F32);
        let want: Vec<u32> = bytemuck::pod_collect_to_vec(expected.data);
        let got: Vec<u32> = dequantize_to_vec(t.ty, t.data)
            .unwrap()
            .iter()
            .map(|v| v.to_bits())
            .collect();
        assert_eq!(got.len(), want.len(), "{ty}");
        let bad = got.iter().zip(&want).position(|(a, b)| a != b);
        assert!(bad.is_none(), "{ty}: first difference at {bad:?}");
        seen.push(t.ty);
    }
    for ty in [
        GgmlType::F32,
        GgmlType::F16,
        GgmlType::BF16,
        GgmlType::Q8_0,
        GgmlType::Q4_0,
        GgmlType::Q4_K,
        GgmlType::Q6_K,
    ] {
        assert!(seen.contains(&ty), "{ty:?} not covered");
    }
}

/// Q4_0 rewritten into wgemma's Q4 (group 32) dequantises to the same values: no
/// requantisation.
#[test]
fn q4_0_maps_onto_q4_group_32_exactly() {
    let bytes = data("dequant_reference.gguf");
    let file = GgufFile::parse(&bytes).unwrap();
    let t = file.tensor("Q4_0.blocks").unwrap();
    let k = t.dims[0];
    let rows = t.elements() / k;
    let (packed, scales) = q4_0_to_wgemma_q4(t.data, rows, k).unwrap();
    let q = Q4Host::from_parts(rows, k, 32, packed, scales).unwrap();
    let want = dequantize_to_vec(t.ty, t.data).unwrap();
    let mut row = vec![0.0; k];
    for r in 0..rows {
        q.dequantize_row(r, &mut row);
        for (c, (a, b)) in row.iter().zip(&want[r * k..]).enumerate() {
            assert_eq!(a.to_bits(), b.to_bits(), "row {r} col {c}");
        }
    }
}

/// A Q4_0 matrix of a GGUF uploads as Q4 group 32 with exactly the rewritten words (the
/// file's values, not a requantisation), a block of rows at a time.
#[test]
fn q4_0_matrices_upload_without_requantising() {
    use crate::artifact::plan::MatrixUse;
    use crate::gpu::read_tensor_bytes;
    use crate::harness::test_context;
    use crate::model::checkpoint::WeightSource;
    use crate::model::prepared::MatrixLayout;
    use crate::model::upload::Uploader;
    use crate::model::weights::LinearWeight;
    let ctx = test_context();
    let bytes = data("e2b_like.q4_0.gguf");
    let file = GgufFile::parse(&bytes).unwrap();
    let t = file.tensor("blk.0.ffn_down.weight").unwrap();
    assert_eq!(t.ty, GgmlType::Q4_0);
    let (k, n) = (t.dims[0], t.dims[1]);
    let (want_packed, want_scales) = q4_0_to_wgemma_q4(t.data, n, k).unwrap();
    let weights = super::GgufWeights::new(&file);
    let name = "layers.0.mlp.down_proj.weight";
    let up = weights
        .upload_matrix(
            &mut Uploader::new(ctx),
            name,
            &[name],
            n,
            k,
            MatrixLayout::Q4 { group: 32 },
            MatrixUse::Linear,
        )
        .unwrap();
    let Some(LinearWeight::Q4(w)) = up.linear else {
        panic!("expected a Q4 weight")
    };
    let read = |t: &crate::gpu::Tensor| -> Vec<u32> {
        bytemuck::pod_collect_to_vec(&pollster::block_on(read_tensor_bytes(ctx, t)).unwrap())
    };
    let (mut packed, mut scales) = (Vec::new(), Vec::new());
    for c in w.chunks() {
        packed.extend(read(&c.packed));
        scales.extend(read(&c.scales));
    }
    assert_eq!(packed, want_packed);
    assert_eq!(scales, want_scales);
}
