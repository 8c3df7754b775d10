//! Chat templates rendered by minijinja (`wgemma::session::ChatTemplate`) against HF
//! transformers' `apply_chat_template` on the same templates and conversations
//! (`tools/chat_template/generate.py` wrote `expected.json`): the same text, and an error
//! carrying the template's message where HF raises.

use std::path::PathBuf;
use wgemma::session::{builtin_gemma4, ChatMessage, ChatTemplate};

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/chat_templates")
}

fn expected() -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(dir().join("expected.json")).unwrap()).unwrap()
}

fn messages(v: &serde_json::Value) -> Vec<ChatMessage> {
    serde_json::from_value(v.clone()).unwrap()
}

#[test]
fn minijinja_renders_what_hf_renders() {
    let hf = expected();
    let cases = hf["cases"].as_array().unwrap();
    assert!(cases.len() >= 40, "{} cases", cases.len());
    let mut errors = 0;
    for case in cases {
        let name = case["template"].as_str().unwrap();
        let source = std::fs::read_to_string(dir().join(name)).unwrap();
        let template = ChatTemplate::new(&source, "<bos>", "<eos>").unwrap();
        let conversation = case["conversation"].as_str().unwrap();
        let msgs = messages(&hf["conversations"][conversation]);
        let gen = case["add_generation_prompt"].as_bool().unwrap();
        let got = template.render(&msgs, gen);
        let label = format!("{name} / {conversation} / generation prompt {gen}");
        match (case.get("text"), case.get("error")) {
            (Some(text), None) => {
                assert_eq!(got.unwrap(), text.as_str().unwrap(), "{label}");
            }
            (None, Some(error)) => {
                errors += 1;
                let err = got.expect_err(&label).to_string();
                assert!(err.contains(error.as_str().unwrap()), "{label}: {err}");
            }
            _ => panic!("{label}: a case has text or error"),
        }
    }
    assert!(errors >= 4, "the fixtures include refusals");
}

#[test]
fn tokenizer_config_template_and_the_builtin_format_agree_with_hf() {
    let hf = expected();
    let source = std::fs::read_to_string(dir().join("gemma4_turns.jinja")).unwrap();
    // The same template handed over the way older checkpoints ship it.
    let config =
        serde_json::json!({"bos_token": "<bos>", "eos_token": "<eos>", "chat_template": source});
    let template = ChatTemplate::from_checkpoint(None, Some(&config.to_string()))
        .unwrap()
        .unwrap();
    for conversation in ["one_user", "system_user", "multi_turn"] {
        let msgs = messages(&hf["conversations"][conversation]);
        let want = hf["cases"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| {
                c["template"] == "gemma4_turns.jinja"
                    && c["conversation"] == conversation
                    && c["add_generation_prompt"] == true
            })
            .unwrap()["text"]
            .as_str()
            .unwrap()
            .to_string();
        assert_eq!(
            template.render(&msgs, true).unwrap(),
            want,
            "{conversation}"
        );
        // These conversations have no surrounding whitespace to trim: the built-in format
        // (used when a checkpoint has no template) writes the same turns.
        assert_eq!(builtin_gemma4(&msgs, true).unwrap(), want, "{conversation}");
    }
}
