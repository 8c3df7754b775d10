//! The bad-input catalogue (issue 17): bad or edge inputs through the `wgemma` binary,
//! each under a timeout. A refused input must exit non-zero with a message that names
//! what was expected and what was found, and never panic, abort or hang. Every defect the
//! issue lists has a case here; each failed on the code before the fix.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use wgemma::text::tokenizer::tiny_tokenizer_json;

fn golden(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../wgemma/tests/data/golden")
        .join(name)
}

/// A fresh scratch directory for one test.
fn scratch(test: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("wgemma-bad-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

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
fn bad_configs_name_the_field() {
    let d = scratch("config");
    let ids = ["--prompt-ids", "5,17,9"];
    #[allow(clippy::type_complexity)]
    let cases: Vec<(&str, Box<dyn Fn(&mut serde_json::Value)>, &[&str])> = vec![
        // Item 4: sizes allocated before they were checked.
        (
            "vocab",
            Box::new(|c| {
                c["vocab_size"] = 268435456.into();
                c["vocab_size_per_layer_input"] = 268435456.into();
            }),
            &["vocab_size 268435456"],
        ),
        (
            "hidden",
            Box::new(|c| c["hidden_size"] = (1u64 << 30).into()),
            &["hidden_size 1073741824", "host memory"],
        ),
        // 100002 layers (the default pattern ends on a full layer): refused by the
        // checkpoint's PLE table shape before anything that size is allocated.
        (
            "layers",
            Box::new(|c| {
                c["num_hidden_layers"] = 100002.into();
                c["layer_types"] = serde_json::Value::Null;
            }),
            &["embed_tokens_per_layer", "[512, 3200064]"],
        ),
        // Item 11: no config field named.
        (
            "window",
            Box::new(|c| c["sliding_window"] = 0.into()),
            &["sliding_window", "found 0"],
        ),
        (
            "softcap",
            Box::new(|c| c["final_logit_softcapping"] = 0.0.into()),
            &["final_logit_softcapping", "found 0"],
        ),
        (
            "heads",
            Box::new(|c| c["num_key_value_heads"] = 3.into()),
            &["divisor"],
        ),
        (
            "head_dim",
            Box::new(|c| c["head_dim"] = 0.into()),
            &["head_dim", "found 0"],
        ),
        (
            "theta",
            Box::new(|c| c["rope_parameters"]["sliding_attention"]["rope_theta"] = 0.0.into()),
            &["rope_theta"],
        ),
        (
            "missing",
            Box::new(|c| {
                c.as_object_mut().unwrap().remove("vocab_size");
            }),
            &["vocab_size"],
        ),
        (
            "activation",
            Box::new(|c| c["hidden_activation"] = "relu".into()),
            &["hidden_activation", "relu"],
        ),
    ];
    for (name, edit, needles) in cases {
        let m = model_dir(&d, name, edit);
        let mut args = vec!["logits", "--model", s(&m)];
        args.extend(ids);
        refused(&args, needles);
        if name == "layers" {
            // With a long context the KV caches alone pass host memory: refused by size,
            // before the weights are read.
            args.extend(["--context", "1000000"]);
            refused(&args, &["100002 layers", "host memory", "KV caches"]);
        }
        if name == "vocab" {
            refused(&["load", "--model", s(&m)], needles);
            let out = d.join("vocab.wgemma");
            // convert streams row blocks: the checkpoint's shape is what it refuses.
            refused(
                &["convert", "--model", s(&m), "--out", s(&out)],
                &["embed_tokens", "[268435456, 64]"],
            );
        }
    }
    let m = model_dir(&d, "notjson", |_| {});
    std::fs::write(m.join("config.json"), "{\"model_type\": ").unwrap();
    refused(
        &["logits", "--model", s(&m), "--prompt-ids", "1"],
        &["valid JSON"],
    );
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn bad_tokenizers_weights_and_paths() {
    let d = scratch("files");
    let ids = "5,17,9";
    // Item 2: a truncated tokenizer.json panicked inside the tokenizers crate, even with
    // --prompt-ids, and convert stored it unchecked.
    for (name, json, needle) in [
        ("truncated", "{\"decoder\": {", "valid JSON"),
        ("array", "[1, 2]", "a JSON object"),
        ("nomodel", "{\"decoder\": null}", "`model`"),
    ] {
        let m = model_dir(&d, name, |_| {});
        std::fs::write(m.join("tokenizer.json"), json).unwrap();
        refused(
            &[
                "generate",
                "--model",
                s(&m),
                "--prompt-ids",
                ids,
                "--max-new-tokens",
                "2",
            ],
            &["tokenizer.json", needle],
        );
        let out = d.join(format!("{name}.wgemma"));
        refused(
            &["convert", "--model", s(&m), "--out", s(&out)],
            &["tokenizer.json", needle],
        );
        assert!(!out.exists());
    }

    // Item 6: NaN / Inf weights gave token 0 or logits of -30 with exit 0.
    let norm = "model.language_model.norm.weight";
    let q = "model.language_model.layers.1.self_attn.q_proj.weight";
    for (name, tensor, value, dtype) in [
        ("nan_norm_q4", norm, f32::NAN, "q4"),
        ("inf_q_f32", q, f32::INFINITY, "f32"),
        ("nan_q_f16", q, f32::NAN, "f16"),
        ("neg_inf_q_q4", q, f32::NEG_INFINITY, "q4"),
    ] {
        let m = model_dir(&d, name, |_| {});
        poison(&m, tensor, 3, value);
        // The loader names the tensor without the checkpoint's prefix.
        let short = tensor.trim_start_matches("model.language_model.");
        refused(
            &[
                "logits",
                "--model",
                s(&m),
                "--prompt-ids",
                ids,
                "--dtype",
                dtype,
            ],
            &[short, "finite"],
        );
        if dtype == "q4" {
            let out = d.join(format!("{name}.wgemma"));
            refused(
                &["convert", "--model", s(&m), "--out", s(&out)],
                &[tensor, "element 3"],
            );
        }
    }

    // Item 9 and 11: a FIFO hung the loader; a directory said "No such device"; a
    // self-symlink said "found nothing".
    let m = model_dir(&d, "fifo", |_| {});
    std::fs::remove_file(m.join("model.safetensors")).unwrap();
    let status = Command::new("mkfifo")
        .arg(m.join("model.safetensors"))
        .status()
        .unwrap();
    assert!(status.success());
    refused(
        &["logits", "--model", s(&m), "--prompt-ids", ids],
        &["FIFO"],
    );
    refused(
        &[
            "logits",
            "--model",
            s(&m.join("model.safetensors")),
            "--prompt-ids",
            ids,
        ],
        &["FIFO"],
    );
    let m = model_dir(&d, "dirshard", |_| {});
    std::fs::remove_file(m.join("model.safetensors")).unwrap();
    std::fs::create_dir(m.join("model.safetensors")).unwrap();
    refused(
        &["logits", "--model", s(&m), "--prompt-ids", ids],
        &["a directory"],
    );
    let link = d.join("loop");
    #[cfg(unix)]
    std::os::unix::fs::symlink(&link, &link).unwrap();
    refused(
        &["logits", "--model", s(&link), "--prompt-ids", ids],
        &["symlink loop"],
    );
    let dangling = d.join("dangling");
    #[cfg(unix)]
    std::os::unix::fs::symlink(d.join("nowhere"), &dangling).unwrap();
    refused(
        &["logits", "--model", s(&dangling), "--prompt-ids", ids],
        &["dangling symlink"],
    );
    refused(
        &[
            "logits",
            "--model",
            s(&d.join("nothing")),
            "--prompt-ids",
            ids,
        ],
        &["found nothing"],
    );
    let empty = d.join("empty");
    std::fs::create_dir(&empty).unwrap();
    std::fs::write(empty.join("config.json"), "{}").unwrap();
    refused(
        &["logits", "--model", s(&empty), "--prompt-ids", ids],
        &["*.safetensors"],
    );
    let m = model_dir(&d, "notok", |_| {});
    std::fs::remove_file(m.join("tokenizer.json")).unwrap();
    refused(
        &["generate", "--model", s(&m), "--prompt", "hello"],
        &["tokenizer.json"],
    );
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn convert_keeps_its_inputs_and_leaves_no_partial_file() {
    let d = scratch("convert");
    let m = model_dir(&d, "m", |_| {});
    // Item 8: `--out d/model.safetensors` destroyed the input; `--out /dev/full` replaced
    // the device node with a regular file.
    let before = std::fs::read(m.join("model.safetensors")).unwrap();
    refused(
        &[
            "convert",
            "--model",
            s(&m),
            "--out",
            s(&m.join("model.safetensors")),
        ],
        &["model.safetensors", "destroy"],
    );
    refused(
        &[
            "convert",
            "--model",
            s(&m),
            "--out",
            s(&m.join("more.safetensors")),
        ],
        &["shards"],
    );
    assert_eq!(std::fs::read(m.join("model.safetensors")).unwrap(), before);
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        refused(
            &["convert", "--model", s(&m), "--out", "/dev/full"],
            &["/dev/full", "a device node"],
        );
        assert!(std::fs::metadata("/dev/full")
            .unwrap()
            .file_type()
            .is_char_device());
    }
    refused(
        &["convert", "--model", s(&m), "--out", s(&d)],
        &["a directory"],
    );
    // Item 11: an option that was silently ignored.
    refused(
        &[
            "convert",
            "--model",
            s(&m),
            "--out",
            s(&d.join("x.wgemma")),
            "--quant",
            "f16",
            "--group-size",
            "64",
        ],
        &["--group-size 64", "--quant f16"],
    );

    // Item 7: the manifest's configs were covered by no checksum.
    let file = d.join("m.wgemma");
    ok(&["convert", "--model", s(&m), "--out", s(&file)]);
    let bytes = std::fs::read(&file).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header = String::from_utf8(bytes[8..8 + n].to_vec()).unwrap();
    let edited = header.replace(
        "\\\"final_logit_softcapping\\\":30.0",
        "\\\"final_logit_softcapping\\\":10.0",
    );
    assert_ne!(edited, header, "the softcap is in the manifest");
    let mut b = bytes.clone();
    b[8..8 + n].copy_from_slice(edited.as_bytes());
    let tampered = d.join("tampered.wgemma");
    std::fs::write(&tampered, &b).unwrap();
    refused(&["inspect", s(&tampered)], &["XXH3-128 of the header"]);
    refused(
        &[
            "logits",
            "--model",
            s(&tampered),
            "--prompt-ids",
            "1,2",
            "--no-verify",
        ],
        &["XXH3-128 of the header"],
    );
    let cut = d.join("cut.wgemma");
    std::fs::write(&cut, &bytes[..bytes.len() - 10]).unwrap();
    refused(&["inspect", s(&cut)], &["truncated"]);
    refused(
        &[
            "logits",
            "--model",
            s(&m.join("config.json")),
            "--prompt-ids",
            "1",
        ],
        &["header length"],
    );
    let names: Vec<String> = std::fs::read_dir(&d)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(names.iter().all(|n| !n.contains("partial")), "{names:?}");
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

#[test]
#[cfg(unix)]
fn ctrl_c_during_convert_removes_the_partial_file() {
    // Item 8: Ctrl-C during convert left its hidden `.partial` file behind. The tiny
    // synthetic shape converts for long enough to be interrupted mid-write.
    let d = scratch("ctrlc");
    let src = d.join("tiny");
    ok(&["synth-checkpoint", "--shape", "tiny", "--out", s(&src)]);
    let out = d.join("out");
    std::fs::create_dir(&out).unwrap();
    let file = out.join("tiny.wgemma");
    for attempt in 0..20 {
        let mut child = Command::new(env!("CARGO_BIN_EXE_wgemma"))
            .args([
                "convert",
                "--model",
                s(&src),
                "--out",
                s(&file),
                "--quant",
                "f32",
            ])
            .env("XDG_RUNTIME_DIR", std::env::temp_dir())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let start = Instant::now();
        let partial = loop {
            let found = std::fs::read_dir(&out)
                .unwrap()
                .filter_map(|e| e.ok())
                .any(|e| e.file_name().to_string_lossy().contains("partial"));
            if found || start.elapsed() > LIMIT {
                break found;
            }
            if child.try_wait().unwrap().is_some() {
                break false;
            }
            std::thread::sleep(Duration::from_millis(2));
        };
        if !partial {
            // Finished before it was seen: too fast to interrupt this time.
            let _ = child.wait();
            let _ = std::fs::remove_file(&file);
            eprintln!("attempt {attempt}: convert finished before it could be interrupted");
            continue;
        }
        let kill = Command::new("kill")
            .args(["-INT", &child.id().to_string()])
            .status()
            .unwrap();
        assert!(kill.success());
        let status = child.wait().unwrap();
        let left: Vec<_> = std::fs::read_dir(&out)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        if status.success() {
            // The signal came after the rename: a complete artifact, nothing partial.
            assert!(
                left.iter()
                    .all(|n| !n.to_string_lossy().contains("partial")),
                "{left:?}"
            );
            let _ = std::fs::remove_file(&file);
            continue;
        }
        assert!(left.is_empty(), "an interrupted convert left {left:?}");
        std::fs::remove_dir_all(&d).unwrap();
        return;
    }
    panic!("convert could not be interrupted mid-write in 20 attempts");
}

// ---- Hostile input, round 3 (issue 30): each case failed on 698cdad. ----

/// Adds an f32 tensor `name` of `n` zeros to the safetensors file at `path`.
fn add_tensor(path: &Path, name: &str, n: usize) {
    let bytes = std::fs::read(path).unwrap();
    let len = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let mut header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + len]).unwrap();
    let data = &bytes[8 + len..];
    header[name] = serde_json::json!({
        "dtype": "F32", "shape": [n], "data_offsets": [data.len(), data.len() + 4 * n]
    });
    let mut text = header.to_string();
    while text.len() % 8 != 0 {
        text.push(' ');
    }
    let mut out = (text.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(text.as_bytes());
    out.extend_from_slice(data);
    out.extend(std::iter::repeat_n(0u8, 4 * n));
    std::fs::write(path, out).unwrap();
}

fn gguf_fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../wgemma/tests/data/gguf")
        .join(name)
}

/// A copy of the e2b-like GGUF with the f32 value of metadata key `key` set to `value`.
fn gguf_with_float(dir: &Path, key: &str, value: f32) -> PathBuf {
    let mut bytes = std::fs::read(gguf_fixture("e2b_like.f32.gguf")).unwrap();
    let at = bytes
        .windows(key.len())
        .position(|w| w == key.as_bytes())
        .unwrap_or_else(|| panic!("{key} in the fixture"));
    let value_at = at + key.len() + 4;
    assert_eq!(
        bytes[at + key.len()..value_at],
        6u32.to_le_bytes(),
        "f32 {key}"
    );
    bytes[value_at..value_at + 4].copy_from_slice(&value.to_le_bytes());
    let path = dir.join(format!("{key}-{value}.gguf"));
    std::fs::write(&path, bytes).unwrap();
    path
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
fn checkpoints_cannot_reach_outside_their_directory() {
    // model.safetensors.index.json named ../ and absolute paths, and the loader (and
    // convert, into the artifact) opened them.
    let d = scratch("confine");
    let outside = d.join("outside.safetensors");
    let m = model_dir(&d, "m", |_| {});
    std::fs::rename(m.join("model.safetensors"), &outside).unwrap();
    let bytes = std::fs::read(&outside).unwrap();
    let len = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + len]).unwrap();
    for target in [
        "../outside.safetensors".to_string(),
        s(&outside).to_string(),
    ] {
        let map: serde_json::Map<String, serde_json::Value> = header
            .as_object()
            .unwrap()
            .keys()
            .filter(|k| *k != "__metadata__")
            .map(|k| (k.clone(), target.clone().into()))
            .collect();
        std::fs::write(
            m.join("model.safetensors.index.json"),
            serde_json::json!({"weight_map": map}).to_string(),
        )
        .unwrap();
        refused(
            &["logits", "--model", s(&m), "--prompt-ids", "5,17,9"],
            &["inside the checkpoint directory", &target],
        );
        let out = d.join("out.wgemma");
        refused(
            &["convert", "--model", s(&m), "--out", s(&out)],
            &["inside the checkpoint directory"],
        );
        assert!(!out.exists());
    }
    // A shard that is a symlink out of the directory (no index).
    #[cfg(unix)]
    {
        std::fs::remove_file(m.join("model.safetensors.index.json")).unwrap();
        std::os::unix::fs::symlink(&outside, m.join("model.safetensors")).unwrap();
        refused(
            &["logits", "--model", s(&m), "--prompt-ids", "5,17,9"],
            &["inside the checkpoint directory", "resolving to"],
        );
        // Hugging Face's cache layout (snapshots/<rev>/ -> ../../blobs/) still loads.
        let repo = d.join("hub");
        let (blobs, snap) = (repo.join("blobs"), repo.join("snapshots").join("abc"));
        std::fs::create_dir_all(&blobs).unwrap();
        std::fs::create_dir_all(&snap).unwrap();
        std::fs::copy(&outside, blobs.join("0123")).unwrap();
        for f in ["config.json", "generation_config.json", "tokenizer.json"] {
            std::fs::copy(m.join(f), snap.join(f)).unwrap();
        }
        std::os::unix::fs::symlink("../../blobs/0123", snap.join("model.safetensors")).unwrap();
        ok(&["logits", "--model", s(&snap), "--prompt-ids", "5,17,9"]);
    }
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn unexpected_tensors_are_named() {
    // A checkpoint with more layers' weights than its config loaded without a word.
    let d = scratch("extra");
    let m = model_dir(&d, "m", |_| {});
    let extra = "model.language_model.layers.9.mlp.gate_proj.weight";
    add_tensor(&m.join("model.safetensors"), extra, 8);
    let args = ["logits", "--model", s(&m), "--prompt-ids", "5,17,9"];
    refused(&args, &[extra, "--allow-extra-tensors"]);
    let r = run_with(
        &[&args[..], &["--allow-extra-tensors"]].concat(),
        LIMIT,
        false,
    );
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert!(
        r.stderr.contains("warning") && r.stderr.contains(extra),
        "{}",
        r.stderr
    );
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn gguf_floats_and_metadata_sizes_are_checked() {
    let d = scratch("gguf3");
    // A softcap of NaN or -1 meant "no softcap" (config.json refuses both); NaN eps and
    // RoPE bases reached the config as null.
    for (key, value, needle) in [
        (
            "gemma4.final_logit_softcapping",
            f32::NAN,
            "final_logit_softcapping",
        ),
        (
            "gemma4.final_logit_softcapping",
            -1.0,
            "final_logit_softcapping",
        ),
        (
            "gemma4.attention.layer_norm_rms_epsilon",
            f32::NAN,
            "rms_norm_eps",
        ),
        ("gemma4.rope.freq_base", f32::INFINITY, "rope_theta"),
    ] {
        let path = gguf_with_float(&d, key, value);
        refused(&["inspect", s(&path)], &[key, needle]);
    }
    // Metadata arrays cost ~32x the file in memory: 4M one-byte items.
    let n: u64 = 4 << 20;
    let mut bytes = b"GGUF".to_vec();
    bytes.extend(3u32.to_le_bytes());
    bytes.extend(0u64.to_le_bytes());
    bytes.extend(1u64.to_le_bytes());
    bytes.extend(3u64.to_le_bytes());
    bytes.extend(b"big");
    bytes.extend(9u32.to_le_bytes());
    bytes.extend(0u32.to_le_bytes());
    bytes.extend(n.to_le_bytes());
    bytes.extend(std::iter::repeat_n(1u8, n as usize));
    let path = d.join("amplified.gguf");
    std::fs::write(&path, bytes).unwrap();
    refused(&["inspect", s(&path)], &["`big`", "bytes in memory"]);
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn counts_are_checked_before_allocation() {
    let d = scratch("counts");
    let m = model_dir(&d, "m", |_| {});
    let max = u64::MAX.to_string();
    // demo did not check its counts (a capacity overflow; a 4.4 TB allocation abort on
    // the speculative path); bench --prefill-chunk 0 printed a debug dump.
    refused(
        &["demo", "--synthetic", "--max-new-tokens", &max],
        &["--max-new-tokens", "positions"],
    );
    refused(
        &["demo", "--synthetic", "--draft-tokens", "4000000000"],
        &["--draft-tokens", "1..=8"],
    );
    refused(
        &["bench", "--synthetic", "tiny", "--prefill-chunk", "0"],
        &["--prefill-chunk", "at least 1"],
    );
    refused(
        &["bench", "--synthetic", "tiny", "--prompt-len", &max],
        &["--prompt-len", "2^64"],
    );
    // A prompt longer than the context was blamed on --max-new-tokens.
    refused(
        &generate(
            s(&m),
            &[
                "--prompt-ids",
                "1,2,3,4,5,6,7,8,9,10",
                "--context",
                "8",
                "--max-new-tokens",
                "2",
            ],
        ),
        &["prompt: expected at most 7 tokens", "found 10"],
    );
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn runaway_chat_templates_end_in_errors() {
    // Nested loops hung `generate --chat`; unbounded output aborted on a 9.7 GB allocation.
    let d = scratch("template");
    for (name, template) in [
        (
            "loops",
            "{% for a in range(100000) %}{% for b in range(100000) %}{% for c in \
             range(100000) %}{% endfor %}{% endfor %}{% endfor %}",
        ),
        (
            "output",
            "{% for a in range(100000) %}{% for b in range(100000) %}xxxxxxxx{% endfor %}\
             {% endfor %}",
        ),
        (
            "growth",
            "{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ \
             ns.s %}{% endfor %}{{ ns.s }}",
        ),
    ] {
        let m = model_dir(&d, name, |_| {});
        std::fs::write(m.join("chat_template.jinja"), template).unwrap();
        refused(
            &generate(
                s(&m),
                &["--prompt", "hello", "--chat", "--max-new-tokens", "2"],
            ),
            &["chat template"],
        );
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
