//! Synthetic models: the real Gemma 4 shapes (E2B, E4B, 31B) or a tiny demo shape, with
//! deterministic random weights generated per tensor on demand. They go through the same
//! [`WeightSource`] path as a checkpoint, so benchmarks and the demo run the real code.

use crate::error::{Error, Result};
use crate::model::config::{parse_config, ModelSpec};
use crate::weights::raw::{RawData, RawDtype, RawTensor};
use crate::weights::source::WeightSource;

pub mod checkpoint;

/// A named synthetic shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyntheticShape {
    /// Small enough for a software GPU: 6 layers, hidden 256, vocab 4096, PLE and KV sharing.
    Tiny,
    E2b,
    E4b,
    B31,
}

impl SyntheticShape {
    pub fn parse(s: &str) -> Result<SyntheticShape> {
        match s {
            "tiny" => Ok(SyntheticShape::Tiny),
            "e2b" => Ok(SyntheticShape::E2b),
            "e4b" => Ok(SyntheticShape::E4b),
            "31b" => Ok(SyntheticShape::B31),
            other => Err(Error::invalid(
                "synthetic",
                "shape",
                "tiny, e2b, e4b or 31b",
                other,
            )),
        }
    }

    /// The HF `config.json` of this shape: E2B, E4B and 31B with the sizes, heads, windows,
    /// layer patterns and KV sharing of Gemma 4's published configs; tiny is a small model of
    /// the same structure (PLE, KV sharing, double-wide MLP).
    pub fn config_json(self) -> String {
        let layer_types = |n: usize, period: usize| -> Vec<&'static str> {
            (0..n)
                .map(|i| {
                    if (i + 1) % period == 0 {
                        "full_attention"
                    } else {
                        "sliding_attention"
                    }
                })
                .collect()
        };
        let v = match self {
            SyntheticShape::Tiny => serde_json::json!({
                "vocab_size": 4096, "hidden_size": 256, "intermediate_size": 512,
                "num_hidden_layers": 6, "num_attention_heads": 4, "num_key_value_heads": 1,
                "head_dim": 64, "global_head_dim": 128, "sliding_window": 32,
                "num_kv_shared_layers": 2, "use_double_wide_mlp": true,
                "hidden_size_per_layer_input": 32, "final_logit_softcapping": 30.0,
                "layer_types": layer_types(6, 3), "eos_token_id": [1],
            }),
            SyntheticShape::E2b => serde_json::json!({
                "vocab_size": 262144, "hidden_size": 1536, "intermediate_size": 6144,
                "num_hidden_layers": 35, "num_attention_heads": 8, "num_key_value_heads": 1,
                "head_dim": 256, "global_head_dim": 512, "sliding_window": 512,
                "num_kv_shared_layers": 20, "use_double_wide_mlp": true,
                "hidden_size_per_layer_input": 256, "final_logit_softcapping": 30.0,
                "layer_types": layer_types(35, 5), "eos_token_id": [1, 106],
            }),
            SyntheticShape::E4b => serde_json::json!({
                "vocab_size": 262144, "hidden_size": 2560, "intermediate_size": 10240,
                "num_hidden_layers": 42, "num_attention_heads": 8, "num_key_value_heads": 2,
                "head_dim": 256, "global_head_dim": 512, "sliding_window": 512,
                "num_kv_shared_layers": 18, "hidden_size_per_layer_input": 256,
                "final_logit_softcapping": 30.0, "layer_types": layer_types(42, 6),
                "eos_token_id": [1, 106],
            }),
            SyntheticShape::B31 => serde_json::json!({
                "vocab_size": 262144, "hidden_size": 5376, "intermediate_size": 21504,
                "num_hidden_layers": 60, "num_attention_heads": 32, "num_key_value_heads": 16,
                "num_global_key_value_heads": 4, "attention_k_eq_v": true,
                "head_dim": 256, "global_head_dim": 512, "sliding_window": 1024,
                "hidden_size_per_layer_input": 0, "final_logit_softcapping": 30.0,
                "layer_types": layer_types(60, 6), "eos_token_id": [1, 106],
            }),
        };
        let mut v = v;
        v["model_type"] = "gemma4_text".into();
        v.to_string()
    }

    pub fn spec(self) -> ModelSpec {
        parse_config(&self.config_json()).expect("built-in synthetic configs are valid")
    }
}

