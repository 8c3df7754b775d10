//! Model artifacts on the golden fixtures: a model loaded from an artifact gives logits
//! bit-identical to the checkpoint it was converted from (f32, f16 and Q4; PLE, KV
//! sharing, MoE), greedy speculative decoding with an assistant from the artifact gives
//! the same tokens and draft logits; and bad artifacts (truncated, a flipped byte, a
//! shape lie, an unknown version, a census route this build lacks) are refused with an
//! error naming what is wrong.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::io::Cursor;
use std::path::PathBuf;
use wgemma::formats::artifact::manifest::MANIFEST_KEY;
use wgemma::formats::artifact::plan::{assistant_plan, target_plan, PlannedWeight, Prep};
use wgemma::formats::artifact::{
    convert, load_assistant, load_target, Artifact, ConvertInput, LoadHooks, Manifest,
};
use wgemma::formats::hf::Checkpoint;
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
use wgemma::weights::layout::{MatrixLayout, MatrixUse};
use wgemma::weights::raw::RawTensor;
use wgemma::weights::source::WeightSource;

struct Fixture {
    config: String,
    model: Vec<u8>,
}

impl Fixture {
    fn open(name: &str) -> Fixture {
        let d = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data/golden")
            .join(name);
        Fixture {
            config: std::fs::read_to_string(d.join("config.json")).unwrap(),
            model: std::fs::read(d.join("model.safetensors")).unwrap(),
        }
    }

    fn checkpoint(&self) -> Checkpoint<'_> {
        Checkpoint::from_shards(vec![("model.safetensors".into(), &self.model)]).unwrap()
    }
}

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

