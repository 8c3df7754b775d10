//! What the themes share: the paths of the test data, the golden fixtures (tools/golden:
//! a checkpoint with HF's expected tokens and logits), and the small conversions every
//! comparison with HF needs.

use safetensors::SafeTensors;
use std::path::PathBuf;
use wgemma::formats::hf::Checkpoint;
use wgemma::generate::plain::GenerateOptions;
use wgemma::generate::sampling::SamplingParams;
use wgemma::gpu::test_context;
use wgemma::model::parse_config;
use wgemma::model::state::KvState;
use wgemma::model::target::{ModelOptions, Want};
use wgemma::session::CheckpointFiles;

/// `rel` under the library crate's folder (crates/wgemma).
pub fn crate_path(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(rel)
}

/// The bytes of `rel` under tests/data, naming the file when it cannot be read.
pub fn read_data(rel: &str) -> Vec<u8> {
    let path = crate_path("tests/data").join(rel);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The folder of the golden fixture `name` (tests/data/golden/NAME).
pub fn golden_dir(name: &str) -> PathBuf {
    crate_path("tests/data/golden").join(name)
}

/// A golden fixture's files: the checkpoint (config.json, model.safetensors) and what HF
/// gave on it (expected.json: prompts and tokens; logits.safetensors).
pub struct Fixture {
    pub config: String,
    pub model: Vec<u8>,
    pub expected: serde_json::Value,
    pub logits: Vec<u8>,
}

impl Fixture {
    pub fn open(name: &str) -> Fixture {
        let read = |file: &str| read_data(&format!("golden/{name}/{file}"));
        Fixture {
            config: String::from_utf8(read("config.json")).unwrap(),
            model: read("model.safetensors"),
            expected: serde_json::from_slice(&read("expected.json")).unwrap(),
            logits: read("logits.safetensors"),
        }
    }

    pub fn checkpoint(&self) -> Checkpoint<'_> {
        Checkpoint::from_shards(vec![("model.safetensors".into(), &self.model)]).unwrap()
    }

    /// The target loaded from the checkpoint with `options`.
    pub fn state(&self, options: ModelOptions) -> KvState {
        let spec = parse_config(&self.config).unwrap();
        KvState::load(
            test_context(),
            &self.checkpoint(),
            spec,
            options,
            &mut |_, _| {},
        )
        .unwrap()
    }

    /// Each prompt's tokens with its entry of expected.json.
    pub fn prompts(&self) -> Vec<(Vec<u32>, serde_json::Value)> {
        self.expected["prompts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| (ids(&p["prompt"]), p.clone()))
            .collect()
    }

    /// The shape and values of HF's logits stored under `key`.
    pub fn tensor(&self, key: &str) -> (Vec<usize>, Vec<f32>) {
        let st = SafeTensors::deserialize(&self.logits).unwrap();
        let t = st.tensor(key).unwrap();
        (t.shape().to_vec(), bytemuck::pod_collect_to_vec(t.data()))
    }
}

/// A golden fixture's directory as the browser hands it over (the bytes of each file), with
/// `tokenizer` as its tokenizer.json.
pub fn checkpoint_files(name: &str, tokenizer: Option<String>) -> CheckpointFiles {
    let fx = Fixture::open(name);
    CheckpointFiles {
        config_json: fx.config,
        shards: vec![("model.safetensors".into(), fx.model)],
        tokenizer_json: tokenizer.map(String::into_bytes),
        generation_config_json: std::fs::read_to_string(
            golden_dir(name).join("generation_config.json"),
        )
        .ok(),
        ..CheckpointFiles::default()
    }
}

/// Token ids from a JSON array.
pub fn ids(v: &serde_json::Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

/// Logits at every position of `tokens`, from the start of the sequence.
pub fn all_logits(state: &mut KvState, tokens: &[u32]) -> Vec<f32> {
    state.reset();
    pollster::block_on(state.forward(test_context(), tokens, Want::AllLogits))
        .unwrap()
        .logits
}

/// Greedy decoding of `max_new_tokens`, no stop ids.
pub fn greedy_options(max_new_tokens: usize) -> GenerateOptions {
    GenerateOptions {
        max_new_tokens,
        sampling: SamplingParams::default(),
        stop_ids: vec![],
    }
}

/// Max |a - b| over each row of `vocab` logits relative to the row's scale (max |b|, at
/// least 1), the largest over all rows.
pub fn max_rel_diff(a: &[f32], b: &[f32], vocab: usize) -> f32 {
    assert_eq!(a.len(), b.len());
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
}
