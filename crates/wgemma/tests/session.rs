//! The library's front door (`wgemma::session`, which the browser crate, the CLI and the
//! server drive), natively on lavapipe from the same bytes the browser would fetch: greedy
//! tokens against the HF reference of the golden fixtures, speculative == plain, streamed
//! text, chat prompts, stop strings and finish reasons, stopping, and the errors a caller
//! gets.

use std::path::PathBuf;
use wgemma::session::{
    ChatMessage, CheckpointFiles, FinishReason, GenerateRequest, LoadOptions, Session as Engine,
    TokenEvent,
};
use wgemma::text::tokenizer::tiny_tokenizer_json;

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
        ..CheckpointFiles::default()
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

#[test]
fn batched_streams_match_their_solo_runs_joining_and_leaving() {
    // Three KV slots beside the state's own: streams join at different steps, one leaves
    // early (its slot is reused by a late joiner), and every greedy token equals the
    // request's solo run; a sampled stream equals its solo run with the same seed.
    let options = LoadOptions {
        sequences: 4,
        ..LoadOptions::default()
    };
    let mut engine = pollster::block_on(Engine::new(None)).unwrap();
    engine
        .load_checkpoint(&files("e2b_like", Some(word_tokenizer())), &options)
        .unwrap();
    let request = |i: usize, temperature: f32| GenerateRequest {
        messages: Some(vec![ChatMessage::new(
            "user",
            &format!("w{} w{}", 3 * i, 40 + i),
        )]),
        max_new_tokens: 8 + i,
        temperature,
        seed: i as u64,
        ..GenerateRequest::default()
    };
    let requests: Vec<GenerateRequest> = (0..5)
        .map(|i| request(i, if i == 3 { 0.8 } else { 0.0 }))
        .collect();
    let solo: Vec<Vec<u32>> = requests
        .iter()
        .map(|r| {
            generate(&mut engine, r.clone(), &mut |_| true)
                .unwrap()
                .tokens
        })
        .collect();

    let mut got: Vec<Vec<u32>> = vec![Vec::new(); requests.len()];
    let mut active: Vec<(usize, wgemma::session::Stream)> = Vec::new();
    let start = |engine: &mut Engine, i: usize, got: &mut Vec<Vec<u32>>| {
        let (stream, first) = pollster::block_on(engine.start_stream(&requests[i])).unwrap();
        got[i].push(first.id);
        (i, stream)
    };
    active.push(start(&mut engine, 0, &mut got));
    active.push(start(&mut engine, 1, &mut got));
    let mut step = 0;
    let mut peak = 0;
    let mut dropped = false;
    let mut next = 2;
    while !active.is_empty() {
        // Request 2 joins after two steps; 3 and 4 when slots free up.
        if (step >= 2 && next == 2) || (next > 2 && next < requests.len() && active.len() < 3) {
            active.push(start(&mut engine, next, &mut got));
            next += 1;
        }
        peak = peak.max(active.len());
        let mut streams: Vec<&mut wgemma::session::Stream> =
            active.iter_mut().map(|(_, s)| s).collect();
        let events = pollster::block_on(engine.step_streams(&mut streams)).unwrap();
        for ((i, _), e) in active.iter().zip(&events) {
            got[*i].push(e.id);
        }
        active.retain(|(_, s)| s.finish_reason().is_none());
        // A client that goes away: stream 1 leaves after four steps, its slot freed.
        if step == 3 && !dropped {
            active.retain(|(i, _)| *i != 1);
            dropped = true;
        }
        step += 1;
        assert!(step < 100, "streams never finished");
    }
    assert!(peak >= 3, "at most {peak} streams decoded together");
    for (i, (got, want)) in got.iter().zip(&solo).enumerate() {
        if i == 1 {
            assert_eq!(got[..], want[..got.len()], "stream 1 (left early)");
            assert!(got.len() < want.len());
        } else {
            assert_eq!(got, want, "stream {i}");
        }
    }
    // Every slot came back: three new streams fit again.
    let held: Vec<_> = (0..3)
        .map(|i| pollster::block_on(engine.start_stream(&requests[i])).unwrap())
        .collect();
    assert_eq!(held.len(), 3);
    let e = err(pollster::block_on(engine.start_stream(&requests[0])).map(|_| ()));
    assert!(e.contains("free sequence slot"), "{e}");
}

/// Oracle drafts standing for `reference`: all kept, or every other one.
fn oracle_drafts(reference: Vec<u32>, all: bool) -> wgemma::session::DraftSource {
    let mut flip = false;
    let keep = move |k: usize| -> Vec<bool> {
        let mut next = || {
            flip = !flip;
            all || flip
        };
        (0..k).map(|_| next()).collect()
    };
    wgemma::session::DraftSource::Oracle(wgemma::session::OracleDrafts {
        reference,
        keep: Box::new(keep),
        drafter: true,
    })
}

