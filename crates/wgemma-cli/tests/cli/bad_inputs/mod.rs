//! The bad-input catalogue (issue 17): bad or edge inputs through the `wgemma` binary,
//! each under a timeout. A refused input must exit non-zero with a message that names
//! what was expected and what was found, and never panic, abort or hang. Every defect the
//! issue lists has a case here; each failed on the code before the fix.

pub(crate) use crate::common::{golden, s, scratch};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use wgemma::text::tokenizer::tiny_tokenizer_json;

mod convert;
mod models;

/// What one run of the binary did.
struct Run {
    /// None: killed by a signal (an abort, or SIGPIPE).
    code: Option<i32>,
    signal: Option<i32>,
    stdout: String,
    stderr: String,
}

/// Runs `wgemma args` with a time limit; a run past it is killed and reported as a hang.
fn run_with(args: &[&str], limit: Duration, stdin_closed_stdout: bool) -> Run {
    // Tests run on parallel threads: each run gets its own folder for its output.
    static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = scratch(&format!("io{n}"));
    let (out_path, err_path) = (dir.join("stdout"), dir.join("stderr"));
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_wgemma"));
    cmd.args(args)
        .env("XDG_RUNTIME_DIR", std::env::temp_dir())
        .stdin(Stdio::null())
        .stderr(std::fs::File::create(&err_path).unwrap());
    if stdin_closed_stdout {
        cmd.stdout(Stdio::piped());
    } else {
        cmd.stdout(std::fs::File::create(&out_path).unwrap());
    }
    let mut child = cmd.spawn().expect("running wgemma");
    // A reader that has gone away: the next write to stdout meets a closed pipe.
    drop(child.stdout.take());
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("wgemma {args:?} hung (killed after {limit:?})");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    #[cfg(unix)]
    let signal = std::os::unix::process::ExitStatusExt::signal(&status);
    #[cfg(not(unix))]
    let signal = None;
    let read =
        |p: &Path| String::from_utf8_lossy(&std::fs::read(p).unwrap_or_default()).into_owned();
    let run = Run {
        code: status.code(),
        signal,
        stdout: read(&out_path),
        stderr: read(&err_path),
    };
    let _ = std::fs::remove_dir_all(&dir);
    run
}

const LIMIT: Duration = Duration::from_secs(120);

/// Runs a command that must be refused: non-zero exit, no panic or abort, a message
/// holding "expected", "found" and every needle.
fn refused(args: &[&str], needles: &[&str]) {
    let r = run_with(args, LIMIT, false);
    let err = &r.stderr;
    assert!(
        !err.contains("panicked") && !err.contains("memory allocation of"),
        "wgemma {args:?} panicked or aborted:\n{err}"
    );
    assert!(
        r.signal.is_none(),
        "wgemma {args:?} died of signal {:?}:\n{err}",
        r.signal
    );
    assert!(
        r.code.is_some_and(|c| c != 0),
        "wgemma {args:?} exited {:?}:\n{err}",
        r.code
    );
    for needle in ["expected", "found"].iter().chain(needles) {
        assert!(
            err.contains(needle),
            "wgemma {args:?}: {needle:?} missing from:\n{err}"
        );
    }
}

fn ok(args: &[&str]) -> String {
    let r = run_with(args, LIMIT, false);
    assert_eq!(r.code, Some(0), "wgemma {args:?} failed:\n{}", r.stderr);
    r.stdout
}

/// A copy of the e2b_like checkpoint (config, weights, generation config) with a small
/// word-level tokenizer, its config.json edited by `edit`.
fn model_dir(root: &Path, name: &str, edit: impl FnOnce(&mut serde_json::Value)) -> PathBuf {
    let d = root.join(name);
    std::fs::create_dir_all(&d).unwrap();
    let src = golden("e2b_like");
    for f in ["model.safetensors", "generation_config.json"] {
        std::fs::copy(src.join(f), d.join(f)).unwrap();
    }
    let mut config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(src.join("config.json")).unwrap()).unwrap();
    edit(&mut config["text_config"]);
    std::fs::write(d.join("config.json"), config.to_string()).unwrap();
    std::fs::write(
        d.join("tokenizer.json"),
        tiny_tokenizer_json(&["hello", "world", "user", "model", " "]),
    )
    .unwrap();
    d
}

