//! The library's front door (`wgemma::session`, which the browser crate, the CLI and the
//! server drive), natively on lavapipe from the same bytes the browser would fetch: greedy
//! tokens against the HF reference of the golden fixtures, speculative == plain, streamed
//! text, chat prompts, stop strings and finish reasons, stopping, and the errors a caller
//! gets; batched streams in [`batched`], GGUF files from bytes in [`gguf`].

mod batched;
mod gguf;

use crate::common::{checkpoint_files as files, ids, Fixture};
use wgemma::session::{
    ChatMessage, FinishReason, GenerateRequest, LoadOptions, Session as Engine, TokenEvent,
};
use wgemma::text::tokenizer::tiny_tokenizer_json;

fn expected(name: &str) -> serde_json::Value {
    Fixture::open(name).expected
}

/// Loads the assistant fixture `name` beside the engine's target, as the browser hands it
/// over.
fn load_assistant(engine: &mut Engine, name: &str) -> wgemma::Result<()> {
    let fx = Fixture::open(name);
    engine.load_assistant(&fx.config, &[("model.safetensors".into(), fx.model)])
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
    load_assistant(&mut engine, "e2b_like_assistant").unwrap();
    engine
}

fn generate(
    engine: &mut Engine,
    request: GenerateRequest,
    on_token: &mut dyn FnMut(&TokenEvent) -> bool,
) -> wgemma::Result<wgemma::session::GenerateResult> {
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
fn err<T>(r: wgemma::Result<T>) -> String {
    r.err().expect("an error").to_string()
}

#[test]
fn requests_a_page_can_get_wrong_are_refused_with_a_reason() {
    let mut engine = pollster::block_on(Engine::new(None)).unwrap();
    let ids = GenerateRequest {
        prompt_ids: Some(vec![2, 5]),
        ..GenerateRequest::default()
    };
    assert!(err(generate(&mut engine, ids.clone(), &mut |_| true)).contains("expected one loaded"));

    engine
        .load_checkpoint(&files("e2b_like", None), &LoadOptions::default())
        .unwrap();
    let text = GenerateRequest {
        prompt: Some("hello".into()),
        ..GenerateRequest::default()
    };
    assert!(err(generate(&mut engine, text, &mut |_| true))
        .contains("expected a model with a tokenizer"));
    let speculative = GenerateRequest {
        speculative: true,
        ..ids.clone()
    };
    assert!(err(generate(&mut engine, speculative, &mut |_| true))
        .contains("expected an assistant loaded"));
    let neither = GenerateRequest::default();
    assert!(err(generate(&mut engine, neither, &mut |_| true)).contains("exactly one of prompt"));

    // The dense_kv assistant belongs to another target (hidden 128, not 64).
    let mismatched = load_assistant(&mut engine, "dense_kv_assistant");
    assert!(err(mismatched).contains("backbone_hidden_size"));
    let bad_dtype = LoadOptions {
        dtype: "q3".into(),
        ..LoadOptions::default()
    };
    assert!(err(engine.load_checkpoint(&files("e2b_like", None), &bad_dtype)).contains("q4g64"));
}

fn word_tokenizer() -> String {
    let words: Vec<String> = (0..505).map(|i| format!("w{i}")).collect();
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    tiny_tokenizer_json(&words)
}

#[test]
fn conversations_stop_strings_and_finish_reasons() {
    let mut engine = engine_with_e2b_like(Some(word_tokenizer()));
    let conversation = vec![
        ChatMessage::new("system", "w1 w2"),
        ChatMessage::new("user", "w3"),
        ChatMessage::new("assistant", "w4"),
        ChatMessage::new("user", "w5 w6"),
    ];
    let chat = GenerateRequest {
        messages: Some(conversation.clone()),
        max_new_tokens: 10,
        ..GenerateRequest::default()
    };
    let out = generate(&mut engine, chat.clone(), &mut |_| true).unwrap();
    // Without a template of the checkpoint's, Gemma 4's turn format: the same ids as the
    // rendered text encoded.
    let rendered = engine.render_chat(&conversation).unwrap();
    assert!(
        rendered.starts_with("<bos><|turn>system\nw1 w2<turn|>\n"),
        "{rendered}"
    );
    assert!(
        rendered.ends_with("<|turn>user\nw5 w6<turn|>\n<|turn>model\n"),
        "{rendered}"
    );
    let tok = engine.tokenizer().unwrap();
    assert_eq!(out.prompt_ids, tok.encode(&rendered).unwrap());
    assert_eq!(out.finish_reason, FinishReason::Length);
    assert_eq!(out.tokens.len(), 10);

    // A stop string taken from the middle of that output: the text is cut before it and
    // the generation ends on the token that completed it.
    let full = out.text.clone().unwrap();
    let tok = engine.tokenizer().unwrap();
    let stop = (2..out.tokens.len())
        .map(|i| tok.decode(&out.tokens[i..=i]).unwrap())
        .find(|t| !t.is_empty())
        .expect("a generated word");
    let cut = full.find(&stop).unwrap();
    let mut streamed = String::new();
    let stopped = generate(
        &mut engine,
        GenerateRequest {
            stop: vec![stop.clone()],
            ..chat.clone()
        },
        &mut |t| {
            streamed.push_str(t.text.as_deref().unwrap_or(""));
            true
        },
    )
    .unwrap();
    assert_eq!(stopped.finish_reason, FinishReason::Stop, "stop {stop:?}");
    assert_eq!(stopped.text.as_deref(), Some(&full[..cut]));
    assert_eq!(streamed + &stopped.unstreamed_text, full[..cut]);
    assert!(stopped.tokens.len() < out.tokens.len());
    assert_eq!(stopped.tokens[..], out.tokens[..stopped.tokens.len()]);

    // The callback's stop is a cancellation.
    let cancelled = generate(&mut engine, chat, &mut |t| t.index < 1).unwrap();
    assert_eq!(cancelled.finish_reason, FinishReason::Cancelled);
    assert_eq!(cancelled.tokens.len(), 2);

    // A prompt and budget over the context is refused before anything runs.
    let over = GenerateRequest {
        prompt_ids: Some(vec![2, 5]),
        max_new_tokens: 5000,
        ..GenerateRequest::default()
    };
    let e = err(generate(&mut engine, over, &mut |_| true));
    assert!(e.contains("2 + 5000") && e.contains("4096"), "{e}");
}

#[test]
fn a_checkpoint_chat_template_is_used_for_chat_prompts() {
    let template =
        "{{ bos_token }}{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}\
                    {% if add_generation_prompt %}model:{% endif %}";
    let mut files = files("e2b_like", Some(word_tokenizer()));
    files.chat_template = Some(template.to_string());
    let mut engine = pollster::block_on(Engine::new(None)).unwrap();
    let info = engine
        .load_checkpoint(&files, &LoadOptions::default())
        .unwrap();
    assert!(info.has_chat_template && info.has_tokenizer);
    let request = GenerateRequest {
        prompt: Some("w7".into()),
        chat: true,
        max_new_tokens: 2,
        ..GenerateRequest::default()
    };
    let out = generate(&mut engine, request, &mut |_| true).unwrap();
    let tok = engine.tokenizer().unwrap();
    assert_eq!(out.prompt_ids, tok.encode("<bos>user: w7\nmodel:").unwrap());
    assert_eq!(out.prompt_ids[0], 2);
}
