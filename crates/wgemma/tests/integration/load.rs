//! Loading a checkpoint directory: the GPU quantiser and the streamed CPU path build the
//! same model (same Q4 words, so bit-identical logits) from the golden fixtures stored as
//! f32, f16 and bf16, and the load hands every matrix's bytes back a block at a time.

use crate::common::Fixture;
use safetensors::tensor::TensorView;
use safetensors::{Dtype, SafeTensors};
use std::cell::RefCell;
use std::ops::Range;
use wgemma::formats::hf::Checkpoint;
use wgemma::gpu::test_context;
use wgemma::model::parse_config;
use wgemma::model::state::KvState;
use wgemma::model::target::{ModelOptions, Want};
use wgemma::model::weights::WeightFormat;
use wgemma::weights::upload::Quantiser;

/// The checkpoint with every f32 tensor stored as `dtype` (rounded to nearest even).
fn stored_as(bytes: &[u8], dtype: Dtype) -> Vec<u8> {
    let st = SafeTensors::deserialize(bytes).unwrap();
    let tensors: Vec<(String, Dtype, Vec<usize>, Vec<u8>)> = st
        .tensors()
        .into_iter()
        .map(|(name, view)| {
            let data = view.data();
            if view.dtype() != Dtype::F32 || dtype == Dtype::F32 {
                return (name, view.dtype(), view.shape().to_vec(), data.to_vec());
            }
            let values: Vec<f32> = bytemuck::pod_collect_to_vec(data);
            let out: Vec<u8> = match dtype {
                Dtype::BF16 => values
                    .iter()
                    .flat_map(|&v| half::bf16::from_f32(v).to_le_bytes())
                    .collect(),
                _ => values
                    .iter()
                    .flat_map(|&v| half::f16::from_f32(v).to_le_bytes())
                    .collect(),
            };
            (name, dtype, view.shape().to_vec(), out)
        })
        .collect();
    let views: Vec<(String, TensorView)> = tensors
        .iter()
        .map(|(n, d, s, b)| (n.clone(), TensorView::new(*d, s.clone(), b).unwrap()))
        .collect();
    safetensors::serialize(views, None).unwrap()
}

fn logits(config: &str, ck: &Checkpoint<'_>, format: WeightFormat) -> Vec<f32> {
    let spec = parse_config(config).unwrap();
    let options = ModelOptions {
        format,
        max_context: 64,
        prefill_chunk: 16,
        max_verify_rows: 3,
        sequences: 1,
    };
    let mut state = KvState::load(test_context(), ck, spec, options, &mut |_, _| {}).unwrap();
    let tokens: Vec<u32> = (0..12).map(|i| (i * 37 + 5) % 500).collect();
    pollster::block_on(state.forward(test_context(), &tokens, Want::AllLogits))
        .unwrap()
        .logits
}

#[test]
fn gpu_quantiser_builds_the_same_model_as_the_cpu() {
    for name in ["e2b_like", "dense_kv", "moe"] {
        let Fixture {
            config,
            model: f32_bytes,
            ..
        } = Fixture::open(name);
        for dtype in [Dtype::F32, Dtype::BF16, Dtype::F16] {
            let bytes = stored_as(&f32_bytes, dtype);
            // The MoE fixture's experts (K 32) need group 32: experts have no f16 fallback.
            let groups: &[usize] = if name == "moe" { &[32] } else { &[32, 64] };
            for &group in groups {
                let format = WeightFormat::Q4 { group };
                let load = |quantiser: Quantiser, block_bytes: usize| {
                    let ck = Checkpoint::from_shards(vec![("m".into(), &bytes[..])])
                        .unwrap()
                        .with_quantiser(quantiser)
                        .with_block_bytes(block_bytes);
                    logits(&config, &ck, format)
                };
                // Whole tensors on the CPU (the reference), 64-row blocks on the GPU.
                let cpu = load(Quantiser::Cpu, usize::MAX);
                let gpu = load(Quantiser::Gpu, 1);
                assert_eq!(cpu.len(), gpu.len());
                let same = cpu
                    .iter()
                    .zip(&gpu)
                    .all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(
                    same,
                    "{name} {dtype:?} q4 group {group}: GPU and CPU loads differ"
                );
            }
        }
    }
}

#[test]
fn f16_and_f32_layouts_stream_to_the_same_model() {
    let Fixture {
        config,
        model: bytes,
        ..
    } = Fixture::open("e2b_like");
    for format in [WeightFormat::F16, WeightFormat::F32] {
        let load = |block_bytes: usize| {
            let ck = Checkpoint::from_shards(vec![("m".into(), &bytes[..])])
                .unwrap()
                .with_block_bytes(block_bytes);
            logits(&config, &ck, format)
        };
        let (whole, blocks) = (load(usize::MAX), load(1));
        assert!(whole
            .iter()
            .zip(&blocks)
            .all(|(a, b)| a.to_bits() == b.to_bits()));
    }
}

/// The loader gives back every matrix's bytes exactly once, a block (64 rows here) at a
/// time: nothing it has uploaded stays mapped, so a load holds one block of the source.
#[test]
fn every_matrix_is_released_block_by_block() {
    let Fixture {
        config,
        model: bytes,
        ..
    } = Fixture::open("e2b_like");
    let bytes = stored_as(&bytes, Dtype::BF16);
    let released: RefCell<Vec<Range<usize>>> = RefCell::new(Vec::new());
    let release = |shard: usize, range: Range<usize>| {
        assert_eq!(shard, 0);
        released.borrow_mut().push(range);
    };
    for quantiser in [Quantiser::Cpu, Quantiser::Gpu] {
        released.borrow_mut().clear();
        let ck = Checkpoint::from_shards(vec![("m".into(), &bytes[..])])
            .unwrap()
            .with_release(&release)
            .with_quantiser(quantiser)
            .with_block_bytes(1);
        logits(&config, &ck, WeightFormat::Q4 { group: 32 });
        // Every tensor of two or more dimensions is a matrix the loader streams.
        let (header, meta) = SafeTensors::read_metadata(&bytes).unwrap();
        let data_start = 8 + header;
        let mut want: Vec<(Range<usize>, usize)> = meta
            .tensors()
            .iter()
            .filter(|(_, info)| info.shape.len() >= 2)
            .map(|(_, info)| {
                let (a, b) = info.data_offsets;
                (
                    data_start + a..data_start + b,
                    info.shape[1..].iter().product::<usize>() * 2,
                )
            })
            .collect();
        want.sort_by_key(|(r, _)| r.start);
        let mut got = released.borrow().clone();
        got.sort_by_key(|r| r.start);
        // Blocks tile each matrix in order, none longer than 64 rows.
        let mut blocks = got.iter().peekable();
        for (tensor, row_bytes) in &want {
            let mut at = tensor.start;
            while at < tensor.end {
                let b = blocks
                    .next()
                    .unwrap_or_else(|| panic!("{quantiser:?}: {tensor:?} not released past {at}"));
                assert_eq!(b.start, at, "{quantiser:?}: blocks of {tensor:?}");
                assert!(
                    b.len() <= 64 * row_bytes,
                    "{quantiser:?}: block {b:?} over 64 rows"
                );
                at = b.end;
            }
            assert_eq!(at, tensor.end);
        }
        assert!(
            blocks.next().is_none(),
            "{quantiser:?}: released more than the matrices"
        );
    }
}