/// Overwrites element `index` of f32 tensor `name` in `dir`'s model.safetensors.
fn poison(dir: &Path, name: &str, index: usize, value: f32) {
    let path = dir.join("model.safetensors");
    let mut bytes = std::fs::read(&path).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    assert_eq!(header[name]["dtype"], "F32", "{name}");
    let at = 8 + n + header[name]["data_offsets"][0].as_u64().unwrap() as usize + 4 * index;
    bytes[at..at + 4].copy_from_slice(&value.to_le_bytes());
    std::fs::write(&path, bytes).unwrap();
}

/// A GGUF fixture of the library's tests.
fn gguf_fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../wgemma/tests/data/gguf")
        .join(name)
}

fn generate<'a>(model: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["generate", "--model", model];
    args.extend_from_slice(extra);
    args
}

#[test]
fn a_closed_stdout_ends_quietly() {
    // Item 1: `wgemma info | head -1` and friends panicked with "failed printing to stdout".
    let d = scratch("pipe");
    let m = model_dir(&d, "m", |_| {});
    let cases: Vec<Vec<&str>> = vec![
        vec!["info"],
        vec!["ops", "check", "--filter", "argmax"],
        generate(s(&m), &["--prompt", "hello world", "--max-new-tokens", "4"]),
        vec!["logits", "--model", s(&m), "--prompt-ids", "5,17,9"],
    ];
    for args in cases {
        let r = run_with(&args, LIMIT, true);
        assert!(
            !r.stderr.contains("panicked") && !r.stderr.contains("Error"),
            "wgemma {args:?}:\n{}",
            r.stderr
        );
        // Quiet: a clean exit, or the default SIGPIPE death every Unix filter has.
        assert!(
            r.code == Some(0) || r.signal == Some(13),
            "wgemma {args:?}: {:?} {:?}\n{}",
            r.code,
            r.signal,
            r.stderr
        );
    }
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn flags_are_checked_before_anything_runs() {
    let d = scratch("flags");
    let m = model_dir(&d, "m", |_| {});
    let m = s(&m);
    let ids = ["--prompt-ids", "5,17,9"];
    let with = |extra: &[&'static str]| -> Vec<String> {
        let mut v: Vec<String> = ["generate", "--model", m]
            .iter()
            .chain(ids.iter())
            .map(|x| x.to_string())
            .collect();
        v.extend(extra.iter().map(|x| x.to_string()));
        v
    };
    let cases: Vec<(Vec<String>, &[&str])> = vec![
        // Item 3: capacity overflow panic; a 4 TB allocation abort.
        (
            with(&["--max-new-tokens", "18446744073709551615"]),
            &["--max-new-tokens", "--context = 4096"],
        ),
        (
            with(&["--max-new-tokens", "1099511627776"]),
            &["--max-new-tokens", "1099511627779"],
        ),
        // Item 10: prompt + new tokens beyond --context, found only after generating.
        (
            with(&["--max-new-tokens", "14", "--context", "16", "--json"]),
            &["--context = 16", "3 prompt tokens + 14 = 17"],
        ),
        // Item 11: a Debug dump of the options; no flag named.
        (with(&["--context", "0"]), &["--context", "found 0"]),
        (
            with(&["--prefill-chunk", "0"]),
            &["--prefill-chunk", "found 0"],
        ),
        (
            with(&["--prefill-chunk", "100000000"]),
            &["--prefill-chunk", "found 100000000"],
        ),
        (
            with(&["--assistant", "/nonexistent", "--trace-drafts"]),
            &["--trace-drafts", "--json"],
        ),
        (
            with(&["--assistant", "/nonexistent", "--draft-tokens", "9"]),
            &["--draft-tokens", "found 9"],
        ),
        (with(&["--temperature=-1"]), &["temperature", "-1"]),
        (with(&["--temperature", "NaN"]), &["temperature", "NaN"]),
        (with(&["--top-p", "0"]), &["top_p"]),
        (with(&["--dtype", "q5"]), &["--dtype", "q5"]),
        (with(&["--chat"]), &["--chat"]),
    ];
    for (args, needles) in &cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        refused(&args, needles);
    }
    for (ids, needle) in [
        ("", "at least one"),
        ("1,x,3", "#2"),
        ("4294967296", "4294967295"),
        ("1,,2", "#2"),
    ] {
        refused(&["logits", "--model", m, "--prompt-ids", ids], &[needle]);
    }
    refused(&["ops", "bench", "--runs", "0"], &["--runs", "found 0"]);
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn tiny_temperatures_sample_like_greedy() {
    // Item 5: --temperature 1e-38 returned token 0 every step (logits / T overflowed).
    let d = scratch("temperature");
    let m = model_dir(&d, "m", |_| {});
    let tokens = |extra: &[&str]| -> serde_json::Value {
        let mut args = vec![
            "generate",
            "--model",
            s(&m),
            "--prompt-ids",
            "5,17,9,200,3",
            "--max-new-tokens",
            "6",
            "--json",
        ];
        args.extend_from_slice(extra);
        serde_json::from_str::<serde_json::Value>(&ok(&args)).unwrap()["tokens"].clone()
    };
    let greedy = tokens(&[]);
    assert!(
        greedy.as_array().unwrap().iter().any(|t| t != 0),
        "{greedy}"
    );
    for t in ["1e-38", "1e-45"] {
        assert_eq!(tokens(&["--temperature", t]), greedy, "T = {t}");
    }
    let asst = golden("e2b_like_assistant");
    assert_eq!(
        tokens(&["--temperature", "1e-40", "--assistant", s(&asst)]),
        greedy,
        "speculative"
    );
    std::fs::remove_dir_all(&d).unwrap();
}

#[cfg(target_os = "linux")]
#[test]
fn output_errors_are_errors_not_panics() {
    // `> /dev/full`: every command panicked with exit 101.
    let d = scratch("full");
    let m = model_dir(&d, "m", |_| {});
    let gguf = gguf_fixture("e2b_like.f32.gguf");
    let art = d.join("m.wgemma");
    ok(&["convert", "--model", s(&m), "--out", s(&art)]);
    // Every command that prints, each in its cheapest form. `--help`, `--version` and
    // `help` exited 0 with nothing written (clap ignored the failed write). `convert` and
    // `synth-checkpoint` report on stderr only (its failure is the case below).
    let cases: Vec<Vec<&str>> = vec![
        vec!["--help"],
        vec!["--version"],
        vec!["help", "generate"],
        vec!["generate", "--help"],
        vec!["info"],
        vec!["ops", "check", "--filter", "argmax"],
        vec!["inspect", s(&gguf)],
        vec!["inspect", s(&art)],
        generate(s(&m), &["--prompt-ids", "5,17,9", "--max-new-tokens", "2"]),
        generate(s(&m), &["--prompt", "hello world", "--max-new-tokens", "2"]),
        vec!["logits", "--model", s(&m), "--prompt-ids", "5,17,9"],
        vec!["load", "--model", s(&m)],
        vec![
            "bench",
            "--synthetic",
            "tiny",
            "-p",
            "4",
            "-n",
            "2",
            "-r",
            "1",
        ],
        vec!["demo", "--synthetic", "--max-new-tokens", "2", "-r", "1"],
    ];
    for args in cases {
        let err_path = d.join("stderr");
        let status = Command::new(env!("CARGO_BIN_EXE_wgemma"))
            .args(&args)
            .env("XDG_RUNTIME_DIR", std::env::temp_dir())
            .stdin(Stdio::null())
            .stdout(
                std::fs::OpenOptions::new()
                    .write(true)
                    .open("/dev/full")
                    .unwrap(),
            )
            .stderr(std::fs::File::create(&err_path).unwrap())
            .status()
            .unwrap();
        let err = std::fs::read_to_string(&err_path).unwrap();
        assert_eq!(status.code(), Some(1), "wgemma {args:?}:\n{err}");
        assert!(!err.contains("panicked"), "wgemma {args:?}:\n{err}");
        // One error line (progress lines on stderr may come before it).
        let errors: Vec<&str> = err.lines().filter(|l| l.contains("error")).collect();
        assert!(
            errors.len() == 1 && errors[0].starts_with("error:") && err.contains("No space left"),
            "wgemma {args:?}:\n{err}"
        );
        // A failing stderr too: exit 1, nothing to say it with.
        let status = Command::new(env!("CARGO_BIN_EXE_wgemma"))
            .args(["inspect", s(&d.join("missing.gguf"))])
            .stdout(Stdio::null())
            .stderr(
                std::fs::OpenOptions::new()
                    .write(true)
                    .open("/dev/full")
                    .unwrap(),
            )
            .status()
            .unwrap();
        assert_eq!(status.code(), Some(1));
    }
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn server_keys_are_checked_at_start() {
    // Keys with spaces or non-ASCII characters were accepted but could never match. The
    // model path exists (a missing one is refused first, naming the path).
    let d = scratch("keys");
    let m = model_dir(&d, "m", |_| {});
    for key in ["two words", "clé"] {
        refused(
            &["serve", "--model", s(&m), "--api-key", key, "--port", "0"],
            &["--api-key", "visible ASCII"],
        );
    }
}
