//! Hugging Face safetensors checkpoints, from bytes (the CLI memory-maps the files; the
//! browser fetches them). One or more shards; tensor names with the multimodal prefix
//! `model.language_model.` or the text-only prefix `model.` (an MTP assistant's in full);
//! bf16, f16 or f32 weights, integer tensors (the assistant's `token_ordering`). A
//! checkpoint hands its tensors over as stored; the seam ([`crate::weights`]) converts them.

use crate::error::{Error, Result};
use crate::weights::raw::{RawDtype, RawTensor};
pub use crate::weights::source::{embed_scale, WeightSource};
use crate::weights::upload::{Quantiser, StreamOptions};
use safetensors::{Dtype, SafeTensors};
use std::collections::{HashMap, HashSet};
use std::ops::Range;
use std::sync::Mutex;

const OP: &str = "checkpoint";

/// The tensor-name prefixes of the text decoder, tried in order.
const PREFIXES: [&str; 2] = ["model.language_model.", "model."];

/// A tensor only an MTP assistant's checkpoint holds (HF `Gemma4AssistantForCausalLM`).
const ASSISTANT_TENSOR: &str = "pre_projection.weight";

/// The stored tensors, by the decoder's names without the prefix (an assistant's by their
/// full names); each block of rows a load is done with is released
/// ([`Checkpoint::with_release`]).
impl WeightSource for Checkpoint<'_> {
    fn tensor(&self, name: &str, expected_shape: &[usize]) -> Result<RawTensor<'_>> {
        self.raw_full(&self.full_name(name), expected_shape)
    }
    fn has(&self, name: &str) -> bool {
        Checkpoint::has(self, name)
    }
    fn stream_options(&self) -> StreamOptions {
        self.stream
    }
}

/// Called with (shard index, byte range) for shard bytes a load is done with.
pub type ReleaseFn<'a> = dyn Fn(usize, Range<usize>) + 'a;

/// All shards of one checkpoint, indexed by tensor name.
pub struct Checkpoint<'a> {
    shards: Vec<(String, SafeTensors<'a>)>,
    /// Each shard's bytes, in the order given.
    bytes: Vec<&'a [u8]>,
    /// Full tensor name -> shard index.
    index: HashMap<String, usize>,
    prefix: &'static str,
    release: Option<&'a ReleaseFn<'a>>,
    stream: StreamOptions,
    /// Full names of the tensors read so far ([`Checkpoint::check_all_read`]).
    read: Mutex<HashSet<String>>,
}

