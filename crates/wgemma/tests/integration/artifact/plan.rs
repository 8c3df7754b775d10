//! The weight declarations are what a load does: the artifact plan of a checkpoint lists
//! exactly the tensors a load reads, and the GPU bytes it counts.

use super::options;
use crate::common::Fixture;
use std::cell::RefCell;
use std::collections::BTreeSet;
use wgemma::formats::artifact::plan::{assistant_plan, target_plan, PlannedWeight, Prep};
use wgemma::formats::hf::Checkpoint;
use wgemma::gpu::test_context;
use wgemma::model::assistant::{parse_assistant_config, Assistant, AssistantOptions};
use wgemma::model::parse_config;
use wgemma::model::state::KvState;
use wgemma::model::weights::WeightFormat;
use wgemma::ops::opset::OpSet;
use wgemma::weights::layout::{MatrixLayout, MatrixUse};
use wgemma::weights::raw::RawTensor;
use wgemma::weights::source::WeightSource;

struct Recording<'a> {
    inner: Checkpoint<'a>,
    read: RefCell<BTreeSet<String>>,
}

impl<'a> Recording<'a> {
    fn new(inner: Checkpoint<'a>) -> Self {
        Recording {
            inner,
            read: RefCell::new(BTreeSet::new()),
        }
    }

    fn note(&self, name: &str) {
        self.read.borrow_mut().insert(name.to_string());
    }
}

impl WeightSource for Recording<'_> {
    fn tensor(&self, name: &str, shape: &[usize]) -> wgemma::Result<RawTensor<'_>> {
        self.note(name);
        self.inner.tensor(name, shape)
    }
    fn has(&self, name: &str) -> bool {
        self.inner.has(name)
    }
}

/// The checkpoint tensors a load of `plan` reads: every part of every planned weight.
fn names(plan: &[PlannedWeight]) -> BTreeSet<String> {
    plan.iter()
        .flat_map(|w| w.parts.iter().map(|(name, _)| name.clone()))
        .collect()
}

/// The GPU bytes a load of `plan` makes (all, tables): each stored tensor once, the tied
/// embedding twice (its table and its lm_head), host-only `layer_scalar`s not at all.
fn planned_gpu_bytes(plan: &[PlannedWeight]) -> (u64, u64) {
    let (mut total, mut tables) = (0, 0);
    for w in plan {
        let stored: u64 = w.stored("").iter().map(|t| t.byte_len() as u64).sum();
        match &w.prep {
            Prep::F32 { .. } if w.name.ends_with("layer_scalar") => {}
            // A tied Q4 table reads its lm_head's buffers (one copy, read whole per step).
            Prep::Matrix {
                usage: MatrixUse::TableAndLinear,
                layout: MatrixLayout::Q4 { .. },
                ..
            } => total += stored,
            Prep::Matrix { usage, .. } if *usage == MatrixUse::TableAndLinear => {
                total += 2 * stored;
                tables += stored;
            }
            Prep::Matrix { usage, .. } if *usage == MatrixUse::Table => {
                total += stored;
                tables += stored;
            }
            _ => total += stored,
        }
    }
    (total, tables)
}

/// The declarations are what a load does: a load reads exactly the tensors the artifact
/// plan lists (target and assistant), and the bytes it counts are the plan's.
#[test]
fn declarations_give_the_loaded_bytes_and_the_plan() {
    let ctx = test_context();
    for (name, assistant) in [
        ("e2b_like", Some("e2b_like_assistant")),
        ("dense_kv", Some("dense_kv_assistant")),
        ("moe", None),
        ("k_quant", None),
    ] {
        for format in [
            WeightFormat::F32,
            WeightFormat::F16,
            WeightFormat::Q4 { group: 32 },
        ] {
            let t = Fixture::open(name);
            let source = Recording::new(t.checkpoint());
            let spec = parse_config(&t.config).unwrap();
            let plan = target_plan(&spec, format, &|n| WeightSource::has(&source, n));
            let target =
                KvState::load(ctx, &source, spec, options(format), &mut |_, _| {}).unwrap();
            assert_eq!(*source.read.borrow(), names(&plan), "{name} {format:?}");
            let (total, tables) = planned_gpu_bytes(&plan);
            assert_eq!(target.model().weight_bytes(), total, "{name} {format:?}");
            assert_eq!(
                target.model().weight_bytes() - target.model().decode_weight_bytes(),
                tables,
                "{name} {format:?}"
            );
            let Some(assistant) = assistant else {
                continue;
            };
            let a = Fixture::open(assistant);
            let source = Recording::new(a.checkpoint());
            let aspec = parse_assistant_config(&a.config).unwrap();
            let plan = assistant_plan(&aspec, format, &|n| WeightSource::has(&source, n));
            let options = AssistantOptions { format };
            Assistant::load(ctx, &source, aspec, &target, &OpSet::with_mtp(), options).unwrap();
            assert_eq!(
                *source.read.borrow(),
                names(&plan),
                "{assistant} {format:?}"
            );
        }
    }
}
