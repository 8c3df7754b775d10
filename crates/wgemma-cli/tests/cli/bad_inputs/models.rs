//! Bad model files: configs, tokenizers, weights, paths, GGUF metadata, counts and chat
//! templates, each refused by name.

use super::*;

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
                // Positions for the long context below (a longer one is cut to them).
                c["max_position_embeddings"] = 1_000_000.into();
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
fn bad_tokenizers_are_named() {
    let d = scratch("files-tokenizer");
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
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn non_finite_weights_are_refused() {
    let d = scratch("files-weights");
    let ids = "5,17,9";
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
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn bad_paths_are_named() {
    let d = scratch("files-paths");
    let ids = "5,17,9";
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