impl<'a> Checkpoint<'a> {
    /// Parses each `(file name, bytes)` shard. A truncated or corrupt shard is an error
    /// naming the file; a tensor present in two shards is an error.
    pub fn from_shards(shards: Vec<(String, &'a [u8])>) -> Result<Checkpoint<'a>> {
        let mut parsed = Vec::with_capacity(shards.len());
        let mut index = HashMap::new();
        let all_bytes = shards.iter().map(|(_, b)| *b).collect();
        for (i, (file, bytes)) in shards.into_iter().enumerate() {
            let st = SafeTensors::deserialize(bytes).map_err(|e| {
                Error::invalid(
                    OP,
                    format!("shard `{file}`"),
                    "a complete safetensors file",
                    e.to_string(),
                )
            })?;
            for name in st.names() {
                if let Some(prev) = index.insert(name.to_string(), i) {
                    let prev_file = parsed
                        .get(prev)
                        .map_or(file.as_str(), |(f, _): &(String, SafeTensors)| f.as_str());
                    return Err(Error::invalid(
                        OP,
                        format!("tensor `{name}`"),
                        "one shard holding it",
                        format!("both `{prev_file}` and `{file}`"),
                    ));
                }
            }
            parsed.push((file, st));
        }
        // An MTP assistant keeps `pre_projection`, `post_projection` and
        // `masked_embedding.*` outside its decoder: its tensors go by their full names.
        let prefix = if index.contains_key(ASSISTANT_TENSOR) {
            ""
        } else {
            PREFIXES
                .into_iter()
                .find(|p| index.contains_key(&format!("{p}embed_tokens.weight")))
                .ok_or_else(|| {
                    Error::invalid(
                        OP,
                        "embedding tensor",
                        "`model.language_model.embed_tokens.weight` or `model.embed_tokens.weight`",
                        "neither",
                    )
                })?
        };
        Ok(Checkpoint {
            shards: parsed,
            bytes: all_bytes,
            index,
            prefix,
            release: None,
            stream: StreamOptions::default(),
            read: Mutex::new(HashSet::new()),
        })
    }

    /// Calls `release(shard, byte range)` for the shard bytes of each block of rows a load
    /// has uploaded: the CLI drops those pages of its memory maps, so a load does not end
    /// up holding the whole checkpoint (a browser passes nothing).
    pub fn with_release(mut self, release: &'a ReleaseFn<'a>) -> Self {
        self.release = Some(release);
        self
    }

    /// Where Q4 quantisation runs while loading (default [`Quantiser::Auto`]).
    pub fn with_quantiser(mut self, quantiser: Quantiser) -> Self {
        self.stream.quantiser = quantiser;
        self
    }

    /// Source bytes uploaded per block of rows (default
    /// [`BLOCK_BYTES`](crate::weights::upload::BLOCK_BYTES); at least 64 rows a block).
    pub fn with_block_bytes(mut self, bytes: usize) -> Self {
        self.stream.block_bytes = bytes;
        self
    }

    /// The stored bytes of a tensor by its full name, checked against the expected
    /// shape, released a block at a time as the loader is done with them.
    fn raw_full(&self, full: &str, expected_shape: &[usize]) -> Result<RawTensor<'_>> {
        let (file, view) = self.view_full(full)?;
        if view.shape() != expected_shape {
            return Err(Error::invalid(
                OP,
                format!("shape of `{full}` in `{file}`"),
                format!("{expected_shape:?}"),
                format!("{:?}", view.shape()),
            ));
        }
        let dtype = match view.dtype() {
            Dtype::F32 => RawDtype::F32,
            Dtype::F16 => RawDtype::F16,
            Dtype::BF16 => RawDtype::BF16,
            Dtype::I64 => RawDtype::I64,
            Dtype::I32 => RawDtype::I32,
            Dtype::U32 => RawDtype::U32,
            other => {
                return Err(Error::invalid(
                    OP,
                    format!("dtype of `{full}` in `{file}`"),
                    "bf16, f16 or f32 (i64, i32 or u32 for integers)",
                    format!("{other:?}"),
                ))
            }
        };
        let shard = self.index[full];
        let data = view.data();
        let offset = data.as_ptr() as usize - self.bytes[shard].as_ptr() as usize;
        let raw = RawTensor::bytes(dtype, expected_shape, data, format!("`{full}` in `{file}`"));
        Ok(match self.release {
            Some(release) => raw.with_release(move |r: Range<usize>| {
                release(shard, offset + r.start..offset + r.end)
            }),
            None => raw,
        })
    }

    /// The decoder's tensor-name prefix found in this checkpoint (none in an assistant's,
    /// whose tensors go by their full names: [`Checkpoint::unread_tensors`] then counts
    /// every tensor).
    pub fn prefix(&self) -> &str {
        self.prefix
    }

    pub fn has(&self, name: &str) -> bool {
        self.index.contains_key(&self.full_name(name))
    }

    fn full_name(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }

    /// The raw view of a decoder tensor (name without the prefix).
    fn view(&self, name: &str) -> Result<(&str, safetensors::tensor::TensorView<'_>)> {
        self.view_full(&self.full_name(name))
    }

    /// The raw view of a tensor by its full name.
    fn view_full(&self, full: &str) -> Result<(&str, safetensors::tensor::TensorView<'_>)> {
        let full = full.to_string();
        let shard = *self.index.get(&full).ok_or_else(|| {
            Error::invalid(
                OP,
                format!("tensor `{full}`"),
                "present in the checkpoint",
                "missing",
            )
        })?;
        let (file, st) = &self.shards[shard];
        self.read
            .lock()
            .expect("read-tensor set poisoned")
            .insert(full.clone());
        let view = st.tensor(&full).map_err(|e| {
            Error::invalid(
                OP,
                format!("tensor `{full}` in `{file}`"),
                "readable",
                e.to_string(),
            )
        })?;
        Ok((file, view))
    }

    /// The decoder's tensors (under the text prefix) that no load has read, sorted: weights
    /// of layers the config does not have, or of modules it does not enable. Towers outside
    /// the text decoder (vision, audio) are not the text model's and are not counted.
    pub fn unread_tensors(&self) -> Vec<String> {
        let read = self.read.lock().expect("read-tensor set poisoned");
        let mut unread: Vec<String> = self
            .index
            .keys()
            .filter(|n| n.starts_with(self.prefix) && !read.contains(*n))
            .cloned()
            .collect();
        unread.sort();
        unread
    }

    /// After a load: refuses a checkpoint with decoder tensors the load did not read (a
    /// config that does not describe these weights loads a different model than the one
    /// saved), naming them; with `allow_extra` they are returned for the caller to warn
    /// about instead.
    pub fn check_all_read(&self, allow_extra: bool) -> Result<Vec<String>> {
        let unread = self.unread_tensors();
        if unread.is_empty() || allow_extra {
            return Ok(unread);
        }
        Err(Error::invalid(
            OP,
            "tensors",
            "only tensors the config describes (extra ones are allowed with \
             --allow-extra-tensors / allowExtraTensors)",
            describe_unread(&unread),
        ))
    }

    /// Shape of a decoder tensor.
    pub fn shape(&self, name: &str) -> Result<Vec<usize>> {
        Ok(self.view(name)?.1.shape().to_vec())
    }

    /// A decoder tensor converted to f32, checked against the expected shape.
    pub fn f32(&self, name: &str, expected_shape: &[usize]) -> Result<Vec<f32>> {
        self.raw_full(&self.full_name(name), expected_shape)?
            .to_f32()
    }

    /// The storage dtype of the embedding (HF casts `sqrt(hidden)` to it).
    pub fn embedding_dtype(&self) -> Result<Dtype> {
        Ok(self.view("embed_tokens.weight")?.1.dtype())
    }
}

/// "3 more: `a`, `b`, `c`" (the first 5 named).
pub fn describe_unread(unread: &[String]) -> String {
    let shown: Vec<String> = unread.iter().take(5).map(|n| format!("`{n}`")).collect();
    let more = if unread.len() > 5 { ", ..." } else { "" };
    format!(
        "{} tensor(s) the config does not describe: {}{more}",
        unread.len(),
        shown.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use safetensors::tensor::TensorView;

    fn shard(tensors: &[(&str, Dtype, Vec<usize>, Vec<u8>)]) -> Vec<u8> {
        let views: Vec<(String, TensorView)> = tensors
            .iter()
            .map(|(n, d, s, b)| (n.to_string(), TensorView::new(*d, s.clone(), b).unwrap()))
            .collect();
        safetensors::serialize(views, None).unwrap()
    }

    #[test]
    fn loads_prefixed_bf16_and_checks_shapes() {
        let bf: Vec<u8> = [1.5f32, -2.0]
            .iter()
            .flat_map(|v| half::bf16::from_f32(*v).to_le_bytes())
            .collect();
        let a = shard(&[(
            "model.language_model.embed_tokens.weight",
            Dtype::BF16,
            vec![1, 2],
            bf,
        )]);
        let b = shard(&[(
            "model.language_model.norm.weight",
            Dtype::F32,
            vec![2],
            bytemuck::cast_slice(&[3.0f32, 4.0]).to_vec(),
        )]);
        let ck = Checkpoint::from_shards(vec![("a".into(), &a), ("b".into(), &b)]).unwrap();
        assert_eq!(ck.prefix(), "model.language_model.");
        assert_eq!(
            ck.f32("embed_tokens.weight", &[1, 2]).unwrap(),
            vec![1.5, -2.0]
        );
        assert_eq!(ck.f32("norm.weight", &[2]).unwrap(), vec![3.0, 4.0]);
        let err = ck.f32("norm.weight", &[3]).unwrap_err().to_string();
        assert!(
            err.contains("model.language_model.norm.weight")
                && err.contains("[3]")
                && err.contains("[2]"),
            "{err}"
        );
        let err = ck
            .f32("layers.0.mlp.up_proj.weight", &[2, 2])
            .unwrap_err()
            .to_string();
        assert!(err.contains("missing"), "{err}");
        assert_eq!(ck.embedding_dtype().unwrap(), Dtype::BF16);
    }

    #[test]
    fn truncated_shard_and_bad_dtype_are_clear_errors() {
        let a = shard(&[("model.embed_tokens.weight", Dtype::I64, vec![1], vec![0; 8])]);
        let err = Checkpoint::from_shards(vec![("cut.safetensors".into(), &a[..a.len() - 3])])
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("cut.safetensors"), "{err}");
        let ck = Checkpoint::from_shards(vec![("a".into(), &a)]).unwrap();
        assert_eq!(ck.prefix(), "model.");
        let err = ck.f32("embed_tokens.weight", &[1]).unwrap_err().to_string();
        assert!(err.contains("bf16, f16 or f32"), "{err}");
        let none = shard(&[("other", Dtype::F32, vec![1], vec![0; 4])]);
        assert!(Checkpoint::from_shards(vec![("n".into(), &none)]).is_err());
    }

    #[test]
    fn nan_and_inf_weights_name_the_tensor() {
        for (bad, shown) in [(f32::NAN, "NaN"), (f32::INFINITY, "inf")] {
            let a = shard(&[
                ("model.embed_tokens.weight", Dtype::F32, vec![1], vec![0; 4]),
                (
                    "model.norm.weight",
                    Dtype::F32,
                    vec![3],
                    bytemuck::cast_slice(&[1.0f32, bad, 2.0]).to_vec(),
                ),
            ]);
            let ck = Checkpoint::from_shards(vec![("w.safetensors".into(), &a)]).unwrap();
            let err = ck.f32("norm.weight", &[3]).unwrap_err().to_string();
            assert!(
                err.contains("model.norm.weight")
                    && err.contains("w.safetensors")
                    && err.contains(&format!("{shown} at element 1")),
                "{err}"
            );
        }
    }

    #[test]
    fn embed_scale_rounds_to_weight_dtype() {
        assert_eq!(embed_scale(1536, Dtype::BF16), 39.25);
        assert!((embed_scale(1536, Dtype::F32) - 39.191836).abs() < 1e-5);
    }
}
