//! The first ten minutes of a llama.cpp user (issue 47): llama.cpp's flags that mean
//! something else here get a hint instead of the help, a context past the model's positions
//! is cut to them with a line saying so, flags that do nothing are named, paths that are no
//! model say what they are, and `convert` takes `-m`/`-o` as the other commands do.

use crate::common::{golden, s, scratch, wgemma};
use std::process::Output;

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// stderr of a run that must fail, with nothing on stdout.
fn refused(args: &[&str]) -> String {
    let out = wgemma(args);
    let stderr = text(&out.stderr);
    assert!(
        !out.status.success(),
        "wgemma {args:?} succeeded:\n{stderr}"
    );
    assert!(out.stdout.is_empty(), "{}", text(&out.stdout));
    stderr
}

/// stderr of a run that must succeed.
fn ok_stderr(out: Output) -> String {
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    stderr
}

#[test]
fn llama_cpp_flags_get_a_hint_not_the_help() {
    // `-hf repo` was `-h -f`: the help on stdout and exit status 0.
    let err = refused(&["generate", "-hf", "google/gemma-4-e2b-it", "-p", "hi"]);
    assert!(
        err.contains("`-hf` is llama.cpp's Hugging Face download")
            && err.contains("hf download")
            && err.contains("-m gemma-4-e2b-it"),
        "{err}"
    );
    let err = refused(&["chat", "-m", "x", "-ngl", "99"]);
    assert!(err.contains("`-ngl`") && err.contains("drop it"), "{err}");
    // `-fa` parsed as `--file a`.
    let err = refused(&["generate", "-m", "x", "-fa", "-p", "hi"]);
    assert!(
        err.contains("`-fa`") && err.contains("flash attention"),
        "{err}"
    );
    let err = refused(&["generate", "-m", "x", "-cnv"]);
    assert!(err.contains("wgemma chat -m MODEL"), "{err}");
    // `-h` is still the help.
    let out = wgemma(&["generate", "-h"]);
    assert!(out.status.success() && text(&out.stdout).contains("--model"));
}

/// stderr of `wgemma CMD -m e2b_like --prompt-ids 5,17,9 EXTRA...`, which must succeed (the
/// golden model: 4096 positions, no tokenizer).
fn golden_run(cmd: &str, extra: &[&str]) -> String {
    let model = golden("e2b_like");
    let mut args = vec![cmd, "-m", s(&model), "--prompt-ids", "5,17,9"];
    args.extend_from_slice(extra);
    ok_stderr(wgemma(&args))
}

#[test]
fn a_context_past_the_models_positions_is_cut_to_them() {
    let err = golden_run("logits", &["-c", "200000"]);
    assert!(
        err.contains("--context 200000 is past the model's 4096 positions")
            && err.contains("using --context 4096"),
        "{err}"
    );
    // Within the positions, nothing is said.
    assert!(!golden_run("logits", &["-c", "64"]).contains("positions"));
}

#[test]
fn flags_that_do_nothing_are_named() {
    let err = golden_run("logits", &["-c", "64", "--no-verify"]);
    assert!(
        err.contains("warning: --no-verify is unused: only a model artifact"),
        "{err}"
    );
    // Greedy decoding (token ids) with sampling flags: each is named.
    let extra = [
        "-n",
        "2",
        "-t",
        "0",
        "--top-k",
        "5",
        "--repeat-penalty",
        "1.3",
    ];
    let err = golden_run("generate", &extra);
    assert!(
        err.contains("warning: --top-k, --repeat-penalty unused: greedy decoding"),
        "{err}"
    );
}

#[test]
fn paths_that_are_no_model_say_what_they_are() {
    let d = scratch("newcomer-paths");
    // A folder of models without config.json (`-m models/`): what it holds is named.
    std::fs::write(d.join("pair.wgemma"), b"").unwrap();
    std::fs::write(d.join("notes.txt"), b"notes").unwrap();
    let err = refused(&["logits", "-m", s(&d), "--prompt-ids", "5"]);
    assert!(
        err.contains("found a directory without config.json")
            && err.contains("pair.wgemma: pass that")
            && !err.contains("notes.txt"),
        "{err}"
    );
    // A file that is no model: neither an artifact nor a GGUF file, with its first bytes.
    let notes = d.join("notes.md");
    std::fs::write(&notes, "# My notes about Gemma\n").unwrap();
    let err = refused(&["logits", "-m", s(&notes), "--prompt-ids", "5"]);
    assert!(
        err.contains("expected a model artifact")
            && err.contains("found a file that is neither")
            && err.contains("# My notes"),
        "{err}"
    );
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn convert_takes_the_short_flags() {
    let d = scratch("newcomer-convert");
    let out = d.join("model.wgemma");
    let stderr = ok_stderr(wgemma(&[
        "convert",
        "-m",
        s(&golden("e2b_like")),
        "-o",
        s(&out),
    ]));
    assert!(stderr.contains("wrote"), "{stderr}");
    assert!(out.is_file());
    std::fs::remove_dir_all(&d).unwrap();
}
