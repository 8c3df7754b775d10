//! Bad artifacts are refused with an error naming what is wrong: truncated, a flipped byte
//! (its tensor's checksum), a header that lies about a shape, an unknown version, an edited
//! header (the header checksum), a census route this build lacks, and other breaches of the
//! contract.

use super::{convert_fixtures, hooks, options};
use std::collections::BTreeMap;
use wgemma::formats::artifact::manifest::MANIFEST_KEY;
use wgemma::formats::artifact::{load_assistant, load_target, Artifact, Manifest};
use wgemma::gpu::test_context;
use wgemma::model::state::KvState;
use wgemma::model::weights::WeightFormat;

fn parse_err(bytes: &[u8]) -> String {
    match Artifact::parse(bytes) {
        Ok(_) => panic!("a bad artifact was accepted"),
        Err(e) => e.to_string(),
    }
}

fn q4_artifact() -> Vec<u8> {
    convert_fixtures(
        "e2b_like",
        Some("e2b_like_assistant"),
        WeightFormat::Q4 { group: 32 },
    )
}

/// Rewrites the header of `bytes` through `edit` (padded to 8 bytes, as safetensors
/// writes it; tensor offsets are relative to the data, so the data moves unchanged), and
/// reseals it (its checksum recomputed) so the checks behind the header checksum are
/// reached.
fn edit_header(
    bytes: &[u8],
    edit: impl FnOnce(&mut serde_json::Map<String, serde_json::Value>),
) -> Vec<u8> {
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let mut header: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    edit(&mut header);
    let json = wgemma::formats::artifact::writer::reseal_header(
        &serde_json::Value::Object(header).to_string(),
    );
    let len = json.len().div_ceil(8) * 8;
    let mut out = (len as u64).to_le_bytes().to_vec();
    out.extend(json.as_bytes());
    out.resize(8 + len, b' ');
    out.extend(&bytes[8 + n..]);
    out
}

fn edit_manifest(bytes: &[u8], edit: impl FnOnce(&mut Manifest)) -> Vec<u8> {
    edit_header(bytes, |h| {
        let meta = h["__metadata__"].as_object_mut().unwrap();
        let mut m = Manifest::parse(meta[MANIFEST_KEY].as_str().unwrap()).unwrap();
        edit(&mut m);
        meta.insert(
            MANIFEST_KEY.into(),
            serde_json::to_string(&m).unwrap().into(),
        );
    })
}

#[test]
fn a_truncated_artifact_is_refused_as_truncated() {
    let bytes = q4_artifact();
    for cut in [bytes.len() - 1, bytes.len() / 2, 100, 4] {
        let err = parse_err(&bytes[..cut]);
        assert!(err.contains("truncated"), "cut at {cut}: {err}");
    }
}

#[test]
fn a_flipped_byte_fails_the_checksum_of_its_tensor() {
    let bytes = q4_artifact();
    let artifact = Artifact::parse(&bytes).unwrap();
    let victim = artifact
        .tensor_table()
        .into_iter()
        .find(|t| t.name == "target.layers.1.self_attn.q_proj.weight.q4_packed")
        .unwrap();
    let mut bad = bytes.clone();
    bad[victim.offset + victim.bytes / 2] ^= 0x10;
    // The contract holds (the header is intact); the checksum catches it at load.
    let artifact = Artifact::parse(&bad).unwrap();
    let err = load_target(
        test_context(),
        &artifact,
        options(WeightFormat::Q4 { group: 32 }),
        hooks(true),
    )
    .err()
    .unwrap()
    .to_string();
    assert!(
        err.contains("target.layers.1.self_attn.q_proj.weight.q4_packed") && err.contains("XXH3"),
        "{err}"
    );
    let err = artifact.verify_all(&mut |_, _| {}).unwrap_err().to_string();
    assert!(err.contains("q_proj"), "{err}");
    // --no-verify skips the check: the flipped weight loads (its logits would differ).
    assert!(load_target(
        test_context(),
        &artifact,
        options(WeightFormat::Q4 { group: 32 }),
        hooks(false)
    )
    .is_ok());
}

