//! `wgemma inspect FILE.gguf`: a llama.cpp GGUF file as wgemma reads it: architecture, the
//! config its metadata describes, tokenizer and chat template, and its tensors by type with
//! how each type loads onto wgemma's GPU layouts. The file's strings are printed with
//! control characters escaped: its metadata is whatever its writer put there.

use crate::files::GgufMap;
use anyhow::{Context, Result};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use wgemma::formats::gguf::source::{load_route, runs_as};
use wgemma::formats::gguf::{GgufFile, Value};
use wgemma::formats::printable::printable;

/// Per tensor type: (tensors, bytes).
fn by_type(file: &GgufFile<'_>) -> BTreeMap<String, (usize, u64)> {
    let mut types: BTreeMap<String, (usize, u64)> = BTreeMap::new();
    for t in &file.tensors {
        let e = types.entry(format!("{:?}", t.ty)).or_default();
        e.0 += 1;
        e.1 += t.data.len() as u64;
    }
    types
}

pub fn run(path: &Path, json: bool) -> Result<()> {
    let map = GgufMap::open(path)?;
    let file = map.parse(path)?;
    let arch = file.architecture()?.to_string();
    let config: serde_json::Value = serde_json::from_str(&if arch == "gemma4-assistant" {
        wgemma::formats::gguf::assistant_config_json(&file)
    } else {
        wgemma::formats::gguf::config_json(&file)
    }?)?;
    let name = file.get("general.name").and_then(Value::as_str);
    let tokenizer = file.get("tokenizer.ggml.model").and_then(Value::as_str);
    let tokens = match file.get("tokenizer.ggml.tokens") {
        Some(Value::Array(items)) => items.len(),
        _ => 0,
    };
    let template = file.get("tokenizer.chat_template").and_then(Value::as_str);
    let types = by_type(&file);
    let file_bytes = map.bytes().len();
    if json {
        let tensors: Vec<_> = file
            .tensors
            .iter()
            .map(|t| {
                serde_json::json!({"name": t.name, "type": format!("{:?}", t.ty),
                    "dims": t.dims, "bytes": t.data.len(), "offset": t.file_offset,
                    "runs_as": runs_as(&t.name, t.ty, &t.dims)})
            })
            .collect();
        let out = serde_json::json!({
            "file": path.display().to_string(),
            "file_bytes": file_bytes,
            "gguf_version": file.version,
            "architecture": arch,
            "name": name,
            "config": config,
            "tokenizer": tokenizer.map(|m| serde_json::json!({"model": m, "tokens": tokens})),
            "chat_template": template.is_some(),
            "types": types.iter().map(|(ty, (n, bytes))| (ty.clone(), serde_json::json!({
                "tensors": n, "bytes": bytes,
                "load": load_route(file.tensors.iter().find(|t| format!("{:?}", t.ty) == *ty)
                    .expect("a type of the file's tensors").ty),
            }))).collect::<serde_json::Map<_, _>>(),
            "tensors": tensors,
        });
        println!("{out}");
        return Ok(());
    }
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let mut text = || -> std::io::Result<()> {
        let c = config.get("text_config").unwrap_or(&config);
        let get = |k: &str| c.get(k).map_or("?".to_string(), |v| v.to_string());
        writeln!(out, "{}", printable(&path.display().to_string()))?;
        writeln!(
            out,
            "  format       GGUF v{}, {} bytes, {} tensors",
            file.version,
            file_bytes,
            file.tensors.len()
        )?;
        writeln!(
            out,
            "  model        {}{}: {} layers, hidden {}, vocab {}",
            printable(&arch),
            name.map(|n| format!(" ({})", printable(n)))
                .unwrap_or_default(),
            get("num_hidden_layers"),
            get("hidden_size"),
            get("vocab_size")
        )?;
        match tokenizer {
            Some(m) => writeln!(out, "  tokenizer    {}, {tokens} tokens", printable(m)),
            None => writeln!(out, "  tokenizer    none"),
        }?;
        match template {
            Some(t) => writeln!(
                out,
                "  chat         tokenizer.chat_template ({} chars)",
                t.len()
            ),
            None => writeln!(
                out,
                "  chat         no template (Gemma 4's built-in turn format)"
            ),
        }?;
        writeln!(out, "  tensor types")?;
        for (ty, (n, bytes)) in &types {
            let route = file
                .tensors
                .iter()
                .find(|t| format!("{:?}", t.ty) == *ty)
                .map(|t| load_route(t.ty))
                .unwrap_or_default();
            writeln!(out, "    {ty:<5} {n:>5} tensors {bytes:>12} bytes  {route}")?;
        }
        writeln!(
            out,
            "  tensors (offset, type, dims, bytes, name: what it runs as, no --dtype)"
        )?;
        for t in &file.tensors {
            writeln!(
                out,
                "    {:>12}  {:<5} {:<22} {:>11}  {}: {}",
                t.file_offset,
                format!("{:?}", t.ty),
                format!("{:?}", t.dims),
                t.data.len(),
                printable(&t.name),
                runs_as(&t.name, t.ty, &t.dims)
            )?;
        }
        out.flush()
    };
    match text() {
        // `wgemma inspect FILE | head` closes the pipe early: not an error.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other.with_context(|| format!("printing {}", path.display())),
    }
}
