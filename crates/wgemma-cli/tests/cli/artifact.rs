//! The `wgemma` binary on artifacts: convert + inspect + load, outputs identical to the
//! checkpoint directory, and bad artifacts refused with a specific error and a non-zero
//! exit (no panic).

use crate::common::{golden, s, scratch, wgemma};
use std::path::{Path, PathBuf};

fn ok(args: &[&str]) -> String {
    let out = wgemma(args);
    assert!(
        out.status.success(),
        "wgemma {args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Runs a command that must fail; returns its stderr.
fn fails(args: &[&str]) -> String {
    let out = wgemma(args);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "wgemma {args:?} succeeded");
    assert!(
        !stderr.contains("panicked"),
        "wgemma {args:?} panicked:\n{stderr}"
    );
    stderr
}

/// `generate --json` of 8 tokens after `ids` with `assistant` drafting.
fn speculative_json(
    model: &Path,
    assistant: &Path,
    ids: &str,
    extra: &[&str],
) -> serde_json::Value {
    let mut args = vec![
        "generate",
        "--model",
        s(model),
        "--assistant",
        s(assistant),
        "--prompt-ids",
        ids,
        "--max-new-tokens",
        "8",
        "--json",
    ];
    args.extend(extra);
    serde_json::from_str(&ok(&args)).unwrap()
}

fn convert(out: &Path, quant: &str, assistant: bool) {
    let (model, asst) = (golden("e2b_like"), golden("e2b_like_assistant"));
    let mut args = vec![
        "convert",
        "--model",
        s(&model),
        "--out",
        s(out),
        "--quant",
        quant,
    ];
    if assistant {
        args.extend(["--assistant", s(&asst)]);
    }
    ok(&args);
}

#[test]
fn convert_inspect_and_logits_identical_to_the_directory() {
    let d = scratch("roundtrip");
    for (quant, dtype) in [("q4", "q4"), ("f32", "f32")] {
        let file = d.join(format!("e2b_like.{quant}.wgemma"));
        convert(&file, quant, true);
        // No temporary file is left beside the artifact.
        let names: Vec<_> = std::fs::read_dir(&d)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert!(
            names
                .iter()
                .all(|n| !n.to_string_lossy().contains("partial")),
            "{names:?}"
        );
        let json: serde_json::Value =
            serde_json::from_str(&ok(&["inspect", s(&file), "--json"])).unwrap();
        assert_eq!(json["verified"], true);
        assert_eq!(json["manifest"]["version"], 2);
        assert!(json["manifest"]["census"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["op"] == "topk"));
        let text = ok(&["inspect", s(&file)]);
        assert!(
            text.contains("census") && text.contains("checksums    ok"),
            "{text}"
        );

        let dir = golden("e2b_like");
        let ids = "5,17,9,200,3";
        let from_dir = ok(&[
            "logits",
            "--model",
            s(&dir),
            "--dtype",
            dtype,
            "--prompt-ids",
            ids,
            "--all-positions",
        ]);
        let from_file = ok(&[
            "logits",
            "--model",
            s(&file),
            "--prompt-ids",
            ids,
            "--all-positions",
        ]);
        assert_eq!(from_dir, from_file, "{quant}: logits differ");

        let gen = |model: &Path, assistant: &Path| {
            speculative_json(model, assistant, ids, &["--dtype", dtype])
        };
        let a = gen(&dir, &golden("e2b_like_assistant"));
        let b = gen(&file, &file);
        assert_eq!(
            a["tokens"], b["tokens"],
            "{quant}: speculative tokens differ"
        );
        assert!(b["stats"]["peak_rss_mb"].as_f64().unwrap() > 0.0);
    }
    // Asking an artifact for another format is refused.
    let file = d.join("e2b_like.q4.wgemma");
    let err = fails(&[
        "logits",
        "--model",
        s(&file),
        "--dtype",
        "f16",
        "--prompt-ids",
        "1",
    ]);
    assert!(err.contains("q4 (group 32)"), "{err}");
    let load: serde_json::Value = serde_json::from_str(&ok(&[
        "load",
        "--model",
        s(&file),
        "--assistant",
        s(&file),
        "--json",
    ]))
    .unwrap();
    assert_eq!(load["assistant_loaded"], true);
    std::fs::remove_dir_all(&d).unwrap();
}

/// The artifact `bytes` with its JSON header replaced by `json` (padded to 8 bytes).
fn header_replaced(bytes: &[u8], json: &str) -> Vec<u8> {
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let len = json.len().div_ceil(8) * 8;
    let mut b = (len as u64).to_le_bytes().to_vec();
    b.extend(json.as_bytes());
    b.resize(8 + len, b' ');
    b.extend(&bytes[8 + n..]);
    b
}

#[test]
fn bad_artifacts_fail_with_specific_errors_and_a_non_zero_exit() {
    let d = scratch("tamper");
    let good = d.join("good.wgemma");
    convert(&good, "q4", false);
    let bytes = std::fs::read(&good).unwrap();
    let write = |name: &str, b: &[u8]| {
        let p = d.join(name);
        std::fs::write(&p, b).unwrap();
        p
    };
    let logits = |p: &Path| fails(&["logits", "--model", s(p), "--prompt-ids", "1,2"]);

    let cut = write("cut.wgemma", &bytes[..bytes.len() - 100]);
    let err = logits(&cut);
    assert!(
        err.contains("truncated") && err.contains("100 bytes are missing"),
        "{err}"
    );

    // One flipped byte inside a weight: the checksum names the tensor.
    let json: serde_json::Value =
        serde_json::from_str(&ok(&["inspect", s(&good), "--json", "--no-verify"])).unwrap();
    let victim = json["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "target.layers.2.mlp.down_proj.weight.q4_packed")
        .unwrap();
    let at = victim["offset"].as_u64().unwrap() as usize + 7;
    let mut flipped = bytes.clone();
    flipped[at] ^= 1;
    let flipped = write("flipped.wgemma", &flipped);
    let err = logits(&flipped);
    assert!(
        err.contains("target.layers.2.mlp.down_proj.weight.q4_packed") && err.contains("XXH3"),
        "{err}"
    );
    let err = fails(&["inspect", s(&flipped)]);
    assert!(err.contains("down_proj"), "{err}");
    // --no-verify loads it (the structure is intact).
    ok(&[
        "logits",
        "--model",
        s(&flipped),
        "--prompt-ids",
        "1,2",
        "--no-verify",
    ]);

    // Header edits: rewrite the JSON header (padded to 8 bytes).
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    // Edited headers are resealed (their checksum recomputed) so the checks behind the
    // header checksum are reached; an unsealed edit is refused by the checksum itself.
    let with_header = |name: &str, h: &serde_json::Value| {
        let json = wgemma::formats::artifact::writer::reseal_header(&h.to_string());
        write(name, &header_replaced(&bytes, &json))
    };
    let manifest = |h: &serde_json::Value| -> serde_json::Value {
        serde_json::from_str(h["__metadata__"]["wgemma.manifest"].as_str().unwrap()).unwrap()
    };
    let set_manifest = |h: &mut serde_json::Value, m: &serde_json::Value| {
        h["__metadata__"]["wgemma.manifest"] = m.to_string().into();
    };

    let name = "target.layers.0.self_attn.o_proj.weight.q4_packed";
    let mut lie = header.clone();
    let shape = lie[name]["shape"].as_array().unwrap().clone();
    lie[name]["shape"] = serde_json::json!([shape[1], shape[0]]);
    let err = logits(&with_header("shape.wgemma", &lie));
    assert!(err.contains(name) && err.contains("shape"), "{err}");

    let mut v3 = header.clone();
    let mut m = manifest(&v3);
    m["version"] = 3.into();
    set_manifest(&mut v3, &m);
    let err = logits(&with_header("v3.wgemma", &v3));
    assert!(
        err.contains("format version") && err.contains("found 3"),
        "{err}"
    );

    // A config edited in place (item 7 of issue 17: the softcap changed the logits while
    // `inspect` said "checksums ok"): the header checksum refuses it, at load and inspect.
    let mut edited = header.clone();
    let mut m = manifest(&edited);
    m["target"]["config"]["text_config"]["final_logit_softcapping"] = 10.0.into();
    set_manifest(&mut edited, &m);
    let edited = write(
        "softcap.wgemma",
        &header_replaced(&bytes, &edited.to_string()),
    );
    for err in [
        logits(&edited),
        fails(&["inspect", s(&edited), "--no-verify"]),
    ] {
        assert!(err.contains("XXH3-128 of the header"), "{err}");
    }

    let mut bogus = header.clone();
    let mut m = manifest(&bogus);
    m["census"][0]["route"] = "warp_drive".into();
    set_manifest(&mut bogus, &m);
    let bogus = with_header("route.wgemma", &bogus);
    let err = logits(&bogus);
    assert!(
        err.contains("warp_drive") && err.contains("unknown to wgemma"),
        "{err}"
    );

    let err = fails(&["inspect", s(&d.join("missing.wgemma"))]);
    assert!(err.contains("missing.wgemma"), "{err}");
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn a_failed_convert_leaves_no_file() {
    let d = scratch("failed");
    let out = d.join("x.wgemma");
    // The assistant was trained for a hidden size of 64, dense_kv has 128: refused.
    let err = fails(&[
        "convert",
        "--model",
        s(&golden("dense_kv")),
        "--assistant",
        s(&golden("e2b_like_assistant")),
        "--out",
        s(&out),
    ]);
    assert!(err.contains("backbone_hidden_size"), "{err}");
    let left: Vec<_> = std::fs::read_dir(&d).unwrap().collect();
    assert!(left.is_empty(), "{left:?}");
    std::fs::remove_dir_all(&d).unwrap();
}

fn gguf(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../wgemma/tests/data/gguf")
        .join(name)
}

/// llama.cpp GGUF files wherever a model is taken: `inspect FILE.gguf`, `convert --model
/// FILE.gguf --assistant FILE.gguf`, and `logits` / `generate` / `load` from the GGUF files
/// agreeing with their artifact.
#[test]
fn gguf_files_inspect_convert_and_run_like_their_artifact() {
    let d = scratch("gguf");
    let (target, assistant) = (
        gguf("e2b_like.q4_0.gguf"),
        gguf("e2b_like_assistant.f32.gguf"),
    );
    let json: serde_json::Value =
        serde_json::from_str(&ok(&["inspect", s(&target), "--json"])).unwrap();
    assert_eq!(json["architecture"], "gemma4");
    assert_eq!(json["config"]["num_hidden_layers"], 6);
    assert!(
        json["types"]["Q4_0"]["load"]
            .as_str()
            .unwrap()
            .contains("as stored"),
        "{json}"
    );
    let text = ok(&["inspect", s(&gguf("k_quant.q4_k_m.gguf"))]);
    for want in [
        "Q4_K",
        "Q6_K",
        "tokenizer.chat_template",
        "gemma4, 256 tokens",
    ] {
        assert!(text.contains(want), "{want}: {text}");
    }

    let file = d.join("e2b_like.gguf.wgemma");
    ok(&[
        "convert",
        "--model",
        s(&target),
        "--assistant",
        s(&assistant),
        "--out",
        s(&file),
    ]);
    let json: serde_json::Value =
        serde_json::from_str(&ok(&["inspect", s(&file), "--json"])).unwrap();
    assert_eq!(json["verified"], true);
    assert!(json["manifest"]["sources"]
        .as_array()
        .unwrap()
        .iter()
        .any(|s| s["file"] == "e2b_like_assistant.f32.gguf"));
    let ids = "5,17,9,200,3";
    let logits = |model: &Path| {
        ok(&[
            "logits",
            "--model",
            s(model),
            "--prompt-ids",
            ids,
            "--all-positions",
        ])
    };
    assert_eq!(logits(&target), logits(&file), "logits differ");
    let gen = |model: &Path, assistant: &Path| speculative_json(model, assistant, ids, &[]);
    assert_eq!(
        gen(&target, &assistant)["tokens"],
        gen(&file, &file)["tokens"],
        "speculative tokens differ"
    );
    let load: serde_json::Value = serde_json::from_str(&ok(&[
        "load",
        "--model",
        s(&target),
        "--assistant",
        s(&assistant),
        "--json",
    ]))
    .unwrap();
    assert_eq!(load["assistant_loaded"], true);
    // The input itself as --out is refused, and the file is left as it was.
    let copy = d.join("copy.gguf");
    std::fs::copy(&target, &copy).unwrap();
    let err = fails(&["convert", "--model", s(&copy), "--out", s(&copy)]);
    assert!(err.contains("not an input"), "{err}");
    assert_eq!(
        std::fs::read(&copy).unwrap(),
        std::fs::read(&target).unwrap()
    );
    std::fs::remove_dir_all(&d).unwrap();
}