/// Deterministic random weights: every tensor's values come from its name and the seed,
/// so two runs (and two processes) build the same model.
#[derive(Debug, Clone, Copy)]
pub struct SyntheticWeights {
    pub seed: u64,
}

fn splitmix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

fn name_seed(name: &str, seed: u64) -> u64 {
    // FNV-1a over the name, mixed with the seed.
    let h = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
    });
    splitmix64(h ^ seed)
}

impl SyntheticWeights {
    /// Elements `range` of tensor `name` of `shape` (the flat row-major indices): the same
    /// values [`SyntheticWeights::f32`] gives, a piece at a time (a synthetic checkpoint of
    /// E2B size is written without holding a 9 GB table).
    pub fn values(&self, name: &str, shape: &[usize], range: std::ops::Range<usize>) -> Vec<f32> {
        if name.ends_with("layer_scalar") {
            return vec![1.0; range.len()];
        }
        // Norm weights near 1 (plain w), matrices uniform with variance 1/K so activations
        // keep their scale through the layers, embeddings of moderate size.
        let (center, amplitude) = if name.ends_with("norm.weight") {
            (1.0f32, 0.1f32)
        } else if name.starts_with("embed_tokens") {
            (0.0, 0.5)
        } else {
            let k = *shape.last().unwrap_or(&1) as f32;
            (0.0, (3.0 / k).sqrt())
        };
        let base = name_seed(name, self.seed);
        let fill = |out: &mut [f32], start: usize| {
            for (j, v) in out.iter_mut().enumerate() {
                let i = (start + j) as u64;
                let bits = splitmix64(base ^ i.wrapping_mul(0x9e37_79b9_7f4a_7c15));
                let unit = (bits >> 40) as f32 / (1u64 << 24) as f32; // [0, 1)
                *v = center + amplitude * (2.0 * unit - 1.0);
            }
        };
        let mut out = vec![0.0f32; range.len()];
        // Each value depends only on its index, so the pieces fill in parallel: E2B's
        // 5 billion values took most of a synthetic model's load on one core. (No threads
        // in a browser.)
        if cfg!(target_arch = "wasm32") || range.len() < (1 << 21) {
            fill(&mut out, range.start);
            return out;
        }
        let threads = std::thread::available_parallelism().map_or(1, |t| t.get());
        let piece = range.len().div_ceil(threads).max(1 << 20);
        std::thread::scope(|scope| {
            for (n, chunk) in out.chunks_mut(piece).enumerate() {
                let start = range.start + n * piece;
                scope.spawn(move || fill(chunk, start));
            }
        });
        out
    }
}

impl SyntheticWeights {
    /// The whole tensor `name` of `shape`.
    pub fn f32(&self, name: &str, shape: &[usize]) -> Vec<f32> {
        self.values(name, shape, 0..shape.iter().product())
    }

    /// Tensor `name` of `shape`, its values computed a block of rows at a time as the
    /// loader asks for them (never the whole tensor at once).
    fn computed(self, name: &str, shape: &[usize]) -> RawTensor<'static> {
        let (owned_name, owned_shape) = (name.to_string(), shape.to_vec());
        RawTensor {
            dtype: RawDtype::F32,
            shape: shape.to_vec(),
            data: RawData::Computed(Box::new(move |range| {
                self.values(&owned_name, &owned_shape, range)
            })),
            what: format!("synthetic `{name}`"),
            release: None,
        }
    }
}

impl WeightSource for SyntheticWeights {
    fn tensor(&self, name: &str, shape: &[usize]) -> Result<RawTensor<'_>> {
        Ok(self.computed(name, shape))
    }

    fn has(&self, _name: &str) -> bool {
        true
    }
}

/// `token_ordering` as stored i64.
fn ordering_tensor(ordering: Vec<usize>) -> RawTensor<'static> {
    let bytes: Vec<u8> = ordering
        .iter()
        .flat_map(|&v| (v as i64).to_le_bytes())
        .collect();
    RawTensor {
        dtype: RawDtype::I64,
        shape: vec![ordering.len()],
        data: RawData::Bytes(bytes.into()),
        what: "synthetic `masked_embedding.token_ordering`".into(),
        release: None,
    }
}

/// The centroid head's token ordering (the synthetic assistants' only integer tensor).
const TOKEN_ORDERING: &str = "masked_embedding.token_ordering";

