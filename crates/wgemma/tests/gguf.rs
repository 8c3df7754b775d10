//! GGUF files against the HF checkpoint they were written from (`tools/gguf/make_fixtures.py`,
//! from the golden fixture `e2b_like`): the same logits bit for bit from an F32 GGUF at
//! every dtype, the config rebuilt from llama.cpp's metadata equal to config.json's, and a
//! Q4_0/Q8_0 GGUF (llama.cpp's quantised layout) within quantisation error of HF with its
//! Q4_0 matrices uploaded without requantising; and the MTP assistant from its
//! gemma4-assistant GGUF drafting bit for bit as from its HF directory.

use std::path::PathBuf;
use wgemma::gguf::{assistant_config_json, config_json, GgufAssistant, GgufFile, GgufWeights};
use wgemma::harness::test_context;
use wgemma::model::assistant::{
    parse_assistant_config, Assistant, AssistantOptions, AssistantSource,
};
use wgemma::model::checkpoint::{Checkpoint, WeightSource};
use wgemma::model::generate::GenerateOptions;
use wgemma::model::parse_config;
use wgemma::model::sampling::SamplingParams;
use wgemma::model::speculative::{generate_speculative, SpeculativeOptions};
use wgemma::model::target::{Model, ModelOptions, Want};
use wgemma::model::weights::WeightFormat;
use wgemma::ops::opset::OpSet;