fn all_logits(state: &mut KvState, tokens: &[u32]) -> Vec<u32> {
    state.reset();
    let out = pollster::block_on(state.forward(test_context(), tokens, Want::AllLogits)).unwrap();
    out.logits.iter().map(|v| v.to_bits()).collect()
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
        all_logits(&mut from_dir, &tokens),
        all_logits(&mut from_artifact, &tokens),
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

fn parse_err(bytes: &[u8]) -> String {
    match Artifact::parse(bytes) {
        Ok(_) => panic!("a bad artifact was accepted"),
        Err(e) => e.to_string(),
    }
}

fn q4_artifact() -> Vec<u8> {
    convert_fixtures(
        "e2b_like",
        Some("e2b_like_assistant"),
        WeightFormat::Q4 { group: 32 },
    )
}

/// Rewrites the header of `bytes` through `edit` (padded to 8 bytes, as safetensors
/// writes it; tensor offsets are relative to the data, so the data moves unchanged), and
/// reseals it (its checksum recomputed) so the checks behind the header checksum are
/// reached.
fn edit_header(
    bytes: &[u8],
    edit: impl FnOnce(&mut serde_json::Map<String, serde_json::Value>),
) -> Vec<u8> {
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let mut header: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    edit(&mut header);
    let json = wgemma::formats::artifact::writer::reseal_header(
        &serde_json::Value::Object(header).to_string(),
    );
    let len = json.len().div_ceil(8) * 8;
    let mut out = (len as u64).to_le_bytes().to_vec();
    out.extend(json.as_bytes());
    out.resize(8 + len, b' ');
    out.extend(&bytes[8 + n..]);
    out
}

fn edit_manifest(bytes: &[u8], edit: impl FnOnce(&mut Manifest)) -> Vec<u8> {
    edit_header(bytes, |h| {
        let meta = h["__metadata__"].as_object_mut().unwrap();
        let mut m = Manifest::parse(meta[MANIFEST_KEY].as_str().unwrap()).unwrap();
        edit(&mut m);
        meta.insert(
            MANIFEST_KEY.into(),
            serde_json::to_string(&m).unwrap().into(),
        );
    })
}

#[test]
fn a_truncated_artifact_is_refused_as_truncated() {
    let bytes = q4_artifact();
    for cut in [bytes.len() - 1, bytes.len() / 2, 100, 4] {
        let err = parse_err(&bytes[..cut]);
        assert!(err.contains("truncated"), "cut at {cut}: {err}");
    }
}

#[test]
fn a_flipped_byte_fails_the_checksum_of_its_tensor() {
    let bytes = q4_artifact();
    let artifact = Artifact::parse(&bytes).unwrap();
    let victim = artifact
        .tensor_table()
        .into_iter()
        .find(|t| t.name == "target.layers.1.self_attn.q_proj.weight.q4_packed")
        .unwrap();
    let mut bad = bytes.clone();
    bad[victim.offset + victim.bytes / 2] ^= 0x10;
    // The contract holds (the header is intact); the checksum catches it at load.
    let artifact = Artifact::parse(&bad).unwrap();
    let err = load_target(
        test_context(),
        &artifact,
        options(WeightFormat::Q4 { group: 32 }),
        hooks(true),
    )
    .err()
    .unwrap()
    .to_string();
    assert!(
        err.contains("target.layers.1.self_attn.q_proj.weight.q4_packed") && err.contains("XXH3"),
        "{err}"
    );
    let err = artifact.verify_all(&mut |_, _| {}).unwrap_err().to_string();
    assert!(err.contains("q_proj"), "{err}");
    // --no-verify skips the check: the flipped weight loads (its logits would differ).
    assert!(load_target(
        test_context(),
        &artifact,
        options(WeightFormat::Q4 { group: 32 }),
        hooks(false)
    )
    .is_ok());
}

#[test]
fn a_header_that_lies_about_a_shape_is_refused_naming_the_tensor() {
    let bytes = q4_artifact();
    // Same byte size, other shape: the framing holds, the contract does not.
    let name = "target.layers.0.self_attn.q_proj.weight.q4_packed";
    let bad = edit_header(&bytes, |h| {
        let shape = h[name]["shape"].as_array().unwrap().clone();
        h[name]["shape"] = serde_json::json!([shape[1], shape[0]]);
    });
    let err = parse_err(&bad);
    assert!(err.contains(name) && err.contains("shape"), "{err}");
    // Another byte size: refused by the framing check, naming the tensor.
    let bad = edit_header(&bytes, |h| {
        h[name]["shape"] = serde_json::json!([1, 1]);
    });
    let err = parse_err(&bad);
    assert!(err.contains(name) && err.contains("bytes"), "{err}");
    // A config that lies (MLP size) no longer matches the stored shapes.
    let bad = edit_manifest(&bytes, |m| {
        m.target.config["text_config"]["intermediate_size"] = 96.into();
    });
    let err = parse_err(&bad);
    assert!(err.contains("mlp.gate_up_proj"), "{err}");
}

#[test]
fn an_unknown_version_is_refused_by_its_version() {
    let bytes = q4_artifact();
    let bad = edit_manifest(&bytes, |m| m.version = 3);
    let err = parse_err(&bad);
    assert!(
        err.contains("version") && err.contains('3') && err.contains('2'),
        "{err}"
    );
}

#[test]
fn an_edited_header_fails_the_header_checksum() {
    // Issue 17, item 7: a config edited in the manifest changed the logits while every
    // tensor checksum still held. The same bytes edited in place, not resealed:
    let bytes = q4_artifact();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header = std::str::from_utf8(&bytes[8..8 + n]).unwrap();
    for (from, to) in [
        (
            "\\\"final_logit_softcapping\\\":30.0",
            "\\\"final_logit_softcapping\\\":10.0",
        ),
        // The tensor table too: a dtype of the same width passes the framing checks.
        ("\"dtype\":\"U32\"", "\"dtype\":\"I32\""),
    ] {
        assert!(header.contains(from), "{from}");
        let mut bad = bytes.clone();
        bad[8..8 + n].copy_from_slice(header.replacen(from, to, 1).as_bytes());
        let err = parse_err(&bad);
        assert!(err.contains("XXH3-128 of the header"), "{from}: {err}");
    }
}

#[test]
fn a_census_route_this_build_lacks_is_refused_at_load() {
    let bytes = q4_artifact();
    let bad = edit_manifest(&bytes, |m| {
        let r = m.census.iter_mut().find(|r| r.route == "q4_gemv").unwrap();
        r.route = "q4_gemv_x".into();
    });
    let artifact = Artifact::parse(&bad).unwrap();
    let err = load_target(
        test_context(),
        &artifact,
        options(WeightFormat::Q4 { group: 32 }),
        hooks(true),
    )
    .err()
    .unwrap()
    .to_string();
    assert!(
        err.contains("q4_linear/q4_gemv_x") && err.contains("unknown"),
        "{err}"
    );
    // An MTP route claimed by the target is refused too: the plain op set lacks it.
    let bad = edit_manifest(&bytes, |m| {
        let mut r = m.census.iter().find(|r| r.op == "topk").unwrap().clone();
        r.model = "target".into();
        m.census.push(r);
    });
    let artifact = Artifact::parse(&bad).unwrap();
    let err = load_target(
        test_context(),
        &artifact,
        options(WeightFormat::Q4 { group: 32 }),
        hooks(true),
    )
    .err()
    .unwrap()
    .to_string();
    assert!(err.contains("topk") && err.contains("plain"), "{err}");
}

#[test]
fn other_contract_breaches_are_named() {
    let bytes = q4_artifact();
    // A checksum missing from the manifest.
    let bad = edit_manifest(&bytes, |m| {
        m.checksums.remove("target.norm.weight");
    });
    assert!(parse_err(&bad).contains("target.norm.weight"));
    // A plain safetensors file (no manifest).
    let plain = edit_header(&bytes, |h| {
        h.insert(
            "__metadata__".into(),
            serde_json::to_value(BTreeMap::from([("x", "y")])).unwrap(),
        );
    });
    assert!(parse_err(&plain).contains(MANIFEST_KEY));
    // The wrong format asked of a q4 artifact.
    let artifact = Artifact::parse(&bytes).unwrap();
    let err = load_target(
        test_context(),
        &artifact,
        options(WeightFormat::F16),
        hooks(true),
    )
    .err()
    .unwrap()
    .to_string();
    assert!(err.contains("q4 (group 32)"), "{err}");
    // A target-only artifact has no assistant.
    let target_only = convert_fixtures("e2b_like", None, WeightFormat::F32);
    let artifact = Artifact::parse(&target_only).unwrap();
    let model = load_target(
        test_context(),
        &artifact,
        options(WeightFormat::F32),
        hooks(true),
    )
    .unwrap();
    let target = KvState::new(test_context(), model).unwrap();
    let err = load_assistant(test_context(), &artifact, &target, true, &|_| {})
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("target only"), "{err}");
}

