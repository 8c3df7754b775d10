//! GGUF files at their own precision (issue 45): the golden fixture `k_quant` written as
//! llama-quantize writes Q8_0, Q6_K, Q5_K_M and Q4_K_M files (`tools/gguf/make_fixtures.py`),
//! loaded as a user loads them (no `--dtype`: the session loader, the file's ggml types run
//! as stored), against HF's logits on the unquantised weights (variant `f32`) and against
//! the same file loaded at f32 (its own values exactly); a conversion asked for
//! (`--dtype q4`) is said in one line. (A Q8_0 trained model against HF: tests/trained/q8_0.rs.)

use crate::common::max_rel_diff;
use std::cell::RefCell;
use std::path::PathBuf;
use wgemma::gpu::test_context;
use wgemma::model::state::KvState;
use wgemma::model::target::{ModelOptions, Want};
use wgemma::model::weights::WeightFormat;
use wgemma::session::{load_target, LoadEvent, LoadHooks, LoadSource};

fn read(rel: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(rel);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

const VOCAB: usize = 256;

/// Loads `gguf` through the session loader with `format` (None: as a user with no
/// `--dtype`); returns the state and the conversion line the load printed.
fn load(gguf: &[u8], format: Option<WeightFormat>) -> (KvState, Option<String>) {
    let line = RefCell::new(None);
    let hooks = LoadHooks {
        format,
        options: ModelOptions {
            format: WeightFormat::Q4 { group: 32 },
            max_context: 64,
            prefill_chunk: 16,
            max_verify_rows: 3,
            sequences: 1,
        },
        progress: Box::new(|e| {
            if let LoadEvent::Converted(l) = e {
                *line.borrow_mut() = Some(l);
            }
        }),
        ..LoadHooks::default()
    };
    let loaded = load_target(test_context(), LoadSource::Gguf(gguf), hooks).unwrap();
    (loaded.state, line.into_inner())
}

/// (prompt + HF greedy tokens, HF f32 logits at every position) of each fixture prompt.
fn prompts() -> Vec<(Vec<u32>, Vec<f32>)> {
    let expected: serde_json::Value =
        serde_json::from_slice(&read("golden/k_quant/expected.json")).unwrap();
    let logits = read("golden/k_quant/logits.safetensors");
    let st = safetensors::SafeTensors::deserialize(&logits).unwrap();
    let ids = |v: &serde_json::Value| -> Vec<u32> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap() as u32)
            .collect()
    };
    expected["prompts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let tokens = [ids(&p["prompt"]), ids(&p["f32"]["greedy"])].concat();
            let key = p["f32"]["logits_key"].as_str().unwrap();
            let want = bytemuck::pod_collect_to_vec(st.tensor(key).unwrap().data());
            (tokens, want)
        })
        .collect()
}

fn all_logits(state: &mut KvState, tokens: &[u32]) -> Vec<f32> {
    state.reset();
    pollster::block_on(state.forward(test_context(), tokens, Want::AllLogits))
        .unwrap()
        .logits
}

/// Relative RMS error of `a` against `b` over all logits.
fn rel_rms(a: &[f32], b: &[f32]) -> f32 {
    let d: f32 = a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum();
    (d / b.iter().map(|y| y * y).sum::<f32>()).sqrt()
}

/// Logits to compare against: `(tokens, HF's logits) -> logits`.
type Other<'a> = &'a mut dyn FnMut(&[u32], &[f32]) -> Vec<f32>;

/// (worst max |diff| / logit scale, worst relative RMS) of `state`'s logits against
/// `other(tokens, HF logits)` over the prompts.
fn distance(state: &mut KvState, other: Other<'_>) -> (f32, f32) {
    prompts()
        .iter()
        .fold((0.0f32, 0.0f32), |(m, r), (tokens, hf)| {
            let (got, want) = (all_logits(state, tokens), other(tokens, hf));
            (
                m.max(max_rel_diff(&got, &want, VOCAB)),
                r.max(rel_rms(&got, &want)),
            )
        })
}