#[test]
fn a_header_that_lies_about_a_shape_is_refused_naming_the_tensor() {
    let bytes = q4_artifact();
    // Same byte size, other shape: the framing holds, the contract does not.
    let name = "target.layers.0.self_attn.q_proj.weight.q4_packed";
    let bad = edit_header(&bytes, |h| {
        let shape = h[name]["shape"].as_array().unwrap().clone();
        h[name]["shape"] = serde_json::json!([shape[1], shape[0]]);
    });
    let err = parse_err(&bad);
    assert!(err.contains(name) && err.contains("shape"), "{err}");
    // Another byte size: refused by the framing check, naming the tensor.
    let bad = edit_header(&bytes, |h| {
        h[name]["shape"] = serde_json::json!([1, 1]);
    });
    let err = parse_err(&bad);
    assert!(err.contains(name) && err.contains("bytes"), "{err}");
    // A config that lies (MLP size) no longer matches the stored shapes.
    let bad = edit_manifest(&bytes, |m| {
        m.target.config["text_config"]["intermediate_size"] = 96.into();
    });
    let err = parse_err(&bad);
    assert!(err.contains("mlp.gate_up_proj"), "{err}");
}

#[test]
fn an_unknown_version_is_refused_by_its_version() {
    let bytes = q4_artifact();
    let bad = edit_manifest(&bytes, |m| m.version = 3);
    let err = parse_err(&bad);
    assert!(
        err.contains("version") && err.contains('3') && err.contains('2'),
        "{err}"
    );
}

#[test]
fn an_edited_header_fails_the_header_checksum() {
    // Issue 17, item 7: a config edited in the manifest changed the logits while every
    // tensor checksum still held. The same bytes edited in place, not resealed:
    let bytes = q4_artifact();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header = std::str::from_utf8(&bytes[8..8 + n]).unwrap();
    for (from, to) in [
        (
            "\\\"final_logit_softcapping\\\":30.0",
            "\\\"final_logit_softcapping\\\":10.0",
        ),
        // The tensor table too: a dtype of the same width passes the framing checks.
        ("\"dtype\":\"U32\"", "\"dtype\":\"I32\""),
    ] {
        assert!(header.contains(from), "{from}");
        let mut bad = bytes.clone();
        bad[8..8 + n].copy_from_slice(header.replacen(from, to, 1).as_bytes());
        let err = parse_err(&bad);
        assert!(err.contains("XXH3-128 of the header"), "{from}: {err}");
    }
}

#[test]
fn a_census_route_this_build_lacks_is_refused_at_load() {
    let bytes = q4_artifact();
    let bad = edit_manifest(&bytes, |m| {
        let r = m.census.iter_mut().find(|r| r.route == "q4_gemv").unwrap();
        r.route = "q4_gemv_x".into();
    });
    let artifact = Artifact::parse(&bad).unwrap();
    let err = load_target(
        test_context(),
        &artifact,
        options(WeightFormat::Q4 { group: 32 }),
        hooks(true),
    )
    .err()
    .unwrap()
    .to_string();
    assert!(
        err.contains("q4_linear/q4_gemv_x") && err.contains("unknown"),
        "{err}"
    );
    // An MTP route claimed by the target is refused too: the plain op set lacks it.
    let bad = edit_manifest(&bytes, |m| {
        let mut r = m.census.iter().find(|r| r.op == "topk").unwrap().clone();
        r.model = "target".into();
        m.census.push(r);
    });
    let artifact = Artifact::parse(&bad).unwrap();
    let err = load_target(
        test_context(),
        &artifact,
        options(WeightFormat::Q4 { group: 32 }),
        hooks(true),
    )
    .err()
    .unwrap()
    .to_string();
    assert!(err.contains("topk") && err.contains("plain"), "{err}");
}

#[test]
fn other_contract_breaches_are_named() {
    let bytes = q4_artifact();
    // A checksum missing from the manifest.
    let bad = edit_manifest(&bytes, |m| {
        m.checksums.remove("target.norm.weight");
    });
    assert!(parse_err(&bad).contains("target.norm.weight"));
    // A plain safetensors file (no manifest).
    let plain = edit_header(&bytes, |h| {
        h.insert(
            "__metadata__".into(),
            serde_json::to_value(BTreeMap::from([("x", "y")])).unwrap(),
        );
    });
    assert!(parse_err(&plain).contains(MANIFEST_KEY));
    // The wrong format asked of a q4 artifact.
    let artifact = Artifact::parse(&bytes).unwrap();
    let err = load_target(
        test_context(),
        &artifact,
        options(WeightFormat::F16),
        hooks(true),
    )
    .err()
    .unwrap()
    .to_string();
    assert!(err.contains("q4 (group 32)"), "{err}");
    // A target-only artifact has no assistant.
    let target_only = convert_fixtures("e2b_like", None, WeightFormat::F32);
    let artifact = Artifact::parse(&target_only).unwrap();
    let model = load_target(
        test_context(),
        &artifact,
        options(WeightFormat::F32),
        hooks(true),
    )
    .unwrap();
    let target = KvState::new(test_context(), model).unwrap();
    let err = load_assistant(test_context(), &artifact, &target, true, &|_| {})
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("target only"), "{err}");
}
