//! `wgemma bench` like llama-bench, on the tiny synthetic model with few tokens: a warm-up
//! and `-r N` timed runs per test, a table of mean ± standard deviation by default (pp,
//! tg and the speculative row), a progress line per test, and llama-bench's JSON fields.

use std::process::Command;

fn bench(args: &[&str]) -> (String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_wgemma"))
        .args([
            "bench",
            "--synthetic",
            "tiny",
            "-p",
            "16",
            "-n",
            "4",
            "-r",
            "2",
        ])
        .args(args)
        .env("XDG_RUNTIME_DIR", std::env::temp_dir())
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert!(out.status.success(), "{stdout}\n{stderr}");
    (stdout, stderr)
}

/// `12.34 ± 0.56`
fn is_mean_sd(cell: &str) -> bool {
    let Some((mean, sd)) = cell.split_once(" ± ") else {
        return false;
    };
    [mean, sd].iter().all(|v| {
        v.parse::<f64>().is_ok_and(|x| x >= 0.0) && v.split('.').nth(1).map(str::len) == Some(2)
    })
}

#[test]
fn the_table_has_one_line_per_test() {
    let (stdout, stderr) = bench(&[]);
    let rows: Vec<Vec<&str>> = stdout
        .lines()
        .filter(|l| l.starts_with('|'))
        .map(|l| l.trim_matches('|').split('|').map(str::trim).collect())
        .collect();
    assert_eq!(
        rows[0],
        ["model", "dtype", "test", "t/s", "vs tg4"],
        "{stdout}"
    );
    assert!(
        rows[1]
            .iter()
            .all(|c| c.starts_with('-') || c.ends_with(':')),
        "{stdout}"
    );
    let tests: Vec<&str> = rows[2..].iter().map(|r| r[2]).collect();
    assert_eq!(
        tests,
        ["pp16", "tg4", "tg4 spec k=2 p=1.00 oracle"],
        "{stdout}"
    );
    for r in &rows[2..] {
        assert_eq!(r[0], "tiny (synthetic)");
        assert_eq!(r[1], "q4");
        assert!(is_mean_sd(r[3]), "{r:?}");
    }
    assert!(rows[4][4].starts_with('x'), "{stdout}");
    // The adapter above, the roofline below; no 30-field dump.
    assert!(stdout.starts_with("wgemma bench on "), "{stdout}");
    assert!(
        stdout.contains("2 timed runs per test after a warm-up"),
        "{stdout}"
    );
    assert!(stdout.contains("decode roofline"), "{stdout}");
    assert!(!stdout.contains("coop_16x16_f16"), "{stdout}");
    // A progress line per test on stderr, before and after.
    for test in tests {
        assert!(
            stderr.contains(&format!("bench: {test}: warm-up and 2 timed runs")),
            "{stderr}"
        );
    }
}

#[test]
fn json_carries_every_run_and_the_browser_profile() {
    let (stdout, _) = bench(&[
        "--json",
        "--webgpu-limits",
        "--draft-tokens",
        "0",
        "-d",
        "3",
    ]);
    let v: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    let tests = v["tests"].as_array().unwrap();
    let names: Vec<&str> = tests.iter().map(|t| t["test"].as_str().unwrap()).collect();
    assert_eq!(names, ["pp16", "tg4 @ d3"], "{v}");
    for t in tests {
        let samples = t["samples_ts"].as_array().unwrap();
        assert_eq!(samples.len(), 2, "{t}");
        let mean = samples.iter().map(|s| s.as_f64().unwrap()).sum::<f64>() / 2.0;
        assert!(
            (t["avg_ts"].as_f64().unwrap() - mean).abs() <= 1e-9 * mean,
            "{t}"
        );
        assert!(t["stddev_ts"].as_f64().unwrap() >= 0.0);
    }
    assert_eq!(v["prefill_tokens_per_s"], tests[0]["avg_ts"]);
    assert_eq!(v["decode_tokens_per_s"], tests[1]["avg_ts"]);
    assert_eq!(v["webgpu_limits"], true);
    let features = v["features"].as_str().unwrap();
    assert!(
        !features.contains("COHERENT") && !features.contains("COOPERATIVE"),
        "{features}"
    );
    assert_eq!(v["coop_16x16_f16"], false);
    // The decode test's greedy tokens (its context's first, then 4), which the browser
    // package's bench is checked against.
    let greedy = v["greedy_tokens"].as_array().unwrap();
    assert_eq!(greedy.len(), 5, "{v}");
    assert!(greedy.iter().all(|t| t.as_u64().unwrap() < 4096), "{v}");
}

