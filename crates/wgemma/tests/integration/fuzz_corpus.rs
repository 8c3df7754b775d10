//! Every committed fuzz corpus input (`fuzz/corpus/<target>/`) through its target's body,
//! in a normal test run: the inputs libFuzzer found interesting (and any crash it found,
//! once fixed) stay regression inputs without a nightly toolchain or a fuzzing build.

#[path = "../../../../fuzz/targets.rs"]
mod targets;

use crate::common::crate_path;

fn corpus(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = crate_path("../../fuzz/corpus").join(target);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "{} holds no corpus", dir.display());
    files
        .into_iter()
        .map(|p| (p.display().to_string(), std::fs::read(&p).unwrap()))
        .collect()
}

fn run(target: &str, body: fn(&[u8])) {
    for (name, bytes) in corpus(target) {
        let result = std::panic::catch_unwind(|| body(&bytes));
        assert!(result.is_ok(), "{target}: {name} panicked");
    }
}

#[test]
fn artifact_reader_corpus() {
    run("artifact_reader", targets::artifact_reader);
}

#[test]
fn checkpoint_config_corpus() {
    run("checkpoint_config", targets::checkpoint_config);
}

#[test]
fn tokenizer_json_corpus() {
    run("tokenizer_json", targets::tokenizer_json);
}

#[test]
fn prompt_ids_corpus() {
    run("prompt_ids", targets::prompt_ids);
}

#[test]
fn chat_prompt_corpus() {
    run("chat_prompt", targets::chat_prompt);
}

#[test]
fn gguf_reader_corpus() {
    run("gguf_reader", targets::gguf_reader);
}

#[test]
fn chat_template_corpus() {
    run("chat_template", targets::chat_template);
}
