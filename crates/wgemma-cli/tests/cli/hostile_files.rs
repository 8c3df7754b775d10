//! Hostile input round 4 (issue 46): the files the CLI writes and reads. Nothing on disk is
//! overwritten or left unloadable without `--force`, a file's metadata cannot drive the
//! terminal, and a prompt file is read to a bound.

use crate::common::wgemma_with;
use std::path::{Path, PathBuf};

fn golden(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../wgemma/tests/data")
        .join(name)
}

fn scratch(test: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("wgemma-hostile-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// (exit code, stdout, stderr) of `wgemma args`.
fn run(args: &[&str]) -> (Option<i32>, String, String) {
    let out = wgemma_with(args, "", &[]);
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A copy of the e2b_like checkpoint.
fn checkpoint(root: &Path) -> PathBuf {
    let d = root.join("ckpt");
    std::fs::create_dir_all(&d).unwrap();
    for f in ["config.json", "model.safetensors", "generation_config.json"] {
        std::fs::copy(golden("golden/e2b_like").join(f), d.join(f)).unwrap();
    }
    d
}

#[test]
fn convert_writes_no_file_of_a_checkpoint_and_over_no_output_without_force() {
    let d = scratch("convert");
    let m = checkpoint(&d);
    // Into the checkpoint's own files: a new index, tokenizer or generation config there
    // left the checkpoint unloadable.
    for name in [
        "model.safetensors.index.json",
        "tokenizer.json",
        "generation_config.json",
    ] {
        let out = m.join(name);
        let before = std::fs::read(&out).ok();
        let (code, _, err) = run(&["convert", "--model", s(&m), "--out", s(&out)]);
        assert_ne!(code, Some(0), "{name}");
        assert!(
            err.contains("outside the checkpoint directory") || err.contains("destroy"),
            "{name}: {err}"
        );
        assert_eq!(std::fs::read(&out).ok(), before, "{name} changed");
    }
    assert_eq!(
        std::fs::read_dir(&m).unwrap().count(),
        3,
        "the checkpoint gained a file"
    );
    // Over an existing output: refused and kept, unless --force.
    let out = d.join("m.wgemma");
    std::fs::write(&out, b"someone's file").unwrap();
    let (code, _, err) = run(&[
        "convert",
        "--model",
        s(&m),
        "--out",
        s(&out),
        "--quant",
        "f16",
    ]);
    assert_ne!(code, Some(0));
    assert!(err.contains("--force") && err.contains("m.wgemma"), "{err}");
    assert_eq!(std::fs::read(&out).unwrap(), b"someone's file");
    let (code, _, err) = run(&[
        "convert",
        "--model",
        s(&m),
        "--out",
        s(&out),
        "--quant",
        "f16",
        "--force",
    ]);
    assert_eq!(code, Some(0), "{err}");
    assert_ne!(std::fs::read(&out).unwrap(), b"someone's file");
    // Nothing temporary is left beside it.
    let names: Vec<_> = std::fs::read_dir(&d)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn synth_checkpoint_overwrites_no_directory_without_force() {
    let d = scratch("synth");
    let out = d.join("tiny");
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(out.join("config.json"), b"{\"mine\": true}").unwrap();
    let (code, _, err) = run(&["synth-checkpoint", "--shape", "tiny", "--out", s(&out)]);
    assert_ne!(code, Some(0));
    assert!(err.contains("--force"), "{err}");
    assert_eq!(
        std::fs::read(out.join("config.json")).unwrap(),
        b"{\"mine\": true}"
    );
    let (code, _, err) = run(&[
        "synth-checkpoint",
        "--shape",
        "tiny",
        "--out",
        s(&out),
        "--force",
    ]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.join("model.safetensors").is_file());
    // A new directory appears whole, with nothing temporary beside it.
    let fresh = d.join("fresh");
    let (code, _, err) = run(&["synth-checkpoint", "--shape", "tiny", "--out", s(&fresh)]);
    assert_eq!(code, Some(0), "{err}");
    assert!(fresh.join("config.json").is_file() && fresh.join("model.safetensors").is_file());
    assert_eq!(std::fs::read_dir(&d).unwrap().count(), 2);
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn inspect_escapes_control_characters_of_a_files_metadata() {
    let d = scratch("inspect");
    let mut bytes = std::fs::read(golden("gguf/e2b_like.q4_0.gguf")).unwrap();
    // general.name rewritten, same length, to set the window title and clear the screen.
    let name = b"wgemma-golden-e2b_like";
    let evil = b"\x1b]0;pwned\x07\x1b[2J\x1b[H!!!!!";
    assert_eq!(name.len(), evil.len());
    let at = bytes.windows(name.len()).position(|w| w == name).unwrap();
    bytes[at..at + name.len()].copy_from_slice(evil);
    let file = d.join("evil.gguf");
    std::fs::write(&file, &bytes).unwrap();
    let (code, out, err) = run(&["inspect", s(&file)]);
    assert_eq!(code, Some(0), "{err}");
    assert!(!out.contains('\x1b') && !out.contains('\x07'), "{out:?}");
    assert!(out.contains("\\u{1b}]0;pwned\\u{7}"), "{out}");
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
#[cfg(unix)]
fn a_prompt_file_is_read_to_a_bound() {
    // `generate -f /dev/zero` read until memory ran out.
    let m = golden("golden/e2b_like");
    let (code, _, err) = run(&["generate", "--model", s(&m), "-f", "/dev/zero", "-n", "1"]);
    assert_ne!(code, Some(0));
    assert!(err.contains("at most") && err.contains("--file"), "{err}");
}

#[test]
fn serve_checks_its_flags_before_it_announces_the_port() {
    // A script waiting for the "listening" line saw one from a server about to exit.
    let m = golden("golden/e2b_like");
    for bad in [
        ["--allowed-hosts", "a/b"],
        ["--cors-origins", "app.example"],
        ["--max-connections", "0"],
    ] {
        let mut args = vec!["serve", "--model", s(&m), "--port", "0"];
        args.extend(bad);
        let (code, out, err) = run(&args);
        assert_ne!(code, Some(0), "{bad:?}");
        assert!(!out.contains("listening"), "{bad:?}: {out}");
        assert!(err.contains(bad[0]), "{bad:?}: {err}");
    }
}
