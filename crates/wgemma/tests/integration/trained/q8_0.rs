//! Q8_0 at its stored precision on TRAINED weights (issue 45's target: a Q8_0 model loaded
//! with no flags within 3e-2 of the reference): the shipped target of
//! `models/kjv-pair.wgemma` with every matrix re-stored as Q8_0 blocks (ggml's reference
//! quantiser, of the artifact's values) and handed to the loader as a GGUF file hands them
//! over (ggml blocks, uploaded as stored), against HF on the artifact's values
//! (`tests/data/trained`). A GGUF file of it would be 15 MB, so the blocks are made here; the
//! container is tested by tests/integration/gguf_native.rs.

use super::int8::{context, decode_logits, perplexity};
use super::{artifact_bytes, expected, load_pair_on};
use crate::common::{ids, read_data};
use safetensors::SafeTensors;
use std::borrow::Cow;
use wgemma::error::{Error, Result};
use wgemma::formats::artifact::{Artifact, ArtifactWeights, Which};
use wgemma::formats::gguf::quant::GgmlType;
use wgemma::gpu::{ActivationChoice, GpuContext};
use wgemma::model::state::KvState;
use wgemma::model::target::ModelOptions;
use wgemma::model::weights::WeightFormat;
use wgemma::ops::linear::Q4Host;
use wgemma::weights::layout::MatrixLayout;
use wgemma::weights::raw::{RawData, RawDtype, RawTensor};
use wgemma::weights::source::WeightSource;
use wgemma::weights::upload::StreamOptions;

/// ggml's `quantize_row_q8_0_ref`: per 32 values `d = amax / 127`, `q = round(x / d)`.
fn quantize_q8_0(row: &[f32], out: &mut Vec<u8>) {
    for block in row.chunks(32) {
        let amax = block.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let d = amax / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        out.extend(half::f16::from_f32(d).to_le_bytes());
        out.extend(block.iter().map(|&x| (x * id).round() as i8 as u8));
    }
}

/// The artifact's weights with every Q4 matrix handed over as Q8_0 blocks.
struct AsQ8<'s, 'a> {
    inner: ArtifactWeights<'s, 'a>,
}

impl WeightSource for AsQ8<'_, '_> {
    fn tensor(&self, name: &str, expected_shape: &[usize]) -> Result<RawTensor<'_>> {
        let raw = self.inner.tensor(name, expected_shape)?;
        let (RawDtype::Prepared(MatrixLayout::Q4 { group }), RawData::Q4Words { packed, scales }) =
            (raw.dtype, &raw.data)
        else {
            return Ok(raw);
        };
        let (n, k) = (raw.rows(), raw.k());
        let q = Q4Host::from_parts(
            n,
            k,
            group,
            bytemuck::pod_collect_to_vec(packed),
            bytemuck::pod_collect_to_vec(scales),
        )?;
        if k % 32 != 0 {
            return Err(Error::invalid("test", "K", "a multiple of 32", k));
        }
        let (mut row, mut bytes) = (vec![0.0f32; k], Vec::with_capacity(n * k / 32 * 34));
        for r in 0..n {
            q.dequantize_row(r, &mut row);
            quantize_q8_0(&row, &mut bytes);
        }
        Ok(RawTensor {
            dtype: RawDtype::Ggml(GgmlType::Q8_0),
            shape: raw.shape.clone(),
            data: RawData::Bytes(Cow::Owned(bytes)),
            what: raw.what.clone(),
            release: None,
        })
    }

    fn has(&self, name: &str) -> bool {
        self.inner.has(name)
    }

    fn stores_stacked(&self) -> bool {
        true
    }

    fn stream_options(&self) -> StreamOptions {
        StreamOptions {
            native_ggml: true,
            ..StreamOptions::default()
        }
    }
}

/// The shipped target with its matrices as Q8_0 blocks, run as stored, on `ctx`.
fn load_q8_0(ctx: &GpuContext) -> KvState {
    let artifact = Artifact::parse(artifact_bytes()).unwrap();
    let source = AsQ8 {
        inner: artifact.weights(Which::Target, false).unwrap(),
    };
    let options = ModelOptions {
        format: WeightFormat::Q4 { group: 32 },
        max_context: 256,
        prefill_chunk: 64,
        max_verify_rows: 8,
        sequences: 1,
    };
    let spec = artifact.target_spec().clone();
    KvState::load(ctx, &source, spec, options, &mut |_, _| {}).unwrap()
}

/// Worst max |diff| / logit scale (max |HF logit|, at least 1) over the rows.
fn worst_relative(rows: &[Vec<f32>], want: &[f32]) -> f32 {
    let vocab = want.len() / rows.len();
    let relative = |(got, want): (&Vec<f32>, &[f32])| {
        let scale = want.iter().fold(1.0f32, |m, v| m.max(v.abs()));
        let diff = got.iter().zip(want).map(|(a, b)| (a - b).abs());
        diff.fold(0.0f32, f32::max) / scale
    };
    rows.iter()
        .zip(want.chunks(vocab))
        .map(relative)
        .fold(0.0, f32::max)
}

/// As stored, with f32 activations and with int8 ones (what `auto` runs on a GPU with
/// integer dot products: the Q8_0 matvecs take `ggml_matvec_q8_0_int8`), one decode step
/// per token of prompt 0 and its greedy continuation: within 3e-2 of HF's logits at every
/// position; and the held-out chapter's perplexity (150 tokens, verify-sized forwards of 8
/// rows) within 1% of the shipped artifact's own. (`--dtype q4` would put these Q8_0
/// values back onto the very Q4 grid HF ran on, so it is no yardstick here.)
#[test]
fn q8_0_of_the_trained_target_stays_within_3e_2_of_hf() {
    let p = &expected()["prompts"][0];
    let tokens = [ids(&p["prompt"]), ids(&p["greedy"])].concat();
    let logits = read_data("trained/logits.safetensors");
    let st = SafeTensors::deserialize(&logits).unwrap();
    let key = p["logits_key"].as_str().unwrap();
    let want: Vec<f32> = bytemuck::pod_collect_to_vec(st.tensor(key).unwrap().data());
    let held_out = ids(&expected()["prompts"][1]["prompt"]);
    let f32_ctx = context(ActivationChoice::F32);
    let (mut shipped, _) = load_pair_on(f32_ctx);
    let shipped_ppl = perplexity(
        &decode_logits(f32_ctx, &mut shipped, &held_out, 8),
        &held_out,
    );
    for choice in [ActivationChoice::F32, ActivationChoice::Int8] {
        let ctx = context(choice);
        let mut q8 = load_q8_0(ctx);
        let diff = worst_relative(&decode_logits(ctx, &mut q8, &tokens, 1), &want);
        let ppl = perplexity(&decode_logits(ctx, &mut q8, &held_out, 8), &held_out);
        eprintln!(
            "trained target as Q8_0, {choice:?} activations: max |diff| / logit scale vs HF \
             {diff:.4}; held-out perplexity {ppl:.4} (the shipped Q4 artifact {shipped_ppl:.4}, \
             {:+.3}%)",
            (ppl / shipped_ppl - 1.0) * 100.0
        );
        assert!(diff <= 3e-2, "Q8_0 as stored, {choice:?}: {diff}");
        assert!((ppl / shipped_ppl - 1.0).abs() < 0.01, "{choice:?}: {ppl}");
    }
}
