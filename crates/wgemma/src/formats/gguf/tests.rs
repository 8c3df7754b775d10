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
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
        GgmlType::Q4_K,
        GgmlType::Q5_K,
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
    use crate::gpu::read_tensor_bytes;
    use crate::harness::test_context;
    use crate::model::weights::LinearWeight;
    use crate::weights::layout::MatrixUse;
    use crate::weights::layout::{MatrixLayout, MatrixSpec};
    use crate::weights::source::Scope;
    use crate::weights::upload::Uploader;
    let ctx = test_context();
    let bytes = data("e2b_like.q4_0.gguf");
    let file = GgufFile::parse(&bytes).unwrap();
    let t = file.tensor("blk.0.ffn_down.weight").unwrap();
    assert_eq!(t.ty, GgmlType::Q4_0);
    let (k, n) = (t.dims[0], t.dims[1]);
    let (want_packed, want_scales) = q4_0_to_wgemma_q4(t.data, n, k).unwrap();
    let weights = super::GgufWeights::new(&file);
    let name = "layers.0.mlp.down_proj.weight";
    let up = Scope::root(&weights)
        .upload_matrix(
            &mut Uploader::new(ctx),
            name,
            &[name],
            MatrixSpec {
                n,
                k,
                layout: MatrixLayout::Q4 { group: 32 },
                use_: MatrixUse::Linear,
            },
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

#[test]
fn names_map_both_ways() {
    use super::model::{gguf_name, hf_name};
    for (hf, gg) in [
        ("embed_tokens.weight", "token_embd.weight"),
        ("layers.12.self_attn.q_proj.weight", "blk.12.attn_q.weight"),
        ("layers.0.layer_scalar", "blk.0.layer_output_scale.weight"),
        (
            "layers.3.router.per_expert_scale",
            "blk.3.ffn_down_exps.scale",
        ),
    ] {
        assert_eq!(gguf_name(hf).as_deref(), Some(gg));
        assert_eq!(hf_name(gg).as_deref(), Some(hf));
    }
    assert_eq!(gguf_name("layers.x.mlp.up_proj.weight"), None);
    assert_eq!(gguf_name("lm_head.weight"), None);
    assert_eq!(hf_name("rope_freqs.weight"), None);
}

/// A GGUF v3 file by hand: metadata `(key, type id, value bytes)`, tensors `(name, dims,
/// type id, offset)`, then `data` after the header padded to 32 bytes.
fn gguf_bytes(
    kv: &[(&str, u32, Vec<u8>)],
    tensors: &[(&str, &[u64], u32, u64)],
    data: &[u8],
) -> Vec<u8> {
    let mut b = b"GGUF".to_vec();
    b.extend(3u32.to_le_bytes());
    b.extend((tensors.len() as u64).to_le_bytes());
    b.extend((kv.len() as u64).to_le_bytes());
    let string = |b: &mut Vec<u8>, s: &str| {
        b.extend((s.len() as u64).to_le_bytes());
        b.extend(s.as_bytes());
    };
    for (k, ty, v) in kv {
        string(&mut b, k);
        b.extend(ty.to_le_bytes());
        b.extend(v);
    }
    for (name, dims, ty, offset) in tensors {
        string(&mut b, name);
        b.extend((dims.len() as u32).to_le_bytes());
        for d in *dims {
            b.extend(d.to_le_bytes());
        }
        b.extend(ty.to_le_bytes());
        b.extend(offset.to_le_bytes());
    }
    b.resize(b.len().div_ceil(32) * 32, 0);
    b.extend(data);
    b
}

fn err_of(bytes: &[u8]) -> String {
    GgufFile::parse(bytes).expect_err("an error").to_string()
}

#[test]
fn bad_files_get_errors_naming_what_is_wrong() {
    let f32s: Vec<u8> = [1.0f32, 2.0, 3.0, 4.0]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let arch = ("general.architecture", 8u32, {
        let mut v = 6u64.to_le_bytes().to_vec();
        v.extend(b"gemma4");
        v
    });
    let good = gguf_bytes(std::slice::from_ref(&arch), &[("w", &[4], 0, 0)], &f32s);
    let file = GgufFile::parse(&good).unwrap();
    assert_eq!(file.architecture().unwrap(), "gemma4");
    assert_eq!(
        dequantize_to_vec(file.tensors[0].ty, file.tensors[0].data).unwrap(),
        [1.0, 2.0, 3.0, 4.0]
    );
    // Truncated anywhere: never a panic, always an error.
    for cut in 0..good.len() {
        assert!(GgufFile::parse(&good[..cut]).is_err(), "cut at {cut}");
    }
    assert!(err_of(&good[..good.len() - 3]).contains("truncated"));
    let mut bad_magic = good.clone();
    bad_magic[0] = b'X';
    assert!(err_of(&bad_magic).contains("magic"));
    let mut v1 = good.clone();
    v1[4] = 1;
    assert!(err_of(&v1).contains("version"));
    // A lying tensor count: more entries than the file can hold.
    let mut lying = good.clone();
    lying[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
    let e = err_of(&lying);
    assert!(
        e.contains("tensor count") && e.contains(&u64::MAX.to_string()),
        "{e}"
    );
    // A lying string length.
    let mut long_key = good.clone();
    long_key[24..32].copy_from_slice(&(1u64 << 40).to_le_bytes());
    assert!(err_of(&long_key).contains("key of metadata entry 0"));
    // Unknown and unread type ids.
    let e = err_of(&gguf_bytes(&[], &[("w", &[4], 99, 0)], &f32s));
    assert!(
        e.contains("`w`") && e.contains("id 99 (not a ggml type)"),
        "{e}"
    );
    let e = err_of(&gguf_bytes(&[], &[("w", &[256], 11, 0)], &[0; 110]));
    assert!(e.contains("Q3_K (id 11, not read by this build)"), "{e}");
    let e = err_of(&gguf_bytes(&[("k", 77, vec![])], &[], &[]));
    assert!(e.contains("GGUF value type id"), "{e}");
    // Misaligned data offset, data past the end, huge dimensions, a row not whole blocks.
    let e = err_of(&gguf_bytes(&[], &[("w", &[2], 0, 8)], &f32s));
    assert!(e.contains("multiple of the alignment 32"), "{e}");
    let e = err_of(&gguf_bytes(&[], &[("w", &[8], 0, 0)], &f32s));
    assert!(e.contains("past its end"), "{e}");
    let e = err_of(&gguf_bytes(&[], &[("w", &[1 << 40, 1 << 40], 0, 0)], &f32s));
    assert!(e.contains("dimensions of `w`"), "{e}");
    let e = err_of(&gguf_bytes(&[], &[("w", &[1 << 62], 0, 0)], &f32s));
    assert!(e.contains("fits in memory"), "{e}");
    let e = err_of(&gguf_bytes(&[], &[("w", &[1 << 30], 0, 0)], &f32s));
    assert!(e.contains("past its end"), "{e}");
    let e = err_of(&gguf_bytes(&[], &[("w", &[16], 2, 0)], &[0; 18]));
    assert!(e.contains("multiple of the 32-element block"), "{e}");
    let e = err_of(&gguf_bytes(&[], &[("w", &[0], 0, 0)], &[]));
    assert!(e.contains("non-zero"), "{e}");
    // Two tensors of one name, a repeated key.
    let e = err_of(&gguf_bytes(
        &[],
        &[("w", &[1], 0, 0), ("w", &[1], 0, 0)],
        &f32s,
    ));
    assert!(e.contains("named once"), "{e}");
    let e = err_of(&gguf_bytes(&[arch.clone(), arch], &[], &[]));
    assert!(e.contains("present once"), "{e}");
}

/// A GGUF of another architecture, or one whose metadata misses a key the loader needs,
/// is refused with the key named.
#[test]
fn config_errors_name_the_key() {
    let s = |text: &str| {
        let mut v = (text.len() as u64).to_le_bytes().to_vec();
        v.extend(text.as_bytes());
        v
    };
    let llama = gguf_bytes(&[("general.architecture", 8, s("llama"))], &[], &[]);
    let e = super::config_json(&GgufFile::parse(&llama).unwrap())
        .unwrap_err()
        .to_string();
    assert!(e.contains("\"gemma4\"") && e.contains("\"llama\""), "{e}");
    let bare = gguf_bytes(&[("general.architecture", 8, s("gemma4"))], &[], &[]);
    let e = super::config_json(&GgufFile::parse(&bare).unwrap())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("gemma4.block_count") && e.contains("missing"),
        "{e}"
    );
}

/// `tokenizer.chat_template` is the template chat prompts use, with the file's BOS / EOS
/// token strings; a file without one has none; a template that is not a string, or does
/// not compile, is refused with the key named.
#[test]
fn the_chat_template_comes_from_the_metadata() {
    use crate::session::{ChatMessage, ChatTemplate};
    let string = |text: &str| {
        let mut v = (text.len() as u64).to_le_bytes().to_vec();
        v.extend(text.as_bytes());
        v
    };
    let mut tokens = 8u32.to_le_bytes().to_vec();
    tokens.extend(3u64.to_le_bytes());
    for t in ["<pad>", "<eos>", "<s>"] {
        tokens.extend(string(t));
    }
    let with = |template: (u32, Vec<u8>)| {
        gguf_bytes(
            &[
                ("tokenizer.ggml.tokens", 9, tokens.clone()),
                (
                    "tokenizer.ggml.bos_token_id",
                    4,
                    2u32.to_le_bytes().to_vec(),
                ),
                (
                    "tokenizer.ggml.eos_token_id",
                    4,
                    1u32.to_le_bytes().to_vec(),
                ),
                ("tokenizer.chat_template", template.0, template.1),
            ],
            &[],
            &[],
        )
    };
    let good = with((
        8,
        string("{{ bos_token }}{{ messages[0].content }}{{ eos_token }}"),
    ));
    let t = ChatTemplate::from_gguf(&GgufFile::parse(&good).unwrap())
        .unwrap()
        .unwrap();
    assert_eq!(
        t.render(&[ChatMessage::new("user", "hi")], true).unwrap(),
        "<s>hi<eos>"
    );
    let none = gguf_bytes(&[("tokenizer.ggml.tokens", 9, tokens.clone())], &[], &[]);
    assert!(ChatTemplate::from_gguf(&GgufFile::parse(&none).unwrap())
        .unwrap()
        .is_none());
    let number = with((4, 7u32.to_le_bytes().to_vec()));
    let e = ChatTemplate::from_gguf(&GgufFile::parse(&number).unwrap())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("tokenizer.chat_template") && e.contains("a string"),
        "{e}"
    );
    let broken = with((8, string("{% for m in messages %}")));
    let e = ChatTemplate::from_gguf(&GgufFile::parse(&broken).unwrap())
        .unwrap_err()
        .to_string();
    assert!(e.contains("GGUF key tokenizer.chat_template"), "{e}");
}
