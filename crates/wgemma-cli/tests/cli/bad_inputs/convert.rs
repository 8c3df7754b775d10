//! `wgemma convert` never overwrites or harms its inputs and leaves no partial file, also
//! when interrupted.

use super::*;

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
        &["found a file that is neither", "pass that"],
    );
    let names: Vec<String> = std::fs::read_dir(&d)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(names.iter().all(|n| !n.contains("partial")), "{names:?}");
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
