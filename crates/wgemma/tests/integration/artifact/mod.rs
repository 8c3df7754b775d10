//! Model artifacts on the golden fixtures: a model loaded from an artifact gives logits
//! bit-identical to the checkpoint it was converted from (f32, f16 and Q4; PLE, KV
//! sharing, MoE), greedy speculative decoding with an assistant from the artifact gives
//! the same tokens and draft logits, and the manifest records what the load needs; bad
//! artifacts (truncated, a flipped byte, a shape lie, an unknown version, a census route
//! this build lacks) are refused with an error naming what is wrong ([`refusals`]); the
//! weight declarations give what a load reads ([`plan`]).

mod plan;
mod refusals;

use crate::common::{all_logits, greedy_options, Fixture};
use std::io::Cursor;
use wgemma::formats::artifact::{
    convert, load_assistant, load_target, Artifact, ConvertInput, LoadHooks,
};
use wgemma::formats::hf::Checkpoint;
use wgemma::generate::speculative::{generate_speculative, SpeculativeOptions};
use wgemma::gpu::test_context;
use wgemma::model::assistant::{parse_assistant_config, Assistant, AssistantOptions};
use wgemma::model::parse_config;
use wgemma::model::state::KvState;
use wgemma::model::target::ModelOptions;
use wgemma::model::weights::WeightFormat;
use wgemma::ops::opset::OpSet;

fn options(format: WeightFormat) -> ModelOptions {
    ModelOptions {
        format,
        max_context: 64,
        prefill_chunk: 8,
        max_verify_rows: 3,
        sequences: 1,
    }
}

fn input<'a>(f: &'a Fixture, ck: &'a Checkpoint<'a>) -> ConvertInput<'a> {
    ConvertInput {
        config_json: &f.config,
        weights: ck.into(),
        generation_config: None,
        tokenizer_json: Some(tokenizer_json()),
        sources: vec![],
    }
}

/// A small real tokenizer.json: convert checks the tokenizer before storing it.
fn tokenizer_json() -> &'static [u8] {
    static JSON: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    JSON.get_or_init(|| wgemma::text::tokenizer::tiny_tokenizer_json(&["hello", "world"]))
        .as_bytes()
}

/// Converts the target fixture `name` (and an assistant fixture) to artifact bytes.
fn convert_fixtures(name: &str, assistant: Option<&str>, format: WeightFormat) -> Vec<u8> {
    let t = Fixture::open(name);
    let tck = t.checkpoint();
    let a = assistant.map(Fixture::open);
    let ack = a.as_ref().map(|a| a.checkpoint());
    let target = input(&t, &tck);
    let assistant = a.as_ref().zip(ack.as_ref()).map(|(a, ck)| input(a, ck));
    convert(
        Cursor::new(Vec::new()),
        &target,
        assistant.as_ref(),
        format,
        &mut |_, _| {},
    )
    .unwrap()
    .into_inner()
}

fn hooks(verify: bool) -> LoadHooks<'static> {
    LoadHooks {
        verify,
        progress: Box::leak(Box::new(|_, _| {})),
        release: &|_| {},
    }
}

/// The bits of the logits at every position of `tokens`: artifacts give them exactly.
fn logit_bits(state: &mut KvState, tokens: &[u32]) -> Vec<u32> {
    all_logits(state, tokens)
        .iter()
        .map(|v| v.to_bits())
        .collect()
}

fn check_round_trip(name: &str, format: WeightFormat) {
    let f = Fixture::open(name);
    let spec = parse_config(&f.config).unwrap();
    let vocab = spec.config.vocab_size as u32;
    let mut from_dir = KvState::load(
        test_context(),
        &f.checkpoint(),
        spec,
        options(format),
        &mut |_, _| {},
    )
    .unwrap();
    let bytes = convert_fixtures(name, None, format);
    let artifact = Artifact::parse(&bytes).unwrap();
    let model = load_target(test_context(), &artifact, options(format), hooks(true)).unwrap();
    let mut from_artifact = KvState::new(test_context(), model).unwrap();
    let tokens: Vec<u32> = (0..11).map(|i| (i * 37 + 5) % vocab).collect();
    let (a, b) = (
        logit_bits(&mut from_dir, &tokens),
        logit_bits(&mut from_artifact, &tokens),
    );
    assert_eq!(a.len(), b.len());
    assert!(
        a == b,
        "{name} {format:?}: logits differ between the directory and its artifact"
    );
    assert_eq!(
        from_dir.model().weight_bytes(),
        from_artifact.model().weight_bytes()
    );
}

