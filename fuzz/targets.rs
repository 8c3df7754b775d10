//! The bodies of the fuzz targets, shared by `fuzz/fuzz_targets/*.rs` (libFuzzer) and by
//! `crates/wgemma/tests/integration/fuzz_corpus.rs`, which runs every committed corpus
//! input through them in a normal `cargo test`. Each must return (Ok or a clean error) on ANY input:
//! a panic, an abort, a hang or an allocation the input's size does not justify is a bug.

use wgemma::formats::artifact::Artifact;
use wgemma::formats::hf::Checkpoint;
use wgemma::model::{parse_config, SizeLimits};
use wgemma::text::tokenizer::{parse_prompt_ids, tiny_tokenizer_json, Tokenizer};

/// The artifact reader: framing, header checksum, manifest, configs, tensor contract;
/// then what `inspect` and a load read of a parsed one.
pub fn artifact_reader(data: &[u8]) {
    if let Ok(a) = Artifact::parse(data) {
        let _ = a.tensor_table();
        let _ = a.verify_all(&mut |_, _| {});
        let _ = a.tokenizer_json(wgemma::formats::artifact::Which::Target);
    }
}

/// A checkpoint directory's config.json + one safetensors shard: the input is split at
/// its first NUL byte (config text before, shard bytes after). The config's sizes are
/// checked as a load checks them, and every tensor of the shard is read as f32.
pub fn checkpoint_config(data: &[u8]) {
    let split = data.iter().position(|&b| b == 0).unwrap_or(data.len());
    let (config, shard) = (&data[..split], data.get(split + 1..).unwrap_or(&[]));
    if let Ok(text) = std::str::from_utf8(config) {
        if let Ok(spec) = parse_config(text) {
            let limits = SizeLimits {
                bytes_per_weight: 0.5625,
                max_context: 4096,
                max_rows: 64,
                max_buffer_bytes: 1 << 31,
                host_memory_bytes: Some(1 << 33),
                device_is_host: true,
            };
            let _ = spec.check_sizes(&limits);
        }
    }
    if let Ok(ck) = Checkpoint::from_shards(vec![("model.safetensors".into(), shard)]) {
        let prefix = ck.prefix().to_string();
        let names: Vec<String> = safetensors::SafeTensors::deserialize(shard)
            .map(|st| st.names().into_iter().map(String::from).collect())
            .unwrap_or_default();
        for full in names {
            if let Some(name) = full.strip_prefix(&prefix) {
                if let Ok(shape) = ck.shape(name) {
                    // Bounded: a shape may claim more elements than the shard holds.
                    if shape
                        .iter()
                        .try_fold(1usize, |a, &d| a.checked_mul(d))
                        .is_some_and(|n| n <= 1 << 20)
                    {
                        let _ = ck.f32(name, &shape);
                    }
                }
            }
        }
    }
}

/// tokenizer.json loading, then a round trip through the loaded tokenizer.
pub fn tokenizer_json(data: &[u8]) {
    if let Ok(t) = Tokenizer::from_bytes(data) {
        if let Ok(ids) = t.encode_prompt("hello world") {
            let _ = t.decode(&ids);
        }
    }
}

/// `--prompt-ids` parsing.
pub fn prompt_ids(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(ids) = parse_prompt_ids(text) {
            assert!(!ids.is_empty());
        }
    }
}

/// Gemma 4's chat format (`--chat`) rendered around arbitrary user text, encoded and
/// decoded with a small tokenizer holding the turn markers.
pub fn chat_prompt(data: &[u8]) {
    thread_local! {
        static TOKENIZER: Tokenizer = Tokenizer::from_bytes(
            tiny_tokenizer_json(&["hello", "world", "user", "model", " "]).as_bytes(),
        )
        .expect("the tiny tokenizer loads");
    }
    if let Ok(text) = std::str::from_utf8(data) {
        TOKENIZER.with(|t| {
            if let Ok(ids) = t.encode_chat(text) {
                let _ = t.decode(&ids);
            }
        });
    }
}

/// A GGUF file: header, metadata, tensor table; then what a load reads of a parsed one:
/// the gemma4 config and its size check, the tokenizer rebuilt from the metadata, every
/// tensor dequantised (bounded), and every decoder tensor through the weight source.
pub fn gguf_reader(data: &[u8]) {
    use wgemma::formats::gguf::{config_json, quant, tokenizer, GgufFile, GgufWeights};
    use wgemma::formats::hf::WeightSource;
    let Ok(file) = GgufFile::parse(data) else {
        return;
    };
    if let Ok(config) = config_json(&file) {
        if let Ok(spec) = parse_config(&config) {
            let limits = SizeLimits {
                bytes_per_weight: 0.5625,
                max_context: 4096,
                max_rows: 64,
                max_buffer_bytes: 1 << 31,
                host_memory_bytes: Some(1 << 33),
                device_is_host: true,
            };
            let _ = spec.check_sizes(&limits);
        }
    }
    if let Ok(Some(json)) = tokenizer::tokenizer_json(&file) {
        let _ = Tokenizer::from_bytes(json.as_bytes());
    }
    let weights = GgufWeights::new(&file);
    for t in file.tensors.iter().filter(|t| t.elements() <= 1 << 20) {
        let _ = quant::dequantize_to_vec(t.ty, t.data);
        if let Some(hf) = wgemma::formats::gguf::model::hf_name(&t.name) {
            let _ = weights.tensor(&hf, &t.hf_shape()).and_then(|t| t.to_f32());
        }
    }
}

/// A checkpoint's chat template rendering a conversation, then the conversation encoded
/// with message content inert. The input is split at its first NUL byte: the template's
/// source before it; after it, up to 16 messages as lines `role:content`. Every render
/// must end (minijinja fuel and the output cap bound it) with text or a clean error.
pub fn chat_template(data: &[u8]) {
    use wgemma::session::{encode_conversation, ChatMessage, ChatTemplate};
    thread_local! {
        static TOKENIZER: Tokenizer = Tokenizer::from_bytes(
            tiny_tokenizer_json(&["hello", "world", "user", "model", "system", " "]).as_bytes(),
        )
        .expect("the tiny tokenizer loads");
    }
    let split = data.iter().position(|&b| b == 0).unwrap_or(data.len());
    let Ok(source) = std::str::from_utf8(&data[..split]) else {
        return;
    };
    let rest = String::from_utf8_lossy(data.get(split + 1..).unwrap_or(&[]));
    let mut messages: Vec<ChatMessage> = rest
        .lines()
        .take(16)
        .map(|line| {
            let (role, content) = line.split_once(':').unwrap_or(("user", line));
            ChatMessage::new(role, &content.replace("\\n", "\n"))
        })
        .collect();
    if messages.is_empty() {
        messages.push(ChatMessage::new("user", "hello"));
    }
    let Ok(template) = ChatTemplate::new(source, "<bos>", "<eos>") else {
        return;
    };
    for generation_prompt in [false, true] {
        let _ = template.render(&messages, generation_prompt);
    }
    TOKENIZER.with(|t| {
        if let Ok(ids) = encode_conversation(t, &messages, &|m| template.render(m, true)) {
            let _ = t.decode(&ids);
        }
    });
}
