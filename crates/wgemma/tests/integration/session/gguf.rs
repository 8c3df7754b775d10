//! GGUF files picked in the page, loaded from their bytes: the e2b_like pair as its HF
//! directories give it, and a published-style Q4_K_M file with its own tokenizer and chat
//! template.

use super::{expected, generate};
use crate::common::{ids, read_data};
use wgemma::session::{ChatMessage, GenerateRequest, LoadOptions, Session as Engine};

/// A GGUF file picked in the page (`loadGguf`) with its assistant's GGUF beside it
/// (`loadAssistantGguf`): the F32 GGUFs of the e2b_like pair (tools/gguf) give HF's Q4
/// greedy tokens, plainly and speculatively, as their HF directories do.
#[test]
fn a_gguf_file_loads_from_bytes_like_its_checkpoint() {
    let mut engine = pollster::block_on(Engine::new(None)).unwrap();
    let gguf = |name: &str| read_data(&format!("gguf/{name}"));
    let bytes = gguf("e2b_like.f32.gguf");
    let info = engine.load_gguf(&bytes, &LoadOptions::default()).unwrap();
    assert_eq!((info.layers, info.vocab_size), (6, 512));
    assert!(!info.has_assistant);
    engine
        .load_assistant_gguf(&gguf("e2b_like_assistant.f32.gguf"))
        .unwrap();
    assert!(engine.model_info().unwrap().has_assistant);
    let hf = expected("e2b_like");
    for p in hf["prompts"].as_array().unwrap() {
        let want = ids(&p["q4"]["greedy"]);
        for speculative in [false, true] {
            let request = GenerateRequest {
                prompt_ids: Some(ids(&p["prompt"])),
                max_new_tokens: want.len(),
                speculative,
                ..GenerateRequest::default()
            };
            let out = generate(&mut engine, request, &mut |_| true).unwrap();
            assert_eq!(out.tokens, want, "speculative {speculative}");
            assert_eq!(out.stats.drafted.is_some(), speculative);
        }
    }
    // A target GGUF handed over as the assistant is refused, naming the architecture.
    let err = engine.load_assistant_gguf(&bytes).unwrap_err().to_string();
    assert!(err.contains("gemma4-assistant"), "{err}");
    // Cut short: the tensor table claims more entries than the bytes left can hold.
    let err = engine
        .load_gguf(&bytes[..1000], &LoadOptions::default())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("GGUF") && err.contains("tensor count"),
        "{err}"
    );
}

/// A Q4_K_M GGUF carrying a tokenizer and a chat template (`tokenizer.chat_template`), as
/// published files do (the `k_quant` fixture, tools/gguf): loaded from bytes at f32 it
/// gives HF's greedy tokens on its dequantised weights, and chat prompts are its template
/// as HF renders it (tests/data/chat_templates), not the built-in turn format, encoded by
/// the file's tokenizer.
#[test]
fn a_gguf_chat_template_is_used_for_chat_prompts() {
    let bytes = read_data("gguf/k_quant.q4_k_m.gguf");
    let mut engine = pollster::block_on(Engine::new(None)).unwrap();
    let options = LoadOptions {
        dtype: "f32".into(),
        context: 256,
        ..LoadOptions::default()
    };
    let info = engine.load_gguf(&bytes, &options).unwrap();
    assert!(info.has_chat_template && info.has_tokenizer);
    assert_eq!((info.layers, info.vocab_size), (2, 256));
    for p in expected("k_quant")["prompts"].as_array().unwrap() {
        let want = ids(&p["q4_k_m"]["greedy"]);
        let request = GenerateRequest {
            prompt_ids: Some(ids(&p["prompt"])),
            max_new_tokens: want.len(),
            ..GenerateRequest::default()
        };
        assert_eq!(
            generate(&mut engine, request, &mut |_| true)
                .unwrap()
                .tokens,
            want
        );
    }
    let hf: serde_json::Value =
        serde_json::from_slice(&read_data("chat_templates/expected.json")).unwrap();
    let conversation: Vec<ChatMessage> =
        serde_json::from_value(hf["conversations"]["system_user"].clone()).unwrap();
    let want = hf["cases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| {
            c["template"] == "merged_system.jinja"
                && c["conversation"] == "system_user"
                && c["add_generation_prompt"] == true
        })
        .unwrap()["text"]
        .as_str()
        .unwrap();
    assert_eq!(engine.render_chat(&conversation).unwrap(), want);
    assert_ne!(
        want,
        wgemma::session::builtin_gemma4(&conversation, true).unwrap()
    );
    let out = generate(
        &mut engine,
        GenerateRequest {
            messages: Some(conversation),
            max_new_tokens: 2,
            ..GenerateRequest::default()
        },
        &mut |_| true,
    )
    .unwrap();
    let tok = engine.tokenizer().unwrap();
    assert_eq!(out.prompt_ids, tok.encode(want).unwrap());
    assert_eq!(out.prompt_ids[0], 2, "<bos> from the file's bos_token_id");
}

/// The browser's GGUF load with the default options (dtype "auto") runs the file's types as
/// stored, as the CLI's load with no `--dtype` does: a Q8_0 file keeps its 8.5 bits per
/// weight on the GPU, while "q4" asked for converts to 4.5; a dtype it does not know is
/// refused naming "auto" among the choices.
#[test]
fn a_gguf_file_loads_at_its_own_types_by_default() {
    let bytes = read_data("gguf/k_quant.q8_0.gguf");
    let mut engine = pollster::block_on(Engine::new(None)).unwrap();
    let native = engine.load_gguf(&bytes, &LoadOptions::default()).unwrap();
    assert_eq!(native.dtype, "the file's types as stored");
    let q4 = LoadOptions {
        dtype: "q4".into(),
        ..LoadOptions::default()
    };
    let converted = engine.load_gguf(&bytes, &q4).unwrap();
    assert_eq!(converted.dtype, "q4");
    assert!(
        converted.weight_bytes * 10 < native.weight_bytes * 6,
        "{} vs {}",
        converted.weight_bytes,
        native.weight_bytes
    );
    let bad = LoadOptions {
        dtype: "q8".into(),
        ..LoadOptions::default()
    };
    let err = engine.load_gguf(&bytes, &bad).unwrap_err().to_string();
    assert!(err.contains("auto, f32"), "{err}");
}
