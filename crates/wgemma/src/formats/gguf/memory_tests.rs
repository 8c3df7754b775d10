//! GPU memory of a GGUF file loaded as a user loads it (no `--dtype`) against the file's
//! tensor bytes (issue 45: within 5%): the blocks go up as stored, a tied embedding and
//! lm_head hold one copy, and no chunking or padding adds more than a word per buffer.

use super::reader::GgufFile;
use super::{config_json, GgufWeights};
use crate::harness::test_context;
use crate::model::parse_config;
use crate::model::weights::{WeightFormat, Weights};
use crate::weights::upload::StreamOptions;

fn data(name: &str) -> Vec<u8> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/gguf")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Bytes of the weights on the GPU after `file`'s weights load as the loader loads them
/// with no `--dtype` (the file's ggml types as stored; the format for what it converts).
fn gpu_weight_bytes(file: &GgufFile<'_>) -> u64 {
    let spec = parse_config(&config_json(file).unwrap()).unwrap();
    let source = GgufWeights::new(file).with_stream(StreamOptions {
        native_ggml: true,
        ..StreamOptions::default()
    });
    let format = WeightFormat::Q4 { group: 32 };
    Weights::load(test_context(), &source, &spec, format, &mut |_, _| {})
        .unwrap()
        .bytes()
}

/// Files of native types (Q8_0, Q6_K, the Q5_K_M and Q4_K_M mixes with Q6_K tied
/// embeddings; Q4_0 matrices with Q8_0 tables) take their tensor bytes on the GPU to 5%.
#[test]
fn native_files_take_their_tensor_bytes_on_the_gpu() {
    for name in [
        "k_quant.q8_0.gguf",
        "k_quant.q6_k.gguf",
        "k_quant.q5_k_m.gguf",
        "k_quant.q4_k_m.gguf",
        "e2b_like.q4_0.gguf",
    ] {
        let bytes = data(name);
        let file = GgufFile::parse(&bytes).unwrap();
        let stored: u64 = file.tensors.iter().map(|t| t.data.len() as u64).sum();
        let gpu = gpu_weight_bytes(&file);
        let ratio = gpu as f64 / stored as f64;
        eprintln!("{name}: tensors {stored} B in the file, {gpu} B on the GPU ({ratio:.4}x)");
        assert!((0.95..=1.05).contains(&ratio), "{name}: {ratio:.4}x");
    }
}
