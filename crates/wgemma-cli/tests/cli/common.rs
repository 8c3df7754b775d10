//! Helpers shared by the CLI's integration tests: running the binary, fixtures, scratch
//! directories.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// Runs `wgemma args` with `stdin` as its standard input and `env` added to its environment.
pub fn wgemma_with(args: &[&str], stdin: &str, env: &[(&str, &str)]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_wgemma"))
        .args(args)
        .env("XDG_RUNTIME_DIR", std::env::temp_dir())
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

/// Runs `wgemma args` with nothing on its standard input.
pub fn wgemma(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_wgemma"))
        .args(args)
        .env("XDG_RUNTIME_DIR", std::env::temp_dir())
        .output()
        .expect("running wgemma")
}

/// A golden fixture of the library's tests.
pub fn golden(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../wgemma/tests/data/golden")
        .join(name)
}

/// A fresh scratch directory for one test (named by the test, so tests never share one).
pub fn scratch(test: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("wgemma-cli-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A path as the `&str` an argument list takes.
pub fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}
