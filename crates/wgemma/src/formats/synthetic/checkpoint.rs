//! A synthetic checkpoint in Hugging Face layout (bf16 safetensors under
//! `model.language_model.`, next to the shape's config.json), streamed to any sink: what
//! measures loading a real-size checkpoint directory against its artifact without a
//! download (`wgemma synth-checkpoint --shape e2b`).

use crate::error::Result;
use crate::formats::artifact::plan::{target_plan, StoredTensor};
use crate::formats::artifact::writer::TensorWriter;
use crate::formats::synthetic::{SyntheticShape, SyntheticWeights};
use crate::model::weights::WeightFormat;
use safetensors::Dtype;
use std::collections::BTreeMap;
use std::io::{Seek, Write};

/// The prefix real Gemma 4 checkpoints use for the text decoder.
const PREFIX: &str = "model.language_model.";
/// Elements generated and written at once.
const BLOCK: usize = 8 << 20;

/// The checkpoint tensors of `shape` (decoder names without prefix, shapes), in plan order.
pub fn checkpoint_tensors(shape: SyntheticShape) -> Vec<(String, Vec<usize>)> {
    let plan = target_plan(&shape.spec(), WeightFormat::F32, &|_| true);
    let mut seen = std::collections::HashSet::new();
    plan.into_iter()
        .flat_map(|w| w.parts)
        .filter(|(name, _)| seen.insert(name.clone()))
        .collect()
}

/// Writes `model.safetensors` of `shape` with the weights of [`SyntheticWeights`] `seed`
/// (rounded to bf16) to `sink`; `progress` gets (bytes written, bytes total).
pub fn write_synthetic_checkpoint<W: Write + Seek>(
    sink: W,
    shape: SyntheticShape,
    seed: u64,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<W> {
    let tensors = checkpoint_tensors(shape);
    let stored: Vec<StoredTensor> = tensors
        .iter()
        .map(|(name, shape)| StoredTensor {
            name: format!("{PREFIX}{name}"),
            dtype: Dtype::BF16,
            shape: shape.clone(),
        })
        .collect();
    let total: u64 = stored.iter().map(|t| t.byte_len() as u64).sum();
    let metadata = BTreeMap::from([("format".to_string(), "pt".to_string())]);
    let mut w = TensorWriter::begin(sink, stored, &metadata)?;
    let weights = SyntheticWeights { seed };
    let mut done = 0u64;
    for (name, shape) in &tensors {
        let n: usize = shape.iter().product();
        let full = format!("{PREFIX}{name}");
        let mut start = 0;
        while start < n {
            let end = (start + BLOCK).min(n);
            let bytes = bf16_block(&weights, name, shape, start..end);
            w.write(&full, &bytes)?;
            done += bytes.len() as u64;
            progress(done, total);
            start = end;
        }
    }
    w.finish(|_| metadata.clone())
}

/// Elements `range` of a synthetic tensor as bf16 bytes. Each value is a pure function of
/// its index, so the range is split over the cores natively (a 31B checkpoint is 62 GB);
/// the bytes are the same whatever the split.
fn bf16_block(
    weights: &SyntheticWeights,
    name: &str,
    shape: &[usize],
    range: std::ops::Range<usize>,
) -> Vec<u8> {
    let encode = |r: std::ops::Range<usize>, out: &mut [u8]| {
        for (o, v) in out.chunks_exact_mut(2).zip(weights.values(name, shape, r)) {
            o.copy_from_slice(&half::bf16::from_f32(v).to_le_bytes());
        }
    };
    let mut bytes = vec![0u8; 2 * range.len()];
    let threads = if cfg!(target_arch = "wasm32") || range.len() < (1 << 20) {
        1
    } else {
        std::thread::available_parallelism()
            .map_or(1, |t| t.get())
            .min(32)
    };
    let per = range.len().div_ceil(threads);
    std::thread::scope(|scope| {
        for (t, out) in bytes.chunks_mut(2 * per).enumerate() {
            let start = range.start + t * per;
            let r = start..start + out.len() / 2;
            if threads == 1 {
                encode(r, out);
            } else {
                scope.spawn(move || encode(r, out));
            }
        }
    });
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::hf::Checkpoint;

    #[test]
    fn blocks_split_over_threads_equal_the_serial_values() {
        let weights = SyntheticWeights { seed: 7 };
        let shape = [3, 1 << 19];
        let range = 5..(1 << 20) + 11;
        let want: Vec<u8> = weights
            .values("layers.0.mlp.up_proj.weight", &shape, range.clone())
            .into_iter()
            .flat_map(|v| half::bf16::from_f32(v).to_le_bytes())
            .collect();
        assert_eq!(
            bf16_block(&weights, "layers.0.mlp.up_proj.weight", &shape, range),
            want
        );
    }

    #[test]
    fn the_tiny_checkpoint_reads_back_as_the_synthetic_weights_in_bf16() {
        let bytes = write_synthetic_checkpoint(
            std::io::Cursor::new(Vec::new()),
            SyntheticShape::Tiny,
            3,
            &mut |_, _| {},
        )
        .unwrap()
        .into_inner();
        let ck = Checkpoint::from_shards(vec![("model.safetensors".into(), &bytes)]).unwrap();
        let synthetic = SyntheticWeights { seed: 3 };
        for (name, shape) in checkpoint_tensors(SyntheticShape::Tiny) {
            let want: Vec<f32> = synthetic
                .f32(&name, &shape)
                .into_iter()
                .map(|v| half::bf16::from_f32(v).to_f32())
                .collect();
            assert_eq!(ck.f32(&name, &shape).unwrap(), want, "{name}");
        }
    }
}