/// The synthetic assistants' only integer tensor is `token_ordering` `[vocab]`.
fn check_token_ordering(name: &str, shape: &[usize], vocab: usize) -> Result<()> {
    if name != TOKEN_ORDERING || shape != [vocab] {
        return Err(Error::invalid(
            "synthetic assistant",
            format!("integer tensor `{name}` {shape:?}"),
            format!("masked_embedding.token_ordering [{vocab}]"),
            "another tensor",
        ));
    }
    Ok(())
}

/// A `gemma4_assistant` config.json with the E2B / E4B centroid head (2048 centroids, top
/// 32, tied lm_head) over `text_config`, drafting for a target of hidden size `backbone`.
fn centroid_assistant_config(backbone: usize, text_config: serde_json::Value) -> String {
    serde_json::json!({
        "model_type": "gemma4_assistant",
        "backbone_hidden_size": backbone,
        "use_ordered_embeddings": true,
        "num_centroids": 2048,
        "centroid_intermediate_top_k": 32,
        "tie_word_embeddings": true,
        "text_config": text_config,
    })
    .to_string()
}

/// The demo's assistant for [`SyntheticShape::Tiny`]: a 4-layer `gemma4_assistant` (hidden
/// 128, layers [S, S, S, F] reading the target's K/V) with the centroid head at the E2B
/// head's shape (2048 centroids, top 32; 2 tokens each on the 4096 vocab), so the fast TopK
/// route and the certified scatter run. Random weights, shaped like tools/golden's "echo"
/// assistants: `pre_projection` maps the token-embedding half of its input through A (128
/// orthonormal rows) and `lm_head` = E_target A^T, so it drafts the token it was fed, which
/// the target accepts whenever it repeats a token (a purely random drafter would never be
/// accepted and the demo would only show rejections). Its `post_projection` is scaled up so
/// that the drafts after the first of a round drift: a drafter whose acceptance falls with
/// the draft depth, so rounds both accept and reject.
pub struct SyntheticAssistant {
    /// The target's [`SyntheticWeights`] seed (the echo structure reads its embedding).
    pub target_seed: u64,
    pub seed: u64,
}

/// Hidden size of the synthetic assistant.
const ASSISTANT_HIDDEN: usize = 128;
/// Gain of the synthetic assistant's post_projection (see its `f32`).
const DRAFT_DRIFT: f32 = 300.0;

impl SyntheticAssistant {
    /// The assistant's `config.json` (a `gemma4_assistant` for the Tiny target).
    pub fn config_json(&self) -> String {
        let t = SyntheticShape::Tiny.spec().config;
        centroid_assistant_config(
            t.hidden_size,
            serde_json::json!({
                "model_type": "gemma4_text",
                "vocab_size": t.vocab_size, "hidden_size": ASSISTANT_HIDDEN,
                "intermediate_size": 2 * ASSISTANT_HIDDEN, "num_hidden_layers": 4,
                "num_attention_heads": 4, "num_key_value_heads": t.num_key_value_heads,
                "head_dim": t.head_dim, "global_head_dim": t.global_head_dim,
                "sliding_window": t.sliding_window, "num_kv_shared_layers": 4,
                "hidden_size_per_layer_input": 0,
                "layer_types": ["sliding_attention", "sliding_attention", "sliding_attention",
                                "full_attention"],
            }),
        )
    }

