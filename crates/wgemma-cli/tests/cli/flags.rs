//! The familiar CLI (issue 28): llama.cpp's short flags and the long aliases reach the same
//! settings, text prompts sample by default and token ids stay greedy, prompts come from a
//! file or standard input, and errors are one readable chain that names a missing path,
//! with no backtrace even when RUST_BACKTRACE=1.

use crate::common::wgemma_with;
use std::path::PathBuf;
use std::process::Output;
use wgemma::text::tokenizer::tiny_tokenizer_json;

fn wgemma(args: &[&str]) -> Output {
    wgemma_with(args, "", &[])
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// stdout of a run that must succeed.
fn ok(args: &[&str]) -> String {
    let out = wgemma(args);
    assert!(
        out.status.success(),
        "wgemma {args:?} failed:\n{}",
        text(&out.stderr)
    );
    text(&out.stdout)
}

/// The e2b_like golden checkpoint with a small word-level tokenizer, once per test binary.
fn model() -> &'static str {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let d = std::env::temp_dir().join(format!("wgemma-cli-flags-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let src =
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../wgemma/tests/data/golden/e2b_like");
        for f in ["model.safetensors", "generation_config.json", "config.json"] {
            std::fs::copy(src.join(f), d.join(f)).unwrap();
        }
        std::fs::write(
            d.join("tokenizer.json"),
            tiny_tokenizer_json(&["hello", "world", "user", "model", " "]),
        )
        .unwrap();
        d
    })
    .to_str()
    .unwrap()
}

fn json_line(stdout: &str) -> serde_json::Value {
    serde_json::from_str(stdout.lines().last().expect("a JSON line")).unwrap()
}

#[test]
fn help_names_the_short_flags_and_every_option() {
    let generate = ok(&["generate", "--help"]);
    for flag in [
        "-m, --model",
        "-p, --prompt",
        "-f, --file",
        "-n, --max-new-tokens",
        "-c, --context",
        "-s, --seed",
        "-t, --temp",
        "--top-k",
        "--top-p",
        "--repeat-penalty",
        "--greedy",
        "--fixed-draft",
    ] {
        assert!(
            generate.contains(flag),
            "generate --help lacks {flag}:\n{generate}"
        );
    }
    let bench = ok(&["bench", "--help"]);
    for flag in [
        "-m, --model",
        "-p, --n-prompt",
        "-n, --n-gen",
        "-r, --repetitions",
        "--webgpu-limits",
        "--dtype",
    ] {
        assert!(bench.contains(flag), "bench --help lacks {flag}:\n{bench}");
    }
    // Every option has a help line (bench --json had none).
    let json_help = bench
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("--json"))
        .nth(1)
        .unwrap_or("");
    assert!(!json_help.trim().is_empty(), "{bench}");
    let chat = ok(&["chat", "--help"]);
    assert!(
        chat.contains("/exit") && chat.contains("-m, --model"),
        "{chat}"
    );
    // The top-level help no longer says the demo runs a synthetic pair.
    let top = ok(&["--help"]);
    assert!(
        top.contains("chat") && !top.contains("synthetic target"),
        "{top}"
    );
}

#[test]
fn short_flags_and_aliases_match_the_long_names() {
    let long = json_line(&ok(&[
        "generate",
        "--model",
        model(),
        "--prompt-ids",
        "5,17,9",
        "--max-new-tokens",
        "4",
        "--context",
        "64",
        "--json",
    ]));
    let short = json_line(&ok(&[
        "generate",
        "-m",
        model(),
        "--prompt-ids",
        "5,17,9",
        "-n",
        "4",
        "-c",
        "64",
        "--json",
    ]));
    let llama = json_line(&ok(&[
        "generate",
        "-m",
        model(),
        "--prompt-ids",
        "5,17,9",
        "--n-predict",
        "4",
        "--ctx-size",
        "64",
        "--json",
    ]));
    assert_eq!(long["tokens"].as_array().unwrap().len(), 4, "{long}");
    assert_eq!(long["tokens"], short["tokens"]);
    assert_eq!(long["tokens"], llama["tokens"]);
    // Token ids are greedy by default.
    assert_eq!(long["stats"]["temperature"], 0.0, "{long}");
}

#[test]
fn text_prompts_sample_with_a_seed_and_greedy_on_request() {
    let run = |extra: &[&str]| {
        let mut args = vec![
            "generate",
            "-m",
            model(),
            "-p",
            "hello world",
            "-n",
            "6",
            "--json",
        ];
        args.extend_from_slice(extra);
        json_line(&ok(&args))
    };
    let a = run(&["-s", "7"]);
    assert_eq!(a["stats"]["seed"], 7);
    assert!(
        (a["stats"]["temperature"].as_f64().unwrap() - 0.8).abs() < 1e-6,
        "{a}"
    );
    // The same seed, the same tokens; --seed is -s.
    assert_eq!(a["tokens"], run(&["--seed", "7"])["tokens"]);
    // No seed: a fresh one each run, reported.
    let fresh = run(&[]);
    assert!(fresh["stats"]["seed"].as_u64().is_some(), "{fresh}");
    // --greedy is temperature 0 and no penalty: the model's argmax, as --temp 0 --repeat-penalty 1.
    let greedy = run(&["--greedy"]);
    assert_eq!(greedy["stats"]["temperature"], 0.0);
    assert_eq!(
        greedy["tokens"],
        run(&["--temp", "0", "--repeat-penalty", "1"])["tokens"]
    );
    assert_eq!(
        greedy["tokens"],
        run(&["--temperature", "0", "--repetition-penalty", "1"])["tokens"]
    );
}