/// Speculative streams in a batch (`step_rounds`): four drafting streams (k = 1..3, one
/// sampled with a seed) and a plain one, two joining late, each equal to its solo plain
/// run; then the same with oracle drafts standing for each stream's own tokens (every draft
/// accepted, so rounds commit k + 1 tokens) or every other one rejected.
#[test]
fn batched_speculative_streams_match_their_solo_runs() {
    let options = LoadOptions {
        sequences: 6,
        ..LoadOptions::default()
    };
    let mut engine = pollster::block_on(Engine::new(None)).unwrap();
    engine
        .load_checkpoint(&files("e2b_like", Some(word_tokenizer())), &options)
        .unwrap();
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
    let requests: Vec<GenerateRequest> = (0..5)
        .map(|i| GenerateRequest {
            messages: Some(vec![ChatMessage::new(
                "user",
                &format!("w{} w{}", 7 * i, 90 + i),
            )]),
            max_new_tokens: 9 + i,
            temperature: if i == 3 { 0.8 } else { 0.0 },
            seed: 11 + i as u64,
            speculative: i != 4,
            draft_tokens: 1 + i % 3,
            ..GenerateRequest::default()
        })
        .collect();
    let solo: Vec<Vec<u32>> = requests
        .iter()
        .map(|r| {
            let plain = GenerateRequest {
                speculative: false,
                ..r.clone()
            };
            generate(&mut engine, plain, &mut |_| true).unwrap().tokens
        })
        .collect();
    // keep: None (the assistant's own drafts), all kept, every other one kept.
    for keep in [None, Some(true), Some(false)] {
        let mut got: Vec<Vec<u32>> = vec![Vec::new(); requests.len()];
        let mut counts = vec![None; requests.len()];
        let mut rounds = vec![0; requests.len()];
        let mut active: Vec<(usize, wgemma::session::Stream)> = Vec::new();
        let start = |engine: &mut Engine, i: usize, got: &mut Vec<Vec<u32>>| {
            let (mut stream, first) =
                pollster::block_on(engine.start_stream(&requests[i])).unwrap();
            assert_eq!(stream.is_speculative(), i != 4);
            got[i].push(first.id);
            if let (Some(all), true) = (keep, stream.is_speculative()) {
                let source = oracle_drafts(solo[i].clone(), all);
                stream.set_draft_source(source).unwrap();
            }
            (i, stream)
        };
        for i in 0..3 {
            active.push(start(&mut engine, i, &mut got));
        }
        let mut step = 0;
        while !active.is_empty() {
            if step == 2 {
                active.push(start(&mut engine, 3, &mut got));
                active.push(start(&mut engine, 4, &mut got));
            }
            let mut streams: Vec<&mut wgemma::session::Stream> =
                active.iter_mut().map(|(_, s)| s).collect();
            let events = pollster::block_on(engine.step_rounds(&mut streams)).unwrap();
            for ((i, s), e) in active.iter().zip(&events) {
                assert!(!e.is_empty());
                got[*i].extend(e.iter().map(|e| e.id));
                counts[*i] = s.draft_counts();
                rounds[*i] += 1;
            }
            active.retain(|(_, s)| s.finish_reason().is_none());
            step += 1;
            assert!(step < 60, "streams never finished");
        }
        for (i, (got, want)) in got.iter().zip(&solo).enumerate() {
            assert_eq!(got, want, "stream {i}, drafts kept: {keep:?}");
        }
        assert_eq!(counts[4], None, "the plain stream drafts nothing");
        for (i, c) in counts.iter().enumerate().take(4) {
            let (drafted, accepted) = c.expect("a drafting stream");
            assert!(drafted > 0, "stream {i} drafted nothing");
            if keep == Some(true) {
                assert_eq!(
                    accepted, drafted,
                    "stream {i}: every draft is its own token"
                );
            }
        }
        if keep == Some(true) {
            // Rounds committed k + 1 tokens: fewer rounds than tokens after the first.
            for (i, (r, g)) in rounds.iter().zip(&got).enumerate().take(4) {
                assert!(*r < g.len() - 1, "stream {i}: {rounds:?}");
            }
        }
    }
    // A plain batched step refuses a drafting stream.
    let (mut s, _) = pollster::block_on(engine.start_stream(&requests[0])).unwrap();
    let e = err(pollster::block_on(engine.step_streams(&mut [&mut s])).map(|_| ()));
    assert!(e.contains("step_rounds"), "{e}");
}

/// A GGUF file picked in the page (`loadGguf`) with its assistant's GGUF beside it
/// (`loadAssistantGguf`): the F32 GGUFs of the e2b_like pair (tools/gguf) give HF's Q4
/// greedy tokens, plainly and speculatively, as their HF directories do.
#[test]
fn a_gguf_file_loads_from_bytes_like_its_checkpoint() {
    let mut engine = pollster::block_on(Engine::new(None)).unwrap();
    let gguf = |name: &str| {
        std::fs::read(
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("tests/data/gguf")
                .join(name),
        )
        .unwrap()
    };
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
    let data = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data");
    let bytes = std::fs::read(data.join("gguf/k_quant.q4_k_m.gguf")).unwrap();
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
        serde_json::from_slice(&std::fs::read(data.join("chat_templates/expected.json")).unwrap())
            .unwrap();
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
    let bytes = std::fs::read(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/gguf/k_quant.q8_0.gguf"),
    )
    .unwrap();
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