    /// A: `[rows, cols]` with orthonormal rows (Gram-Schmidt on seeded uniform rows).
    fn orthonormal(&self, rows: usize, cols: usize) -> Vec<f32> {
        let base = name_seed("echo.A", self.seed);
        let mut a: Vec<f64> = (0..rows * cols)
            .map(|i| {
                let bits = splitmix64(base ^ (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
                (bits >> 11) as f64 / (1u64 << 53) as f64 - 0.5
            })
            .collect();
        for r in 0..rows {
            for p in 0..r {
                let dot: f64 = (0..cols).map(|c| a[r * cols + c] * a[p * cols + c]).sum();
                for c in 0..cols {
                    a[r * cols + c] -= dot * a[p * cols + c];
                }
            }
            let norm = (0..cols)
                .map(|c| a[r * cols + c].powi(2))
                .sum::<f64>()
                .sqrt();
            for c in 0..cols {
                a[r * cols + c] /= norm;
            }
        }
        a.into_iter().map(|v| v as f32).collect()
    }

    /// lm_head = E_target A^T, normalised to unit RMS.
    fn lm_head(&self, vocab: usize, ht: usize, ha: usize) -> Vec<f32> {
        let e = SyntheticWeights {
            seed: self.target_seed,
        }
        .f32("embed_tokens.weight", &[vocab, ht]);
        let a = self.orthonormal(ha, ht);
        let mut head: Vec<f32> = (0..vocab * ha)
            .map(|i| {
                let (t, j) = (i / ha, i % ha);
                (0..ht).map(|c| e[t * ht + c] * a[j * ht + c]).sum()
            })
            .collect();
        let rms = (head.iter().map(|v| (v * v) as f64).sum::<f64>() / head.len() as f64).sqrt();
        head.iter_mut().for_each(|v| *v /= rms as f32);
        head
    }

    /// The token ordering: a seeded permutation of 0..vocab (Fisher-Yates).
    fn ordering(&self, vocab: usize) -> Vec<usize> {
        let mut perm: Vec<usize> = (0..vocab).collect();
        let base = name_seed("masked_embedding.token_ordering", self.seed);
        for i in (1..vocab).rev() {
            let j = (splitmix64(base ^ i as u64) % (i as u64 + 1)) as usize;
            perm.swap(i, j);
        }
        perm
    }
}

impl SyntheticAssistant {
    /// The values of the tensors the echo structure shapes (see the type's docs); None for
    /// the plain random ones.
    fn shaped(&self, name: &str, shape: &[usize]) -> Option<Vec<f32>> {
        let t = SyntheticShape::Tiny.spec().config;
        let (vocab, ht, ha) = (t.vocab_size, t.hidden_size, ASSISTANT_HIDDEN);
        let random = SyntheticWeights { seed: self.seed };
        Some(match name {
            "pre_projection.weight" if shape == [ha, 2 * ht] => {
                let mut w = random.f32(name, shape);
                let a = self.orthonormal(ha, ht);
                for r in 0..ha {
                    for c in 0..ht {
                        w[r * 2 * ht + c] = 10.0 * a[r * ht + c];
                    }
                }
                w
            }
            "model.embed_tokens.weight" if shape == [vocab, ha] => self.lm_head(vocab, ht, ha),
            // Scaled up: the h_prev the assistant feeds itself swamps the token signal, so
            // a round's first draft (fed the target's hidden state) echoes the seed and the
            // later ones drift; the demo's rounds then accept AND reject.
            "post_projection.weight" => random
                .f32(name, shape)
                .into_iter()
                .map(|v| v * DRAFT_DRIFT)
                .collect(),
            "masked_embedding.centroids.weight" if shape[1..] == [ha] => {
                let centroids = shape[0];
                let per = vocab / centroids.max(1);
                let head = self.lm_head(vocab, ht, ha);
                let order = self.ordering(vocab);
                let scale = 1.0 / (per as f32).sqrt();
                (0..centroids * ha)
                    .map(|i| {
                        let (c, j) = (i / ha, i % ha);
                        order[c * per..(c + 1) * per]
                            .iter()
                            .map(|&tok| head[tok * ha + j])
                            .sum::<f32>()
                            * scale
                    })
                    .collect()
            }
            _ => return None,
        })
    }
}

impl WeightSource for SyntheticAssistant {
    fn tensor(&self, name: &str, shape: &[usize]) -> Result<RawTensor<'_>> {
        let vocab = SyntheticShape::Tiny.spec().config.vocab_size;
        if name == TOKEN_ORDERING {
            check_token_ordering(name, shape, vocab)?;
            return Ok(ordering_tensor(self.ordering(vocab)));
        }
        Ok(match self.shaped(name, shape) {
            Some(values) => RawTensor::values(shape, values, format!("synthetic `{name}`")),
            None => SyntheticWeights { seed: self.seed }.computed(name, shape),
        })
    }

    fn has(&self, name: &str) -> bool {
        name != "lm_head.weight"
    }
}

/// The published Gemma 4 E2B / E4B assistant shapes (`google/gemma-4-E2B-it-assistant`,
/// `-E4B-it-assistant` config.json, HF transformers 5.x `Gemma4AssistantConfig`): 4 layers
/// [S, S, S, F] of hidden 256, MLP 2048, 4 query heads over the target's K/V (1 KV head for
/// E2B, 2 for E4B; head dims 256 / 512, window 512), `backbone_hidden_size` = the target's
/// hidden size, the centroid head 2048 -> top 32 over the 262,144 vocabulary, tied lm_head.
/// Random weights (a seeded permutation for `token_ordering`): for measuring what the
/// drafter costs, not what it drafts.
pub struct RandomAssistant {
    pub shape: SyntheticShape,
    pub seed: u64,
}

impl RandomAssistant {
    /// The assistant of `shape` (E2B or E4B: the shapes with a published assistant of
    /// known config).
    pub fn new(shape: SyntheticShape, seed: u64) -> Result<RandomAssistant> {
        match shape {
            SyntheticShape::E2b | SyntheticShape::E4b => Ok(RandomAssistant { shape, seed }),
            _ => Err(Error::invalid(
                "synthetic assistant",
                "target shape",
                "e2b or e4b (a published assistant of known shape)",
                format!("{shape:?}"),
            )),
        }
    }