#[test]
fn artifact_logits_are_identical_to_the_checkpoint_e2b_like() {
    for format in [
        WeightFormat::F32,
        WeightFormat::F16,
        WeightFormat::Q4 { group: 32 },
    ] {
        check_round_trip("e2b_like", format);
    }
}

#[test]
fn artifact_logits_are_identical_to_the_checkpoint_dense_kv_and_moe() {
    for name in ["dense_kv", "moe"] {
        for format in [WeightFormat::F32, WeightFormat::Q4 { group: 32 }] {
            check_round_trip(name, format);
        }
    }
}

fn speculative(
    target: &mut KvState,
    assistant: &mut Assistant,
    prompt: &[u32],
) -> (Vec<u32>, Vec<Vec<u32>>) {
    let options = greedy_options(12);
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

#[test]
fn speculative_tokens_and_draft_logits_are_identical_from_the_artifact() {
    for format in [WeightFormat::F32, WeightFormat::Q4 { group: 32 }] {
        let (t, a) = (
            Fixture::open("e2b_like"),
            Fixture::open("e2b_like_assistant"),
        );
        let ctx = test_context();
        let mut target = KvState::load(
            ctx,
            &t.checkpoint(),
            parse_config(&t.config).unwrap(),
            options(format),
            &mut |_, _| {},
        )
        .unwrap();
        let mut assistant = Assistant::load(
            ctx,
            &a.checkpoint(),
            parse_assistant_config(&a.config).unwrap(),
            &target,
            &OpSet::with_mtp(),
            AssistantOptions { format },
        )
        .unwrap();
        let bytes = convert_fixtures("e2b_like", Some("e2b_like_assistant"), format);
        let artifact = Artifact::parse(&bytes).unwrap();
        let model = load_target(ctx, &artifact, options(format), hooks(true)).unwrap();
        let mut t2 = KvState::new(ctx, model).unwrap();
        let mut a2 = load_assistant(ctx, &artifact, &t2, true, &|_| {}).unwrap();
        for prompt in [vec![2u32, 17, 9, 33], vec![5, 5, 5, 5, 5, 5]] {
            let dir = speculative(&mut target, &mut assistant, &prompt);
            let art = speculative(&mut t2, &mut a2, &prompt);
            assert_eq!(dir.0, art.0, "{format:?}: tokens");
            assert!(!dir.1.is_empty());
            assert!(dir.1 == art.1, "{format:?}: draft logits differ");
        }
    }
}

#[test]
fn the_manifest_records_quant_census_tokenizer_and_checksums() {
    let bytes = convert_fixtures(
        "e2b_like",
        Some("e2b_like_assistant"),
        WeightFormat::Q4 { group: 32 },
    );
    let artifact = Artifact::parse(&bytes).unwrap();
    let m = artifact.manifest();
    assert_eq!(m.version, wgemma::formats::artifact::FORMAT_VERSION);
    assert_eq!(artifact.format(), WeightFormat::Q4 { group: 32 });
    assert!(m
        .census
        .iter()
        .any(|r| r.model == "assistant" && r.op == "topk" && r.mtp));
    assert!(m
        .census
        .iter()
        .any(|r| r.model == "assistant" && r.op == "scatter" && r.mtp));
    assert!(m
        .census
        .iter()
        .any(|r| r.model == "target" && r.route == "q4_linear_m3"));
    assert!(m
        .census
        .iter()
        .filter(|r| r.model == "target")
        .all(|r| !r.mtp));
    let tok = artifact
        .tokenizer_json(wgemma::formats::artifact::Which::Target)
        .unwrap()
        .unwrap();
    assert_eq!(tok, tokenizer_json());
    let table = artifact.tensor_table();
    assert_eq!(table.len(), m.checksums.len());
    assert!(table.iter().all(|t| t.dtype != "U32" || t.offset % 4 == 0));
    artifact.verify_all(&mut |_, _| {}).unwrap();
}

// ---- bad artifacts ------------------------------------------------------------------
