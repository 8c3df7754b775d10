//! Helpers shared by the CLI's integration tests (`mod common;` in each).

use std::io::Write as _;
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