    /// The assistant's `config.json`.
    pub fn config_json(&self) -> String {
        let t = self.shape.spec().config;
        centroid_assistant_config(
            t.hidden_size,
            serde_json::json!({
                "model_type": "gemma4_text",
                "vocab_size": t.vocab_size, "hidden_size": 256, "intermediate_size": 2048,
                "num_hidden_layers": 4, "num_attention_heads": 4,
                "num_key_value_heads": t.num_key_value_heads, "head_dim": 256,
                "global_head_dim": 512, "sliding_window": 512, "num_kv_shared_layers": 4,
                "hidden_size_per_layer_input": 0, "final_logit_softcapping": null,
                "layer_types": ["sliding_attention", "sliding_attention", "sliding_attention",
                                "full_attention"],
            }),
        )
    }

    fn vocab(&self) -> usize {
        self.shape.spec().config.vocab_size
    }
}

impl WeightSource for RandomAssistant {
    fn tensor(&self, name: &str, shape: &[usize]) -> Result<RawTensor<'_>> {
        if name != TOKEN_ORDERING {
            return Ok(SyntheticWeights { seed: self.seed }.computed(name, shape));
        }
        let vocab = self.vocab();
        check_token_ordering(name, shape, vocab)?;
        let ordering = SyntheticAssistant {
            target_seed: 0,
            seed: self.seed,
        }
        .ordering(vocab);
        Ok(ordering_tensor(ordering))
    }

    fn has(&self, name: &str) -> bool {
        name != "lm_head.weight"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_parse_and_weights_are_deterministic() {
        for shape in [
            SyntheticShape::Tiny,
            SyntheticShape::E2b,
            SyntheticShape::E4b,
            SyntheticShape::B31,
        ] {
            let spec = shape.spec();
            assert!(!spec.layers.is_empty());
        }
        let e2b = SyntheticShape::E2b.spec();
        assert_eq!(e2b.layers.len(), 35);
        assert_eq!(e2b.layers[34].intermediate_size, 12288);
        let b31 = SyntheticShape::B31.spec();
        assert!(b31.layers[5].k_eq_v && b31.layers[5].num_kv_heads == 4);
        let assistant = RandomAssistant::new(SyntheticShape::E2b, 0).unwrap();
        let a = crate::model::assistant::parse_assistant_config(&assistant.config_json()).unwrap();
        assert_eq!(a.backbone_hidden_size, 1536);
        assert_eq!(a.text.layers.len(), 4);
        assert_eq!(a.text.layers[3].head_dim, 512);
        assert!(RandomAssistant::new(SyntheticShape::Tiny, 0).is_err());
        let w = SyntheticWeights { seed: 7 };
        let a = w.f32("layers.0.mlp.down_proj.weight", &[4, 8]);
        assert_eq!(a, w.f32("layers.0.mlp.down_proj.weight", &[4, 8]));
        assert_ne!(a, w.f32("layers.1.mlp.down_proj.weight", &[4, 8]));
        assert!(a.iter().all(|v| v.abs() <= (3.0f32 / 8.0).sqrt()));
        assert!(SyntheticShape::parse("7b").is_err());
    }

    #[test]
    fn values_filled_in_parallel_pieces_equal_each_value_alone() {
        let w = SyntheticWeights { seed: 3 };
        let shape = [3000, 1536];
        let n = 3000 * 1536;
        let all = w.values("layers.2.mlp.up_proj.weight", &shape, 5..n);
        for i in [5, 6, 1 << 20, (1 << 20) + 1, n / 2, n - 1] {
            let one = w.values("layers.2.mlp.up_proj.weight", &shape, i..i + 1);
            assert_eq!(all[i - 5], one[0], "value {i}");
        }
    }
}