/// The plan flags reach the model's `PlanOptions`: with the K/V append as its own kernel
/// (`--no-fold-kv-append`) and every norm a kernel (`--norm-prologue-rows 0`) a decode
/// token takes more dispatches than with the defaults, and `--trace-barriers` prints each
/// dispatch to stderr (the default prints none).
#[test]
fn plan_flags_change_the_plan_and_trace_prints_dispatches() {
    let dispatches = |extra: &[&str]| {
        let mut args = vec!["--draft-tokens", "0", "--json"];
        args.extend_from_slice(extra);
        let (stdout, stderr) = bench(&args);
        let v: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
        (v["dispatches_per_token"].as_f64().unwrap(), stderr)
    };
    let (default, quiet) = dispatches(&[]);
    let (unfused, traced) = dispatches(&[
        "--no-fold-kv-append",
        "--norm-prologue-rows",
        "0",
        "--trace-barriers",
    ]);
    assert!(
        unfused > default,
        "{unfused} vs {default} dispatches per token"
    );
    assert!(!quiet.contains("dispatch "), "{quiet}");
    assert!(
        traced.lines().any(|l| l.starts_with("dispatch ")),
        "{traced}"
    );
}

/// `--compare-fusions` measures every fusion variant twice on one load (in order, then in
/// reverse) and reports the mean and both runs; the q_norm + RoPE fold takes one dispatch
/// per KV-shared layer (the tiny model has 2) off the token, and `--no-fold-q-norm-rope`
/// puts them back.
#[test]
fn compare_fusions_runs_each_variant_both_ways() {
    let (stdout, _) = bench(&["--draft-tokens", "0", "--compare-fusions", "--json"]);
    let v: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    for name in ["unfused", "fold_only", "fold_q"] {
        let runs = v[format!("{name}_decode_tokens_per_s_runs")]
            .as_array()
            .unwrap_or_else(|| panic!("{name}: no runs in {v}"));
        assert_eq!(runs.len(), 2, "{name}: {runs:?}");
        let mean = v[format!("{name}_decode_tokens_per_s")].as_f64().unwrap();
        let sum: f64 = runs.iter().map(|r| r.as_f64().unwrap()).sum();
        assert!(
            mean > 0.0 && (mean - sum / 2.0).abs() < 1e-9,
            "{name}: {mean} {runs:?}"
        );
    }
    let per_token = |name: &str| v[format!("{name}_dispatches_per_token")].as_f64().unwrap();
    assert_eq!(per_token("fold_only") - per_token("fold_q"), 2.0, "{v}");
    let dispatches = |extra: &[&str]| {
        let mut args = vec!["--draft-tokens", "0", "--json"];
        args.extend_from_slice(extra);
        let (stdout, _) = bench(&args);
        let v: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
        v["dispatches_per_token"].as_f64().unwrap()
    };
    assert_eq!(
        dispatches(&["--no-fold-q-norm-rope"]) - dispatches(&[]),
        2.0,
        "one norm_rope dispatch back per KV-shared layer"
    );
}

/// `--parallel N`: N batched plain streams, then N speculative streams at each acceptance
/// rate, their tokens equal to the plain streams' (`matches_plain`), the asked acceptance
/// met exactly (every draft the stream's own token, or none).
#[test]
fn parallel_compares_batched_plain_and_speculative_streams() {
    let (stdout, stderr) = bench(&[
        "--json",
        "--parallel",
        "3",
        "--draft-tokens",
        "2",
        "--acceptance",
        "1.0,0.0",
    ]);
    let v: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(v["parallel"], 3, "{v}");
    let batched = v["batched_tokens_per_s"]["avg_ts"].as_f64().unwrap();
    assert!(batched > 0.0, "{v}");
    let spec = v["speculative"].as_array().unwrap();
    assert_eq!(spec.len(), 2, "{v}");
    for (s, p) in spec.iter().zip([1.0, 0.0]) {
        assert_eq!(s["acceptance"], p, "{s}");
        assert_eq!(s["matches_plain"], true, "{s}");
        assert_eq!(s["tokens_per_s"]["samples_ts"].as_array().unwrap().len(), 2);
        assert!(s["drafted"].as_u64().unwrap() > 0, "{s}");
    }
    assert_eq!(spec[0]["acceptance_rate"], 1.0, "{}", spec[0]);
    assert_eq!(spec[1]["acceptance_rate"], 0.0, "{}", spec[1]);
    let names: Vec<&str> = v["tests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["test"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "tg4 x3 batched",
            "spec x3 k=2 p=1.00 (drafter)",
            "spec x3 k=2 p=0.00 (drafter)"
        ]
    );
    assert!(stderr.contains("tg4 x3 batched"), "{stderr}");
    // Refused with a reason, not ignored.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_wgemma"))
        .args([
            "bench",
            "--synthetic",
            "tiny",
            "--parallel",
            "3",
            "--draft-tokens",
            "0",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("--parallel"), "{err}");
}
