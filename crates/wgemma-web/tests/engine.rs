//! The browser front end's engine, driven natively (lavapipe in CI) from the same bytes the
//! browser would fetch: greedy tokens against the HF reference of the golden fixtures,
//! speculative == plain, streamed text, stopping, and the errors a page shows.

use std::path::PathBuf;
use wgemma::model::tokenizer::tiny_tokenizer_json;
use wgemma_web::engine::{CheckpointFiles, Engine, GenerateRequest, LoadOptions, TokenEvent};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../wgemma/tests/data/golden")
        .join(name)
}

/// A fixture directory as the browser hands it over: bytes of each file.
fn files(name: &str, tokenizer: Option<String>) -> CheckpointFiles {
    let dir = fixture(name);
    CheckpointFiles {
        config_json: std::fs::read_to_string(dir.join("config.json")).unwrap(),
        shards: vec![(
            "model.safetensors".into(),
            std::fs::read(dir.join("model.safetensors")).unwrap(),
        )],
        tokenizer_json: tokenizer.map(String::into_bytes),
        generation_config_json: std::fs::read_to_string(dir.join("generation_config.json")).ok(),
    }
}

fn expected(name: &str) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(fixture(name).join("expected.json")).unwrap()).unwrap()
}

fn ids(v: &serde_json::Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

fn engine_with_e2b_like(tokenizer: Option<String>) -> Engine {
    let mut engine = pollster::block_on(Engine::new(None)).unwrap();
    let info = engine
        .load_checkpoint(&files("e2b_like", tokenizer), &LoadOptions::default())
        .unwrap();
    assert_eq!(
        (info.layers, info.vocab_size, info.dtype.as_str()),
        (6, 512, "q4")
    );
    let assistant = fixture("e2b_like_assistant");
    engine
        .load_assistant(
            &std::fs::read_to_string(assistant.join("config.json")).unwrap(),
            &[(
                "model.safetensors".into(),
                std::fs::read(assistant.join("model.safetensors")).unwrap(),
            )],
        )
        .unwrap();
    engine
}

fn generate(
    engine: &mut Engine,
    request: GenerateRequest,
    on_token: &mut dyn FnMut(&TokenEvent) -> bool,
) -> anyhow::Result<wgemma_web::engine::GenerateResult> {
    pollster::block_on(engine.generate(&request, on_token))
}

#[test]
fn greedy_plain_and_speculative_match_hf_q4() {
    let mut engine = engine_with_e2b_like(None);
    let hf = expected("e2b_like");
    for p in hf["prompts"].as_array().unwrap() {
        let prompt = ids(&p["prompt"]);
        let want = ids(&p["q4"]["greedy"]);
        for speculative in [false, true] {
            let mut streamed = Vec::new();
            let request = GenerateRequest {
                prompt_ids: Some(prompt.clone()),
                max_new_tokens: want.len(),
                speculative,
                ..GenerateRequest::default()
            };
            let out = generate(&mut engine, request, &mut |t| {
                assert_eq!(t.index, streamed.len());
                assert_eq!(t.text, None, "no tokenizer: no text");
                streamed.push(t.id);
                true
            })
            .unwrap();
            assert_eq!(
                out.tokens, want,
                "speculative {speculative}, prompt {prompt:?}"
            );
            assert_eq!(streamed, want, "the callback sees every token in order");
            assert!(!out.stopped_early);
            assert_eq!(out.stats.speculative, speculative);
            assert_eq!(out.stats.generated_tokens, want.len());
            assert_eq!(out.stats.drafted.is_some(), speculative);
        }
    }
}

#[test]
fn text_prompts_stream_text_and_the_callback_stops_generation() {
    // A word-level tokenizer over the fixture's 512 ids: 6 specials, 505 words, "\n".
    let words: Vec<String> = (0..505).map(|i| format!("w{i}")).collect();
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    let mut engine = engine_with_e2b_like(Some(tiny_tokenizer_json(&words)));
    let mut pieces = String::new();
    let request = GenerateRequest {
        prompt: Some("w10 w20".into()),
        max_new_tokens: 12,
        ..GenerateRequest::default()
    };
    let out = generate(&mut engine, request.clone(), &mut |t| {
        pieces.push_str(t.text.as_deref().unwrap_or(""));
        true
    })
    .unwrap();
    // <bos>, then the words (the pre-tokenizer isolates the space).
    assert_eq!(out.prompt_ids[0], 2);
    assert_eq!(out.prompt_ids.len(), 4);
    assert_eq!(out.text.as_deref(), Some(pieces.as_str()));
    assert!(!pieces.is_empty());

    let mut seen = 0;
    let stopped = generate(&mut engine, request, &mut |_| {
        seen += 1;
        seen < 3
    })
    .unwrap();
    assert!(stopped.stopped_early);
    assert_eq!(stopped.tokens, out.tokens[..3].to_vec());
}

/// The error's message with its causes.
fn err<T>(r: anyhow::Result<T>) -> String {
    format!("{:#}", r.err().expect("an error"))
}

#[test]
fn requests_a_page_can_get_wrong_are_refused_with_a_reason() {
    let mut engine = pollster::block_on(Engine::new(None)).unwrap();
    let ids = GenerateRequest {
        prompt_ids: Some(vec![2, 5]),
        ..GenerateRequest::default()
    };
    assert!(err(generate(&mut engine, ids.clone(), &mut |_| true)).contains("no model loaded"));

    engine
        .load_checkpoint(&files("e2b_like", None), &LoadOptions::default())
        .unwrap();
    let text = GenerateRequest {
        prompt: Some("hello".into()),
        ..GenerateRequest::default()
    };
    assert!(err(generate(&mut engine, text, &mut |_| true)).contains("needs a tokenizer"));
    let speculative = GenerateRequest {
        speculative: true,
        ..ids.clone()
    };
    assert!(err(generate(&mut engine, speculative, &mut |_| true)).contains("needs an assistant"));
    let neither = GenerateRequest::default();
    assert!(err(generate(&mut engine, neither, &mut |_| true)).contains("give a prompt"));

    // The dense_kv assistant belongs to another target (hidden 128, not 64).
    let other = fixture("dense_kv_assistant");
    let mismatched = engine.load_assistant(
        &std::fs::read_to_string(other.join("config.json")).unwrap(),
        &[(
            "model.safetensors".into(),
            std::fs::read(other.join("model.safetensors")).unwrap(),
        )],
    );
    assert!(err(mismatched).contains("backbone_hidden_size"));
    let bad_dtype = LoadOptions {
        dtype: "q3".into(),
        ..LoadOptions::default()
    };
    assert!(err(engine.load_checkpoint(&files("e2b_like", None), &bad_dtype)).contains("q4g64"));
}

/// A GGUF file picked in the page (`loadGguf`): the F32 GGUF of the e2b_like fixture
/// (tools/gguf) gives HF's Q4 greedy tokens, as its HF directory does.
#[test]
fn a_gguf_file_loads_from_bytes_like_its_checkpoint() {
    let mut engine = pollster::block_on(Engine::new(None)).unwrap();
    let bytes = std::fs::read(
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../wgemma/tests/data/gguf/e2b_like.f32.gguf"),
    )
    .unwrap();
    let info = engine.load_gguf(&bytes, &LoadOptions::default()).unwrap();
    assert_eq!((info.layers, info.vocab_size), (6, 512));
    let hf = expected("e2b_like");
    for p in hf["prompts"].as_array().unwrap() {
        let want = ids(&p["q4"]["greedy"]);
        let request = GenerateRequest {
            prompt_ids: Some(ids(&p["prompt"])),
            max_new_tokens: want.len(),
            ..GenerateRequest::default()
        };
        let out = generate(&mut engine, request, &mut |_| true).unwrap();
        assert_eq!(out.tokens, want);
    }
    // Cut short: the tensor table claims more entries than the bytes left can hold.
    let err = err(engine.load_gguf(&bytes[..1000], &LoadOptions::default()));
    assert!(
        err.contains("GGUF") && err.contains("tensor count"),
        "{err}"
    );
}
