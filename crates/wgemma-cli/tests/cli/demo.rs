//! `wgemma demo` through the binary: the shipped trained pair streams its text, both decodes
//! are warmed up and timed several times (median and range), the speedup is stated only
//! when it is outside the spread, the greedy speculative output is identical to plain, and
//! a missing artifact is refused with a message naming it.

use crate::common::wgemma;

#[test]
fn demo_runs_the_shipped_pair_and_prints_text_and_speedup() {
    let out = wgemma(&["demo", "--max-new-tokens", "8", "-r", "2", "--json"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // JSON alone on stdout.
    assert_eq!(stdout.lines().count(), 1, "{stdout}");
    let d: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(d["prompt_text"], "And Jesus said unto them,");
    assert_eq!(d["identical"], true);
    assert_eq!(d["draft_tokens"], 2);
    assert_eq!(d["repetitions"], 2);
    let plain = d["plain"]["text"].as_str().unwrap();
    assert_eq!(plain, d["speculative"]["text"].as_str().unwrap());
    // The trained target answers in words (its first greedy words, measured).
    assert!(plain.starts_with(" What have I done"), "{plain:?}");
    let s = &d["speculative"]["stats"];
    assert!(s["drafted"].as_u64().unwrap() > 0);
    assert!(s["accepted"].as_u64().unwrap() > 0, "{s}");
    assert!(d["speedup"].as_f64().unwrap() > 0.0);
    for kind in ["plain", "speculative"] {
        let runs = &d[format!("{kind}_decode_tokens_per_s")];
        assert_eq!(runs["samples_ts"].as_array().unwrap().len(), 2, "{runs}");
        let (lo, mid, hi) = (
            runs["min_ts"].as_f64().unwrap(),
            runs["median_ts"].as_f64().unwrap(),
            runs["max_ts"].as_f64().unwrap(),
        );
        assert!(0.0 < lo && lo <= mid && mid <= hi, "{runs}");
    }
    let verdict = d["verdict"].as_str().unwrap();
    assert_eq!(
        verdict.starts_with("no measurable speedup"),
        !d["measurable"].as_bool().unwrap(),
        "{verdict}"
    );
}

#[test]
fn demo_text_says_what_it_does_and_what_it_measured() {
    let out = wgemma(&["demo", "-n", "8", "-r", "2"]);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout}\n{stderr}");
    // Progress on stderr while it loads and warms up; one line per timed run.
    assert!(stderr.contains("loading the pair"), "{stderr}");
    assert!(
        stderr.contains("warming up speculative decoding"),
        "{stderr}"
    );
    assert_eq!(stderr.matches("timed run ").count(), 2, "{stderr}");
    // The shape of stdout: header, prompt, the streamed plain text, the medians, the verdict.
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(lines[0].starts_with("wgemma demo on "), "{stdout}");
    let at = |prefix: &str| {
        lines
            .iter()
            .position(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no line starting {prefix:?}:\n{stdout}"))
    };
    let prompt = at("--- prompt");
    let plain = at("--- plain decoding (streamed");
    let speed = at("--- decode speed, warmed up: median of 2 runs each");
    assert!(prompt < plain && plain < speed, "{stdout}");
    assert!(
        lines[plain + 1].starts_with(" What have I done"),
        "{stdout}"
    );
    assert!(lines[at("plain       | ")].contains("tok/s"), "{stdout}");
    assert!(
        lines[at("speculative | ")].contains("acceptance"),
        "{stdout}"
    );
    let verdict = lines[at("speedup     | ")];
    assert!(
        verdict.contains("no measurable speedup")
            || verdict.contains(" faster")
            || verdict.contains("(slower)"),
        "{verdict}"
    );
    assert!(
        stdout.contains("outputs identical: 8 tokens in every run"),
        "{stdout}"
    );
    // A legend under the figures says what they are.
    for term in [
        "(acceptance: ",
        "tok/round: ",
        "adaptive drafts: ",
        "ttft: ",
    ] {
        assert!(stdout.contains(term), "{term}:\n{stdout}");
    }
    // A software adapter (lavapipe) is named as one, once.
    assert_eq!(
        stderr.matches("is a software adapter").count(),
        usize::from(lines[0].contains("Cpu")),
        "{stderr}"
    );
}

#[test]
fn demo_names_a_missing_artifact() {
    let out = wgemma(&["demo", "--model", "/nonexistent/pair.wgemma"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("/nonexistent/pair.wgemma")
            && err.contains("expected the model artifact")
            && err.contains("no such file"),
        "{err}"
    );
}