/// A source that records the name of every tensor a load reads, and passes the read on.
struct Recording<'a> {
    inner: Checkpoint<'a>,
    read: RefCell<BTreeSet<String>>,
}

impl<'a> Recording<'a> {
    fn new(inner: Checkpoint<'a>) -> Self {
        Recording {
            inner,
            read: RefCell::new(BTreeSet::new()),
        }
    }

    fn note(&self, name: &str) {
        self.read.borrow_mut().insert(name.to_string());
    }
}

impl WeightSource for Recording<'_> {
    fn tensor(&self, name: &str, shape: &[usize]) -> wgemma::Result<RawTensor<'_>> {
        self.note(name);
        self.inner.tensor(name, shape)
    }
    fn has(&self, name: &str) -> bool {
        self.inner.has(name)
    }
}

/// The checkpoint tensors a load of `plan` reads: every part of every planned weight.
fn names(plan: &[PlannedWeight]) -> BTreeSet<String> {
    plan.iter()
        .flat_map(|w| w.parts.iter().map(|(name, _)| name.clone()))
        .collect()
}

/// The GPU bytes a load of `plan` makes (all, tables): each stored tensor once, the tied
/// embedding twice (its table and its lm_head), host-only `layer_scalar`s not at all.
fn planned_gpu_bytes(plan: &[PlannedWeight]) -> (u64, u64) {
    let (mut total, mut tables) = (0, 0);
    for w in plan {
        let stored: u64 = w.stored("").iter().map(|t| t.byte_len() as u64).sum();
        match &w.prep {
            Prep::F32 { .. } if w.name.ends_with("layer_scalar") => {}
            // A tied Q4 table reads its lm_head's buffers (one copy, read whole per step).
            Prep::Matrix {
                usage: MatrixUse::TableAndLinear,
                layout: MatrixLayout::Q4 { .. },
                ..
            } => total += stored,
            Prep::Matrix { usage, .. } if *usage == MatrixUse::TableAndLinear => {
                total += 2 * stored;
                tables += stored;
            }
            Prep::Matrix { usage, .. } if *usage == MatrixUse::Table => {
                total += stored;
                tables += stored;
            }
            _ => total += stored,
        }
    }
    (total, tables)
}

/// The declarations are what a load does: a load reads exactly the tensors the artifact
/// plan lists (target and assistant), and the bytes it counts are the plan's.
#[test]
fn declarations_give_the_loaded_bytes_and_the_plan() {
    let ctx = test_context();
    for (name, assistant) in [
        ("e2b_like", Some("e2b_like_assistant")),
        ("dense_kv", Some("dense_kv_assistant")),
        ("moe", None),
        ("k_quant", None),
    ] {
        for format in [
            WeightFormat::F32,
            WeightFormat::F16,
            WeightFormat::Q4 { group: 32 },
        ] {
            let t = Fixture::open(name);
            let source = Recording::new(t.checkpoint());
            let spec = parse_config(&t.config).unwrap();
            let plan = target_plan(&spec, format, &|n| WeightSource::has(&source, n));
            let target =
                KvState::load(ctx, &source, spec, options(format), &mut |_, _| {}).unwrap();
            assert_eq!(*source.read.borrow(), names(&plan), "{name} {format:?}");
            let (total, tables) = planned_gpu_bytes(&plan);
            assert_eq!(target.model().weight_bytes(), total, "{name} {format:?}");
            assert_eq!(
                target.model().weight_bytes() - target.model().decode_weight_bytes(),
                tables,
                "{name} {format:?}"
            );
            let Some(assistant) = assistant else {
                continue;
            };
            let a = Fixture::open(assistant);
            let source = Recording::new(a.checkpoint());
            let aspec = parse_assistant_config(&a.config).unwrap();
            let plan = assistant_plan(&aspec, format, &|n| WeightSource::has(&source, n));
            let options = AssistantOptions { format };
            Assistant::load(ctx, &source, aspec, &target, &OpSet::with_mtp(), options).unwrap();
            assert_eq!(
                *source.read.borrow(),
                names(&plan),
                "{assistant} {format:?}"
            );
        }
    }
}