#[test]
fn prompts_from_a_file_and_from_standard_input() {
    let d = std::env::temp_dir().join(format!("wgemma-cli-prompt-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    let file = d.join("prompt.txt");
    std::fs::write(&file, "hello world\n").unwrap();
    let base = ["generate", "-m", model(), "-n", "5", "-s", "3", "--json"];
    let with = |extra: &[&str], stdin: &str| {
        let mut args = base.to_vec();
        args.extend_from_slice(extra);
        let out = wgemma_with(&args, stdin, &[]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        json_line(&text(&out.stdout))["tokens"].clone()
    };
    let inline = with(&["-p", "hello world"], "");
    assert_eq!(with(&["-f", file.to_str().unwrap()], ""), inline);
    assert_eq!(with(&["--file", "-"], "hello world\n"), inline);
    std::fs::remove_dir_all(&d).unwrap();
}

/// The one error line of a refused run: starts `error: `, no backtrace, no panic.
fn error_of(args: &[&str]) -> String {
    let out = wgemma_with(args, "", &[("RUST_BACKTRACE", "1")]);
    assert!(!out.status.success(), "wgemma {args:?} succeeded");
    let err = text(&out.stderr);
    assert!(
        !err.contains("backtrace") && !err.contains("Backtrace") && !err.contains("panicked"),
        "wgemma {args:?}:\n{err}"
    );
    let line = err
        .lines()
        .find(|l| l.starts_with("error: "))
        .unwrap_or_else(|| panic!("no `error: ` line:\n{err}"));
    line.to_string()
}

#[test]
fn errors_are_one_chain_and_name_a_missing_path() {
    for cmd in ["generate", "logits", "chat", "load", "bench"] {
        let mut args = vec![cmd, "-m", "/nonexistent/nope.gguf"];
        match cmd {
            "generate" => args.extend(["-p", "hello"]),
            "logits" => args.extend(["--prompt-ids", "1"]),
            _ => {}
        }
        let line = error_of(&args);
        assert!(
            line.contains("/nonexistent/nope.gguf") && line.contains("no such file"),
            "{cmd}: {line}"
        );
    }
    // A chain: the flag, then the cause, on one line.
    let line = error_of(&["generate", "-m", model(), "--prompt-ids", "5,x"]);
    assert!(line.starts_with("error: --prompt-ids: "), "{line}");
    assert!(line.matches(": ").count() >= 2, "{line}");
    let line = error_of(&["inspect", "/nonexistent/model.wgemma"]);
    assert!(
        line.contains("no such file") && line.contains("/nonexistent/model.wgemma"),
        "{line}"
    );
    let line = error_of(&["generate", "-m", model(), "-f", "/nonexistent/prompt.txt"]);
    assert!(
        line.contains("no such file") && line.contains("/nonexistent/prompt.txt"),
        "{line}"
    );
}

/// `generate -m MODEL -p hello` with `extra`.
fn generate_hello(extra: &[&str]) -> Output {
    let mut args = vec!["generate", "-m", model(), "-p", "hello"];
    args.extend_from_slice(extra);
    wgemma(&args)
}

#[test]
fn generate_stats_say_what_they_measured() {
    let out = generate_hello(&["-n", "3"]);
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    // A sampled run names its seed (to repeat it) and calls its speed what it is.
    let sampled = err.contains("temp 0.8") && err.contains("(pass -s to repeat)");
    assert!(sampled, "{err}");
    assert!(err.contains("one cold run"), "{err}");
    let err = text(&generate_hello(&["-n", "3", "--greedy"]).stderr);
    assert!(err.contains("| greedy") && !err.contains("seed"), "{err}");
}

#[test]
fn a_temperature_far_above_the_usual_is_flagged() {
    // llama.cpp's -t is a thread count; here it is the temperature.
    let out = generate_hello(&["-n", "1", "-t", "8"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("thread count"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn info_shows_the_browser_profile() {
    let parse = |s: String| serde_json::from_str::<serde_json::Value>(&s).unwrap();
    let native = parse(ok(&["info", "--json"]));
    let browser = parse(ok(&["info", "--json", "--webgpu-limits"]));
    let features = |v: &serde_json::Value| v["features"].to_string();
    assert!(!features(&browser).contains("coherent"), "{browser}");
    assert!(!features(&browser).contains("cooperative"), "{browser}");
    assert!(!features(&browser).contains("inside"), "{browser}");
    // WebGPU's 4 bind groups and 256-byte storage offsets, whatever the adapter offers.
    assert_eq!(browser["limits"]["max_bind_groups"], 4, "{browser}");
    assert_eq!(
        browser["limits"]["min_storage_buffer_offset_alignment"],
        256
    );
    assert!(
        native["limits"]["max_bind_groups"].as_u64() >= Some(4),
        "{native}"
    );
}