/// Per file: the default load (no `--dtype`) against the file's own values (the file at
/// f32: dequantised exactly), against HF on the unquantised weights, and what `--dtype q4`
/// costs, printed. The default load converts nothing (linear layers, the lm_head and the
/// embedding table read the stored blocks), so it gives the file's own logits up to f32
/// summation order and adds nothing to the file's distance from HF, while `--dtype q4`
/// (a second 4-bit rounding) is said in one line. This fixture's random weights amplify
/// any weight error (Q4_K_M's own values are ~1 logit scale from HF), so HF distances are
/// measured, not bounded, here.
#[test]
fn gguf_types_run_at_their_own_precision_by_default() {
    for file in [
        "k_quant.q8_0.gguf",
        "k_quant.q6_k.gguf",
        "k_quant.q5_k_m.gguf",
        "k_quant.q4_k_m.gguf",
    ] {
        let gguf = read(&format!("gguf/{file}"));
        let (mut native, line) = load(&gguf, None);
        let (mut exact, _) = load(&gguf, Some(WeightFormat::F32));
        let (mut q4, q4_line) = load(&gguf, Some(WeightFormat::Q4 { group: 32 }));
        let to_file = distance(&mut native, &mut |t, _| all_logits(&mut exact, t));
        let to_hf = distance(&mut native, &mut |_, hf| hf.to_vec());
        let file_to_hf = distance(&mut exact, &mut |_, hf| hf.to_vec());
        let q4_to_hf = distance(&mut q4, &mut |_, hf| hf.to_vec());
        eprintln!(
            "{file} (max |diff| / logit scale, relative RMS): default load vs the file at f32 \
             {to_file:.6?}; default vs HF {to_hf:.4?}; file at f32 vs HF {file_to_hf:.4?}; \
             --dtype q4 vs HF {q4_to_hf:.4?}\n  --dtype q4: {q4_line:?}"
        );
        assert!(to_file.0 <= 1e-3, "{file}: {to_file:?} from its own values");
        assert!(
            to_hf.0 <= file_to_hf.0 + 1e-3,
            "{file}: error added to the file's"
        );
        assert!(q4_to_hf.1 > to_hf.1, "{file}: requantising costs something");
        assert_eq!(line, None, "{file}: nothing is converted");
        let q4_line = q4_line.expect("--dtype q4 requantises and says so");
        assert!(q4_line.contains("-> Q4 group 32"), "{file}: {q4_line}");
    }
}

/// `wgemma convert --model FILE.gguf` with no `--quant` ([`ConvertWeights::GgufNative`]):
/// the artifact stores each matrix of a native ggml type as the file's blocks
/// (`<name>.ggml_<type>`), its census names the ggml routes, and it loads to the logits of
/// the file's default load bit for bit, with the same bytes on the GPU.
#[test]
fn native_artifacts_store_the_blocks_and_give_the_gguf_logits() {
    use std::io::Cursor;
    use wgemma::formats::artifact::{convert, Artifact, ConvertInput, ConvertWeights};
    use wgemma::formats::gguf::{config_json, GgufFile};
    for file in ["k_quant.q4_k_m.gguf", "k_quant.q8_0.gguf"] {
        let gguf = read(&format!("gguf/{file}"));
        let parsed = GgufFile::parse(&gguf).unwrap();
        let config = config_json(&parsed).unwrap();
        let input = ConvertInput {
            config_json: &config,
            weights: ConvertWeights::GgufNative(&parsed),
            generation_config: None,
            tokenizer_json: None,
            sources: vec![],
        };
        let format = WeightFormat::Q4 { group: 32 };
        let art = convert(
            Cursor::new(Vec::new()),
            &input,
            None,
            format,
            &mut |_, _| {},
        )
        .unwrap()
        .into_inner();
        let parsed_art = Artifact::parse(&art).unwrap();
        let names: Vec<String> = parsed_art
            .tensor_table()
            .into_iter()
            .map(|t| t.name)
            .collect();
        let ggml = names.iter().filter(|n| n.contains(".ggml_")).count();
        assert!(
            names
                .iter()
                .any(|n| n == "target.embed_tokens.weight.ggml_q6_k"
                    || n == "target.embed_tokens.weight.ggml_q8_0"),
            "{file}: {names:?}"
        );
        assert!(!names.iter().any(|n| n.contains("q4_packed")), "{names:?}");
        assert!(ggml >= 10, "{file}: {ggml} ggml tensors");
        let routes: Vec<String> = parsed_art
            .manifest()
            .census
            .iter()
            .map(|r| r.id())
            .collect();
        for want in ["ggml_linear/matvec", "ggml_linear/gemm", "embedding/ggml"] {
            assert!(routes.iter().any(|r| r == want), "{file}: {routes:?}");
        }
        let (mut from_gguf, _) = load(&gguf, None);
        let loaded = load_target(
            test_context(),
            LoadSource::Artifact(&art),
            LoadHooks {
                options: ModelOptions {
                    format,
                    max_context: 64,
                    prefill_chunk: 16,
                    max_verify_rows: 3,
                    sequences: 1,
                },
                ..LoadHooks::default()
            },
        )
        .unwrap();
        let mut from_art = loaded.state;
        let tokens: Vec<u32> = (0..11).map(|i| (i * 37 + 5) % 256).collect();
        let bits = |s: &mut KvState| -> Vec<u32> {
            all_logits(s, &tokens).iter().map(|v| v.to_bits()).collect()
        };
        assert!(
            bits(&mut from_gguf) == bits(&mut from_art),
            "{file}: logits differ"
        );
        assert_eq!(
            from_gguf.model().weight_bytes(),
            from_art.model().weight_bytes()
        );
    }
}
