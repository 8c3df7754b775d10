//! GGUF files against the HF checkpoint they were written from (`tools/gguf/make_fixtures.py`,
//! from the golden fixture `e2b_like`): the same logits bit for bit from an F32 GGUF at
//! every dtype, the config rebuilt from llama.cpp's metadata equal to config.json's, and a
//! Q4_0/Q8_0 GGUF (llama.cpp's quantised layout) within quantisation error of HF with its
//! Q4_0 matrices uploaded without requantising; and the MTP assistant from its
//! gemma4-assistant GGUF drafting bit for bit as from its HF directory.

use crate::common::max_rel_diff;
use std::path::PathBuf;
use wgemma::formats::gguf::{
    assistant_config_json, config_json, GgufAssistant, GgufFile, GgufWeights,
};
use wgemma::formats::hf::{Checkpoint, WeightSource};
use wgemma::generate::plain::GenerateOptions;
use wgemma::generate::sampling::SamplingParams;
use wgemma::generate::speculative::{generate_speculative, SpeculativeOptions};
use wgemma::gpu::test_context;
use wgemma::model::assistant::{parse_assistant_config, Assistant, AssistantOptions};
use wgemma::model::parse_config;
use wgemma::model::state::KvState;
use wgemma::model::target::{ModelOptions, Want};
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
    let mut state = KvState::load(
        test_context(),
        source,
        spec,
        options(format),
        &mut |_, _| {},
    )
    .unwrap();
    let tokens: Vec<u32> = (0..12).map(|i| (i * 37 + 5) % 500).collect();
    pollster::block_on(state.forward(test_context(), &tokens, Want::AllLogits))
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
    let rel = |a: &[f32], b: &[f32]| max_rel_diff(a, b, 512);
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

