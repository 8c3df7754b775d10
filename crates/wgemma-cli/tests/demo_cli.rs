//! `wgemma demo` through the binary: the shipped trained pair writes text, the greedy
//! speculative output is identical to plain, and the stats carry acceptance and the speedup;
//! a missing artifact is refused with a message naming it.

use std::process::Command;

fn wgemma(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_wgemma"))
        .args(args)
        .env("XDG_RUNTIME_DIR", std::env::temp_dir())
        .output()
        .unwrap()
}

#[test]
fn demo_runs_the_shipped_pair_and_prints_text_and_speedup() {
    let out = wgemma(&["demo", "--max-new-tokens", "8", "--json"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let d: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(d["prompt_text"], "And Jesus said unto them,");
    assert_eq!(d["identical"], true);
    assert_eq!(d["draft_tokens"], 3);
    let plain = d["plain"]["text"].as_str().unwrap();
    assert_eq!(plain, d["speculative"]["text"].as_str().unwrap());
    // The trained target answers in words (its first greedy words, measured).
    assert!(plain.starts_with(" What have I done"), "{plain:?}");
    let s = &d["speculative"]["stats"];
    assert!(s["drafted"].as_u64().unwrap() > 0);
    assert!(s["accepted"].as_u64().unwrap() > 0, "{s}");
    assert!(d["speedup"].as_f64().unwrap() > 0.0);
}

#[test]
fn demo_names_a_missing_artifact() {
    let out = wgemma(&["demo", "--model", "/nonexistent/pair.wgemma"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("/nonexistent/pair.wgemma") && err.contains("expected the model artifact"),
        "{err}"
    );
}