fn read(rel: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(rel);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn options(format: WeightFormat) -> ModelOptions {
    ModelOptions {
        format,
        max_context: 64,
        prefill_chunk: 16,
        max_verify_rows: 3,
        sequences: 1,
    }
}

/// Logits at every position of a fixed prompt.
fn logits(source: &dyn WeightSource, config: &str, format: WeightFormat) -> Vec<f32> {
    let spec = parse_config(config).unwrap();
    let mut model = Model::load(
        test_context(),
        source,
        spec,
        options(format),
        &mut |_, _| {},
    )
    .unwrap();
    let tokens: Vec<u32> = (0..12).map(|i| (i * 37 + 5) % 500).collect();
    pollster::block_on(model.forward(test_context(), &tokens, Want::AllLogits))
        .unwrap()
        .logits
}

#[test]
fn f32_gguf_gives_the_hf_directory_logits_bit_for_bit() {
    let hf_bytes = read("golden/e2b_like/model.safetensors");
    let hf_config = String::from_utf8(read("golden/e2b_like/config.json")).unwrap();
    let ck = Checkpoint::from_shards(vec![("model.safetensors".into(), &hf_bytes)]).unwrap();
    let gguf_bytes = read("gguf/e2b_like.f32.gguf");
    let file = GgufFile::parse(&gguf_bytes).unwrap();
    let gguf_config = config_json(&file).unwrap();
    // The metadata describes the same model as config.json.
    let (a, b) = (
        parse_config(&hf_config).unwrap(),
        parse_config(&gguf_config).unwrap(),
    );
    assert_eq!(a.layers, b.layers, "layers from the GGUF metadata");
    assert_eq!(a.ple_dim, b.ple_dim);
    assert_eq!(a.config.vocab_size, b.config.vocab_size);
    assert_eq!(
        a.config.final_logit_softcapping,
        b.config.final_logit_softcapping
    );
    let weights = GgufWeights::new(&file);
    for format in [
        WeightFormat::F32,
        WeightFormat::F16,
        WeightFormat::Q4 { group: 32 },
    ] {
        let hf = logits(&ck, &hf_config, format);
        let gg = logits(&weights, &gguf_config, format);
        assert_eq!(hf.len(), gg.len());
        let first = hf
            .iter()
            .zip(&gg)
            .position(|(x, y)| x.to_bits() != y.to_bits());
        assert!(
            first.is_none(),
            "{format:?}: first differing logit {first:?}"
        );
    }
}

#[test]
fn q4_0_gguf_stays_within_quantisation_error_of_hf() {
    let hf_bytes = read("golden/e2b_like/model.safetensors");
    let hf_config = String::from_utf8(read("golden/e2b_like/config.json")).unwrap();
    let ck = Checkpoint::from_shards(vec![("model.safetensors".into(), &hf_bytes)]).unwrap();
    let reference = logits(&ck, &hf_config, WeightFormat::F32);
    let gguf_bytes = read("gguf/e2b_like.q4_0.gguf");
    let file = GgufFile::parse(&gguf_bytes).unwrap();
    let config = config_json(&file).unwrap();
    let weights = GgufWeights::new(&file);
    // f32: the file's values dequantised as ggml does; q4: Q4_0 blocks as they are, the
    // Q8_0 tables requantised to Q4. Both stay close to HF's unquantised logits, and the
    // Q4 load (Q4_0 matrices bit-identical) stays close to the dequantised one.
    let dequantised = logits(&weights, &config, WeightFormat::F32);
    let q4 = logits(&weights, &config, WeightFormat::Q4 { group: 32 });
    let vocab = 512;
    let rel = |a: &[f32], b: &[f32]| {
        a.chunks(vocab)
            .zip(b.chunks(vocab))
            .map(|(x, y)| {
                let scale = y.iter().fold(1.0f32, |m, v| m.max(v.abs()));
                x.iter()
                    .zip(y)
                    .fold(0.0f32, |m, (p, q)| m.max((p - q).abs()))
                    / scale
            })
            .fold(0.0f32, f32::max)
    };
    // The yardstick: wgemma's own Q4 (group 32) of the HF weights against HF. Tiny random
    // weights make logits small, so any 4-bit quantisation moves them by a good part of
    // their scale; a GGUF of llama.cpp's formats must do about as well.
    let own_q4 = rel(
        &logits(&ck, &hf_config, WeightFormat::Q4 { group: 32 }),
        &reference,
    );
    let (to_hf, q4_to_hf, q4_to_deq) = (
        rel(&dequantised, &reference),
        rel(&q4, &reference),
        rel(&q4, &dequantised),
    );
    eprintln!(
        "max |diff| / logit scale: wgemma q4 of the HF dir {own_q4:.3}, Q4_0 GGUF dequantised \
         {to_hf:.3}, Q4_0 GGUF as q4 {q4_to_hf:.3}, q4 vs dequantised {q4_to_deq:.3}"
    );
    assert!(
        to_hf <= 1.5 * own_q4,
        "dequantised GGUF vs HF: {to_hf} (own q4 {own_q4})"
    );
    assert!(
        q4_to_hf <= 1.5 * own_q4,
        "Q4 GGUF vs HF: {q4_to_hf} (own q4 {own_q4})"
    );
    // The Q8_0 tables (embedding and tied lm_head) were requantised to 4 bits: that alone
    // is a 4-bit quantisation's error.
    assert!(
        q4_to_deq <= 1.5 * own_q4,
        "Q4 vs dequantised GGUF: {q4_to_deq}"
    );
    assert!(
        q4_to_deq > 0.0,
        "the Q8_0 tables were requantised: a difference must show"
    );
}

fn speculative(target: &mut Model, assistant: &mut Assistant, prompt: &[u32]) -> SpecOut {
    let options = GenerateOptions {
        max_new_tokens: 12,
        sampling: SamplingParams::default(),
        stop_ids: vec![],
    };
    target.reset();
    let out = pollster::block_on(generate_speculative(
        target,
        assistant,
        test_context(),
        prompt,
        &options,
        &SpeculativeOptions {
            capture_draft_logits: true,
            ..SpeculativeOptions::default()
        },
        &mut |_| true,
    ))
    .unwrap();
    let drafts = out
        .draft_logits
        .iter()
        .map(|row| row.iter().map(|v| v.to_bits()).collect())
        .collect();
    (out.tokens, drafts)
}

type SpecOut = (Vec<u32>, Vec<Vec<u32>>);

/// The assistant as llama.cpp's gemma4-assistant layout stores it (F32, from the golden
/// fixture): the same config, speculative tokens and draft logits bit for bit as from
/// its HF directory, with both targets from their GGUF and HF forms.
#[test]
fn assistant_gguf_drafts_as_its_hf_directory() {
    let read_str = |rel: &str| String::from_utf8(read(rel)).unwrap();
    let (t_bytes, a_bytes) = (
        read("golden/e2b_like/model.safetensors"),
        read("golden/e2b_like_assistant/model.safetensors"),
    );
    let t_ck = Checkpoint::from_shards(vec![("model.safetensors".into(), &t_bytes)]).unwrap();
    let a_ck = Checkpoint::from_shards(vec![("model.safetensors".into(), &a_bytes)]).unwrap();
    let hf_spec =
        parse_assistant_config(&read_str("golden/e2b_like_assistant/config.json")).unwrap();
    let a_gguf_bytes = read("gguf/e2b_like_assistant.f32.gguf");
    let a_file = GgufFile::parse(&a_gguf_bytes).unwrap();
    let gguf_spec = parse_assistant_config(&assistant_config_json(&a_file).unwrap()).unwrap();
    assert_eq!(gguf_spec.head, hf_spec.head);
    assert_eq!(gguf_spec.backbone_hidden_size, hf_spec.backbone_hidden_size);
    assert_eq!(gguf_spec.text.layers, hf_spec.text.layers);
    let t_gguf_bytes = read("gguf/e2b_like.f32.gguf");
    let t_file = GgufFile::parse(&t_gguf_bytes).unwrap();
    let ctx = test_context();
    for format in [WeightFormat::F32, WeightFormat::Q4 { group: 32 }] {
        let hf_config = read_str("golden/e2b_like/config.json");
        let mut t1 = Model::load(
            ctx,
            &t_ck,
            parse_config(&hf_config).unwrap(),
            options(format),
            &mut |_, _| {},
        )
        .unwrap();
        let weights = GgufWeights::new(&t_file);
        let config = config_json(&t_file).unwrap();
        let mut t2 = Model::load(
            ctx,
            &weights,
            parse_config(&config).unwrap(),
            options(format),
            &mut |_, _| {},
        )
        .unwrap();
        let load = |source: &dyn AssistantSource, spec, target: &Model| {
            Assistant::load(
                ctx,
                source,
                spec,
                target,
                &OpSet::with_mtp(),
                AssistantOptions { format },
            )
            .unwrap()
        };
        let mut a1 = load(&a_ck, hf_spec.clone(), &t1);
        let mut a2 = load(&GgufAssistant { file: &a_file }, gguf_spec.clone(), &t2);
        for prompt in [vec![2u32, 17, 9, 33], vec![5, 5, 5, 5, 5, 5]] {
            let dir = speculative(&mut t1, &mut a1, &prompt);
            let gg = speculative(&mut t2, &mut a2, &prompt);
            assert_eq!(dir.0, gg.0, "{format:?}: tokens");
            assert!(!dir.1.is_empty());
            assert!(dir.1 == gg.1, "{format:?}: draft logits differ");
        }
    }
}