fn speculative(target: &mut KvState, assistant: &mut Assistant, prompt: &[u32]) -> SpecOut {
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
        let mut t1 = KvState::load(
            ctx,
            &t_ck,
            parse_config(&hf_config).unwrap(),
            options(format),
            &mut |_, _| {},
        )
        .unwrap();
        let weights = GgufWeights::new(&t_file);
        let config = config_json(&t_file).unwrap();
        let mut t2 = KvState::load(
            ctx,
            &weights,
            parse_config(&config).unwrap(),
            options(format),
            &mut |_, _| {},
        )
        .unwrap();
        let load = |source: &dyn WeightSource, spec, target: &KvState| {
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

/// The golden fixture `k_quant` (rows of 256) as llama-quantize's Q4_K_M writes it
/// (`tools/gguf/make_fixtures.py`): Q4_K matrices, Q6_K for the tied token table and
/// layer 1's attn_v / ffn_down, F32 norms. Its HF reference is the variant `q4_k_m` of the
/// fixture: HF transformers run on the file's dequantised values.
struct KQuant {
    gguf: Vec<u8>,
    expected: serde_json::Value,
    logits: Vec<u8>,
}

impl KQuant {
    fn open() -> KQuant {
        KQuant {
            gguf: read("gguf/k_quant.q4_k_m.gguf"),
            expected: serde_json::from_slice(&read("golden/k_quant/expected.json")).unwrap(),
            logits: read("golden/k_quant/logits.safetensors"),
        }
    }

    fn hf_logits(&self, key: &str) -> Vec<f32> {
        let st = safetensors::SafeTensors::deserialize(&self.logits).unwrap();
        bytemuck::pod_collect_to_vec(st.tensor(key).unwrap().data())
    }

    /// (prompt, greedy continuation, logits key) of the variant `q4_k_m`.
    fn prompts(&self) -> Vec<(Vec<u32>, Vec<u32>, String)> {
        let ids = |v: &serde_json::Value| -> Vec<u32> {
            v.as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_u64().unwrap() as u32)
                .collect()
        };
        self.expected["prompts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                (
                    ids(&p["prompt"]),
                    ids(&p["q4_k_m"]["greedy"]),
                    p["q4_k_m"]["logits_key"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    }
}

fn argmaxes(logits: &[f32], vocab: usize) -> Vec<u32> {
    logits
        .chunks(vocab)
        .map(wgemma::generate::sampling::argmax)
        .collect()
}

/// The file holds the types llama-quantize's Q4_K_M gives each tensor (as recorded in the
/// fixture's expected.json), and loaded at f32 it reproduces HF's logits on its dequantised
/// weights at every position of both prompts (1e-3 of the logit scale, the golden tests'
/// f32 tolerance), the same argmax everywhere and HF's greedy continuations.
#[test]
fn q4_k_m_gguf_matches_hf_on_its_dequantised_weights() {
    use wgemma::formats::gguf::quant::GgmlType;
    let kq = KQuant::open();
    let file = GgufFile::parse(&kq.gguf).unwrap();
    let recipe = kq.expected["q4_k_m"]["quantised_tensors"]
        .as_object()
        .unwrap();
    let mut seen = std::collections::BTreeSet::new();
    for info in recipe.values() {
        let name = info["gguf_name"].as_str().unwrap();
        let t = file.tensor(name).unwrap();
        assert_eq!(
            format!("{:?}", t.ty),
            info["type"].as_str().unwrap(),
            "{name}"
        );
        seen.insert(format!("{:?}", t.ty));
    }
    assert_eq!(
        seen.into_iter().collect::<Vec<_>>(),
        ["Q4_K", "Q6_K"],
        "both K-quant types are covered"
    );
    for t in &file.tensors {
        if !recipe
            .values()
            .any(|i| i["gguf_name"].as_str() == Some(&t.name))
        {
            assert_eq!(t.ty, GgmlType::F32, "{} is kept as converted (F32)", t.name);
        }
    }
    let hf_config = String::from_utf8(read("golden/k_quant/config.json")).unwrap();
    let config = config_json(&file).unwrap();
    let (a, b) = (
        parse_config(&hf_config).unwrap(),
        parse_config(&config).unwrap(),
    );
    assert_eq!(a.layers, b.layers, "layers from the GGUF metadata");
    let vocab = b.config.vocab_size;
    let weights = GgufWeights::new(&file);
    let mut state = KvState::load(
        test_context(),
        &weights,
        b,
        options(WeightFormat::F32),
        &mut |_, _| {},
    )
    .unwrap();
    for (p, (prompt, greedy, key)) in kq.prompts().into_iter().enumerate() {
        let want = kq.hf_logits(&key);
        let tokens = [prompt.clone(), greedy.clone()].concat();
        state.reset();
        let got = pollster::block_on(state.forward(test_context(), &tokens, Want::AllLogits))
            .unwrap()
            .logits;
        let diff = max_rel_diff(&got, &want, vocab);
        assert!(diff <= 1e-3, "p{p}: max |diff| / logit scale {diff}");
        assert_eq!(
            argmaxes(&got, vocab),
            argmaxes(&want, vocab),
            "p{p}: argmax"
        );
        state.reset();
        let mut next = pollster::block_on(state.forward(test_context(), &prompt, Want::NextToken))
            .unwrap()
            .next[0];
        let mut out = vec![next];
        while out.len() < greedy.len() {
            next = pollster::block_on(state.forward(test_context(), &[next], Want::NextToken))
                .unwrap()
                .next[0];
            out.push(next);
        }
        assert_eq!(out, greedy, "p{p}: greedy continuation");
    }
}

/// How the K-quant blocks map onto wgemma's GPU layouts, measured: f16 rounds the
/// dequantised values (11 bits), Q4 group 32 requantises them onto its symmetric grid
/// (Q4_K's per-sub-block min has no place there). The weights' relative RMS error of each
/// step and the logits' distance from HF's on the file's values, each against a yardstick:
/// wgemma's own Q4 of the unquantised HF checkpoint against HF.
#[test]
fn k_quants_requantised_to_q4_stay_within_a_4_bit_error() {
    use wgemma::formats::gguf::quant::GgmlType;
    use wgemma::ops::linear::quant::quantize_q4;
    let kq = KQuant::open();
    let file = GgufFile::parse(&kq.gguf).unwrap();
    let hf_bytes = read("golden/k_quant/model.safetensors");
    let hf_config = String::from_utf8(read("golden/k_quant/config.json")).unwrap();
    let ck = Checkpoint::from_shards(vec![("model.safetensors".into(), &hf_bytes)]).unwrap();
    let weights = GgufWeights::new(&file);
    let rms = |v: &[f32]| (v.iter().map(|x| x * x).sum::<f32>() / v.len() as f32).sqrt();
    let rel_rms = |a: &[f32], b: &[f32]| {
        let d: Vec<f32> = a.iter().zip(b).map(|(x, y)| x - y).collect();
        rms(&d) / rms(b)
    };
    for ty in [GgmlType::Q4_K, GgmlType::Q6_K] {
        let (mut own, mut requant) = (0.0f32, 0.0f32);
        for t in file.tensors.iter().filter(|t| t.ty == ty) {
            let (k, n) = (t.dims[0], t.dims[1]);
            let hf_name = wgemma::formats::gguf::model::hf_name(&t.name).unwrap();
            let stored = weights.tensor(&hf_name, &[n, k]).unwrap().to_f32().unwrap();
            let original = ck.f32(&hf_name, &[n, k]).unwrap();
            let q = quantize_q4(&stored, n, k, 32).unwrap();
            let mut back = vec![0.0; n * k];
            for (r, row) in back.chunks_mut(k).enumerate() {
                q.dequantize_row(r, row);
            }
            own = own.max(rel_rms(&stored, &original));
            requant = requant.max(rel_rms(&back, &stored));
        }
        eprintln!(
            "{ty:?}: weights' relative RMS error, worst tensor: the file's own {own:.4}, \
             requantised to Q4 group 32 {requant:.4}"
        );
        assert!(own > 0.0 && requant > 0.0);
        // A 4-bit grid of absmax / 7 moves N(0, s) weights by ~8% RMS: so does a requant.
        assert!(requant < 0.12, "{ty:?} -> Q4: {requant}");
    }
    let prompt: Vec<u32> = (0..24).map(|i| (i * 37 + 5) % 256).collect();
    let run = |source: &dyn WeightSource, config: &str, format| {
        let mut state = KvState::load(
            test_context(),
            source,
            parse_config(config).unwrap(),
            options(format),
            &mut |_, _| {},
        )
        .unwrap();
        pollster::block_on(state.forward(test_context(), &prompt, Want::AllLogits))
            .unwrap()
            .logits
    };
    let config = config_json(&file).unwrap();
    let vocab = 256;
    let hf = run(&ck, &hf_config, WeightFormat::F32);
    let own_q4 = max_rel_diff(
        &run(&ck, &hf_config, WeightFormat::Q4 { group: 32 }),
        &hf,
        vocab,
    );
    let file_f32 = run(&weights, &config, WeightFormat::F32);
    let (file_f16, file_q4) = (
        run(&weights, &config, WeightFormat::F16),
        run(&weights, &config, WeightFormat::Q4 { group: 32 }),
    );
    let (f32_to_hf, f16_to_f32, q4_to_f32, q4_to_hf) = (
        max_rel_diff(&file_f32, &hf, vocab),
        max_rel_diff(&file_f16, &file_f32, vocab),
        max_rel_diff(&file_q4, &file_f32, vocab),
        max_rel_diff(&file_q4, &hf, vocab),
    );
    eprintln!(
        "max |diff| / logit scale: wgemma q4 of the HF dir vs HF {own_q4:.4}; Q4_K_M file at \
         f32 vs HF {f32_to_hf:.4}; at f16 vs at f32 {f16_to_f32:.4}; as q4 vs at f32 \
         {q4_to_f32:.4}; as q4 vs HF {q4_to_hf:.4}"
    );
    let same_argmax = |a: &[f32], b: &[f32]| {
        let (x, y) = (argmaxes(a, vocab), argmaxes(b, vocab));
        format!(
            "{}/{}",
            x.iter().zip(&y).filter(|(p, q)| p == q).count(),
            x.len()
        )
    };
    eprintln!(
        "logits' relative RMS error (same argmax): wgemma q4 of the HF dir vs HF {:.4} ({}); \
         file at f32 vs HF {:.4} ({}); file as q4 vs file at f32 {:.4} ({}); file as q4 vs HF \
         {:.4} ({})",
        rel_rms(&run(&ck, &hf_config, WeightFormat::Q4 { group: 32 }), &hf),
        same_argmax(&run(&ck, &hf_config, WeightFormat::Q4 { group: 32 }), &hf),
        rel_rms(&file_f32, &hf),
        same_argmax(&file_f32, &hf),
        rel_rms(&file_q4, &file_f32),
        same_argmax(&file_q4, &file_f32),
        rel_rms(&file_q4, &hf),
        same_argmax(&file_q4, &hf),
    );
    assert!(f16_to_f32 < 3e-2, "f16 rounding of the file's values");
    assert!(q4_to_f32 <= 1.5 * own_q4, "requantising to Q4");
    assert!(f32_to_hf <= 1.5 * own_q4, "Q4_K_M's own error");
    assert!(q4_to_hf <= 2.0 * own_q4, "both together");
}

/// `wgemma convert --model FILE.gguf [--assistant FILE.gguf]` (the library's `convert`
/// reading [`ConvertWeights::Gguf`]): the artifact holds the weights a load of the file
/// would (Q4_0 blocks as they are, K-quants dequantised then prepared), so its logits are
/// the GGUF's bit for bit, and its assistant drafts as the assistant GGUF does.
#[test]
fn artifacts_of_gguf_files_give_the_gguf_logits() {
    use std::io::Cursor;
    use wgemma::formats::artifact::{convert, load_assistant, load_target, Artifact, ConvertInput};
    use wgemma::formats::artifact::{ConvertWeights, LoadHooks};
    let ctx = test_context();
    let artifact_of = |file: &GgufFile<'_>, assistant: Option<&GgufFile<'_>>, format| {
        let config = config_json(file).unwrap();
        let a_config = assistant.map(|a| assistant_config_json(a).unwrap());
        fn input<'a>(config: &'a str, file: &'a GgufFile<'a>) -> ConvertInput<'a> {
            ConvertInput {
                config_json: config,
                weights: ConvertWeights::Gguf(file),
                generation_config: None,
                tokenizer_json: None,
                sources: vec![],
            }
        }
        let a_input = assistant.zip(a_config.as_deref()).map(|(a, c)| input(c, a));
        let target = input(&config, file);
        convert(
            Cursor::new(Vec::new()),
            &target,
            a_input.as_ref(),
            format,
            &mut |_, _| {},
        )
        .unwrap()
        .into_inner()
    };
    let hooks = || LoadHooks {
        verify: true,
        progress: Box::leak(Box::new(|_, _| {})),
        release: &|_| {},
    };
    let bits = |state: &mut KvState| -> Vec<u32> {
        let tokens: Vec<u32> = (0..11).map(|i| (i * 37 + 5) % 256).collect();
        state.reset();
        let out = pollster::block_on(state.forward(ctx, &tokens, Want::AllLogits)).unwrap();
        out.logits.iter().map(|v| v.to_bits()).collect()
    };
    for (path, format) in [
        ("gguf/k_quant.q4_k_m.gguf", WeightFormat::F32),
        ("gguf/k_quant.q4_k_m.gguf", WeightFormat::Q4 { group: 32 }),
        ("gguf/e2b_like.q4_0.gguf", WeightFormat::Q4 { group: 32 }),
    ] {
        let bytes = read(path);
        let file = GgufFile::parse(&bytes).unwrap();
        let spec = parse_config(&config_json(&file).unwrap()).unwrap();
        let weights = GgufWeights::new(&file);
        let mut from_gguf =
            KvState::load(ctx, &weights, spec, options(format), &mut |_, _| {}).unwrap();
        let art_bytes = artifact_of(&file, None, format);
        let art = Artifact::parse(&art_bytes).unwrap();
        let model = load_target(ctx, &art, options(format), hooks()).unwrap();
        let mut from_artifact = KvState::new(ctx, model).unwrap();
        assert!(
            bits(&mut from_gguf) == bits(&mut from_artifact),
            "{path} {format:?}: logits differ between the GGUF and its artifact"
        );
        assert_eq!(
            from_gguf.model().weight_bytes(),
            from_artifact.model().weight_bytes()
        );
    }
    // The Q4_0 target with its gemma4-assistant GGUF in one artifact.
    let format = WeightFormat::Q4 { group: 32 };
    let (t_bytes, a_bytes) = (
        read("gguf/e2b_like.q4_0.gguf"),
        read("gguf/e2b_like_assistant.f32.gguf"),
    );
    let (t_file, a_file) = (
        GgufFile::parse(&t_bytes).unwrap(),
        GgufFile::parse(&a_bytes).unwrap(),
    );
    let mut target = KvState::load(
        ctx,
        &GgufWeights::new(&t_file),
        parse_config(&config_json(&t_file).unwrap()).unwrap(),
        options(format),
        &mut |_, _| {},
    )
    .unwrap();
    let mut assistant = Assistant::load(
        ctx,
        &GgufAssistant { file: &a_file },
        parse_assistant_config(&assistant_config_json(&a_file).unwrap()).unwrap(),
        &target,
        &OpSet::with_mtp(),
        AssistantOptions { format },
    )
    .unwrap();
    let art_bytes = artifact_of(&t_file, Some(&a_file), format);
    let art = Artifact::parse(&art_bytes).unwrap();
    let model = load_target(ctx, &art, options(format), hooks()).unwrap();
    let mut t2 = KvState::new(ctx, model).unwrap();
    let mut a2 = load_assistant(ctx, &art, &t2, true, &|_| {}).unwrap();
    for prompt in [vec![2u32, 17, 9, 33], vec![5, 5, 5, 5, 5, 5]] {
        let gguf = speculative(&mut target, &mut assistant, &prompt);
        let art = speculative(&mut t2, &mut a2, &prompt);
        assert_eq!(gguf.0, art.0, "tokens");
        assert!(gguf.1 == art.1, "draft logits differ");
    }
}
